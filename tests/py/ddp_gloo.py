# DistributedDataParallel on gloo through init_process_group(env://): the
# program is unchanged from what runs under torchrun.
import os

import torch
import torch.distributed as dist
import torch.nn as nn

dist.init_process_group("gloo")
rank = dist.get_rank()
world = dist.get_world_size()
assert world == int(os.environ["WORLD_SIZE"])
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(nn.Linear(4, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.full((8, 4), float(rank + 1))
loss = model(x).sum()
loss.backward()
opt.step()
# After the step every replica must hold the same parameters.
flat = torch.cat([p.detach().flatten() for p in model.parameters()])
gathered = [torch.zeros_like(flat) for _ in range(world)]
dist.all_gather(gathered, flat)
assert all(torch.equal(g, gathered[0]) for g in gathered), "replicas diverged"
print(f"rank={rank} DDP OK", flush=True)
dist.destroy_process_group()
