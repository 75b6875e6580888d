"""An old tutorial's worker: builds tcp://MASTER_ADDR:<port> itself from the
--master_port it was given (argv[1]) and initializes PyTorch's Gloo process
group with it, then all-reduces its rank + 1. Under torchrun 2.x (and
meshrun) TORCHELASTIC_USE_AGENT_STORE=True makes every rank a client of the
agent store on that port. Prints "tcp_init rank=R sum=S master_port=P"."""
import os
import sys

import torch
import torch.distributed as dist

port = sys.argv[1]
dist.init_process_group("gloo", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{port}",
                        rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
print(f"tcp_init rank={dist.get_rank()} sum={int(t.item())} master_port={os.environ['MASTER_PORT']}", flush=True)
dist.destroy_process_group()
