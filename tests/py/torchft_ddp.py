"""A torchft training loop, as a torchft user writes it (torchft 0.2.0's Manager and
Optimizer, gradients averaged over the replica groups through the Manager, Gloo, CPU), for tests/e2e/torchft_ddp_test.sh
under `meshrun --replica_groups`. Nothing meshrun-specific: the replica group, the rank, the
group's store and the lighthouse come from the environment meshrun gives (REPLICA_GROUP_ID,
RANK, WORLD_SIZE, MASTER_ADDR/MASTER_PORT, TORCHFT_LIGHTHOUSE).

Every worker trains the same small model on the same batch at each step (drawn from the step
number), so all replicas stay equal exactly when a restarted group healed from a peer: one that
started over from its initial weights would differ at the end. Each worker appends
"step unix_time restart_count participants" to OUT/g<group>r<rank>.steps after each committed
step and writes OUT/g<group>r<rank>.final (its parameters' SHA-256 and the step) once it reached
STEPS (default 200). STEP_SECONDS (default 0) is added to each step, as a larger model's
compute would take. KILL_AT=N: rank KILL_RANK (default 0) of group KILL_GROUP (default 1) kills
itself with SIGKILL after its committed step N at its first start, as a crashed worker would
(for the benchmark bench/replica_groups/step_loss.sh; the test kills from outside). Bounded:
TIME_LIMIT seconds (default 300) in all. Exit 0, or 1 with one line on stderr."""
import hashlib
import os
import signal
import struct
import sys
import time
from datetime import timedelta

import torch
from torch import nn, optim
from torchft import Manager, Optimizer, ProcessGroupGloo

group = int(os.environ["REPLICA_GROUP_ID"])
rank = int(os.environ["RANK"])
restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
out = os.environ["OUT"]
steps = int(os.environ.get("STEPS", "200"))
step_seconds = float(os.environ.get("STEP_SECONDS", "0"))
kill_at = int(os.environ.get("KILL_AT", "-1"))
kill_me = group == int(os.environ.get("KILL_GROUP", "1")) and rank == int(os.environ.get("KILL_RANK", "0"))
deadline = time.monotonic() + float(os.environ.get("TIME_LIMIT", "300"))
me = f"g{group}r{rank}"

torch.manual_seed(0)
torch.set_num_threads(1)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
inner = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def state_dict():
    return {"model": model.state_dict(), "optim": inner.state_dict()}


def load_state_dict(sd):
    model.load_state_dict(sd["model"])
    inner.load_state_dict(sd["optim"])


manager = Manager(
    # A peer that died fails the collective: at once where its connection resets, after the
    # process group's timeout for a rank waiting on data the dead peer was to relay. The
    # Manager's timeout (its should_commit vote, which waits for every rank of the group)
    # must be longer: at equal timeouts (torchft's defaults are both 60 s) a healthy rank
    # whose collective failed at once gave up on the vote just before its peer, still in the
    # collective, voted, and crashed its healthy group (2 runs in 7 here, at 20 s each).
    pg=ProcessGroupGloo(timeout=timedelta(seconds=10)),
    min_replica_size=1,
    load_state_dict=load_state_dict,
    state_dict=state_dict,
    replica_id=f"ddp_{group}",
    timeout=timedelta(seconds=30),
    quorum_timeout=timedelta(seconds=30),
    connect_timeout=timedelta(seconds=30),
)
opt = Optimizer(manager, inner)
loss_fn = nn.MSELoss()

with open(os.path.join(out, f"{me}.steps"), "a", buffering=1) as log:
    while manager.current_step() < steps:
        if time.monotonic() > deadline:
            sys.exit(f"{me}: step {manager.current_step()} of {steps} when the time limit passed")
        g = torch.Generator().manual_seed(manager.current_step())
        x = torch.randn(32, 16, generator=g)
        y = torch.randn(32, 4, generator=g)
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        # Data parallel through the Manager: each gradient averaged over the quorum's replica
        # groups, as torchft's DistributedDataParallel does from its communication hook. (Its
        # hook asserts on a collective that failed because a peer died: torchft 0.2.0's ddp.py,
        # "assert fut._fut", which crashed a healthy group in about 1 run of 5 here. The
        # Manager's own allreduce reports the failure instead, and the step is not committed.)
        for p in model.parameters():
            manager.allreduce(p.grad).wait()
        time.sleep(step_seconds)
        before = manager.current_step()
        opt.step()  # Commits (or not) through the quorum: current_step grows on a commit.
        if manager.current_step() > before:
            log.write(f"{manager.current_step()} {time.time():.3f} {restart} {manager.num_participants()}\n")
            if kill_me and restart == "0" and manager.current_step() == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

params = [v for p in model.parameters() for v in p.detach().flatten().tolist()]
digest = hashlib.sha256(struct.pack(f"{len(params)}d", *params)).hexdigest()
with open(os.path.join(out, f"{me}.final"), "w") as f:
    f.write(f"{digest} {manager.current_step()} {restart}\n")
manager.shutdown(wait=False)
