"""The restart-the-world side of bench/replica_groups/step_loss.sh: the same model, batches and
step time as tests/py/torchft_ddp.py, as plain DDP over Gloo (init_process_group(env://)), which
saves a checkpoint every CKPT_EVERY steps (rank 0; default 25) to OUT/ckpt.pt and loads it at
start, as a job restarted by torchrun or by meshrun without replica groups must. Each worker
appends "step unix_time restart_count world_size" to OUT/r<rank>.steps after each step and
writes OUT/r<rank>.final at STEPS (default 200). STEP_SECONDS (default 0) is added to each step.
KILL_AT=N: rank KILL_RANK (default 1) of the first start kills itself with SIGKILL after step N,
as a crashed worker would."""
import os
import signal
import time

import torch
import torch.distributed as dist
from torch import nn, optim

dist.init_process_group("gloo")
rank = dist.get_rank()
restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
out = os.environ["OUT"]
steps = int(os.environ.get("STEPS", "200"))
step_seconds = float(os.environ.get("STEP_SECONDS", "0"))
ckpt_every = int(os.environ.get("CKPT_EVERY", "25"))
kill_at = int(os.environ.get("KILL_AT", "-1"))
kill_rank = int(os.environ.get("KILL_RANK", "1"))
ckpt = os.path.join(out, "ckpt.pt")

torch.manual_seed(0)
torch.set_num_threads(1)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
inner = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
step = 0
if os.path.exists(ckpt):
    state = torch.load(ckpt)
    model.load_state_dict(state["model"])
    inner.load_state_dict(state["optim"])
    step = state["step"]
ddp = nn.parallel.DistributedDataParallel(model)
loss_fn = nn.MSELoss()
with open(os.path.join(out, f"r{rank}.steps"), "a", buffering=1) as log:
    while step < steps:
        g = torch.Generator().manual_seed(step)
        x = torch.randn(32, 16, generator=g)
        y = torch.randn(32, 4, generator=g)
        inner.zero_grad()
        loss_fn(ddp(x), y).backward()
        time.sleep(step_seconds)
        inner.step()
        step += 1
        log.write(f"{step} {time.time():.3f} {restart} {dist.get_world_size()}\n")
        if rank == 0 and step % ckpt_every == 0:
            torch.save({"model": model.state_dict(), "optim": inner.state_dict(), "step": step}, ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
        if step == kill_at and rank == kill_rank and restart == "0":
            os.kill(os.getpid(), signal.SIGKILL)
with open(os.path.join(out, f"r{rank}.final"), "w") as f:
    f.write(f"{step} {restart}\n")
dist.destroy_process_group()
