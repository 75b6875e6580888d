# One rank of a 4-worker DDP trainer's start (bench/ddp_first_step): imports
# PyTorch, joins the process group (Gloo, env://, the launcher's store), wraps
# a small MLP in DistributedDataParallel and takes one optimizer step. Prints
# "first_step=S": seconds from BENCH_T0 (the launch, epoch seconds) to the end
# of that step on this rank.
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

t0 = float(os.environ["BENCH_T0"])
dist.init_process_group("gloo", init_method="env://")
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, 1024)
y = torch.randint(0, 10, (32,))
loss = torch.nn.functional.cross_entropy(model(x), y)
loss.backward()
opt.step()
print("first_step=%.3f rank=%d" % (time.time() - t0, dist.get_rank()), flush=True)
dist.destroy_process_group()
