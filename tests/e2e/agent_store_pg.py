"""A worker: init_process_group("gloo", init_method="env://") through
meshrun's agent store, an all-reduce and a barrier; then checks that this
worker holds no listening socket on MASTER_PORT (the store is the agent's,
not worker rank 0's) and that the store is a client of MASTER_ADDR:MASTER_PORT.
Prints "ok RANK SUM" on success."""
import os
import sys

import torch
import torch.distributed as dist

port = int(os.environ["MASTER_PORT"])
assert os.environ["TORCHELASTIC_USE_AGENT_STORE"] == "True", os.environ["TORCHELASTIC_USE_AGENT_STORE"]
dist.init_process_group("gloo", init_method="env://")
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
dist.barrier()


def listening_inodes(port):
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f[9])
    return inodes


mine = set()
for fd in os.listdir("/proc/self/fd"):
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        continue
    if target.startswith("socket:["):
        mine.add(target[8:-1])
held = listening_inodes(port)
if not held:
    sys.exit(f"rank {dist.get_rank()}: nothing listens on MASTER_PORT {port}")
if held & mine:
    sys.exit(f"rank {dist.get_rank()}: this worker listens on MASTER_PORT {port} itself")
print(f"ok {dist.get_rank()} {int(t.item())}", flush=True)
dist.destroy_process_group()
