#!/usr/bin/env python3
"""A data-parallel PyTorch trainer to start from: DistributedDataParallel over Gloo or NCCL,
a small model on synthetic data, and checkpoints that survive preemption and restarts.

Run it under meshrun as under torchrun (it reads only the standard worker variables):

    meshrun --standalone --nproc_per_node=4 examples/train.py --steps=500
    meshrun --nnodes=2 --nproc_per_node=8 --rdzv_endpoint=head:29400 --rdzv_id=job1 \\
        examples/train.py --checkpoint_dir=/shared/ckpt/job1

Backend: --backend=auto (the default) takes NCCL when CUDA devices and NCCL are there (each
worker on the GPU of its LOCAL_RANK), else Gloo on the CPU; --backend=gloo|nccl forces one.

Checkpoints (one file, <checkpoint_dir>/checkpoint.pt, written by rank 0 to a temporary name and
renamed, so that a crash never leaves half a file):
  - every --checkpoint_every steps, and at the end;
  - on SIGTERM (what meshrun, torchrun, Slurm and Kubernetes send to stop a job): every rank
    finishes the step it is in, rank 0 saves, and the workers exit with 143 (128 + SIGTERM);
  - on SIGUSR1 (Slurm's notice before the time limit, `#SBATCH --signal=USR1@120`, which meshrun
    passes on to every worker): rank 0 saves, and training goes on.
The ranks agree on every stop and save through one small all-reduce per step, so they all stop
at the same step and none waits in a collective for a peer that has left.

Resuming: at start, when the checkpoint exists, training goes on from its step: after a restart
by meshrun (TORCHELASTIC_RESTART_COUNT > 0, a worker failed) as after a new job (a requeued or
resubmitted one). Only rank 0 reads the file; it sends the state to the others, so in a job of
several nodes the directory must be reachable from node rank 0's host, e.g. shared storage.

Prints "rank=0 step=<n> loss=<x>" every --log_every steps, "resumed from step <n> (restart
count <k>)", "checkpoint saved at step <n> (<why>)", and "done: <n> steps" at the end.
--fail_at_step=N makes rank 1 exit with code 3 at step N of the first attempt (restart count 0):
a way to try restarts (meshrun --max_restarts=1 ...).
"""
import argparse
import os
import signal
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

FEATURES = 16


class Flags:
    """What the signal handlers ask for; acted on at the next step boundary."""

    stop = False
    save = False


def on_sigterm(signo, frame):
    Flags.stop = True


def on_sigusr1(signo, frame):
    Flags.save = True


def parse_args(argv):
    p = argparse.ArgumentParser(prog="train.py", description="DDP trainer with checkpoints (see the file's header)")
    p.add_argument("--steps", type=int, default=1000, help="total optimizer steps (default 1000)")
    p.add_argument("--batch_size", type=int, default=32, help="samples per rank per step")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto")
    p.add_argument("--checkpoint_dir", default=os.environ.get("CHECKPOINT_DIR", "checkpoints"),
                   help="where checkpoint.pt lives (default $CHECKPOINT_DIR, else ./checkpoints)")
    p.add_argument("--checkpoint_every", type=int, default=100, help="steps between checkpoints (0: never)")
    p.add_argument("--log_every", type=int, default=10)
    p.add_argument("--fail_at_step", type=int, default=-1, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def pick_backend(choice):
    if choice != "auto":
        return choice
    return "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"


def make_model():
    return nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, 1))


def batch_for(step, rank, batch_size, device):
    """Synthetic regression data, the same for a given (step, rank) in every run, so a resumed
    job sees what an uninterrupted one would: y = x . w + noise, with one fixed w."""
    w = torch.linspace(-1.0, 1.0, FEATURES, device=device)
    g = torch.Generator().manual_seed(1_000_003 * step + rank)
    x = torch.randn(batch_size, FEATURES, generator=g).to(device)
    noise = 0.01 * torch.randn(batch_size, generator=g).to(device)
    return x, (x @ w + noise).unsqueeze(1)


def save_checkpoint(path, step, model, opt, why):
    """Rank 0 only: writes atomically (temporary file, then rename)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    state = {"step": step, "model": model.module.state_dict(), "optimizer": opt.state_dict()}
    tmp = f"{path}.tmp.{os.getpid()}"
    torch.save(state, tmp)
    os.replace(tmp, path)
    print(f"checkpoint saved at step {step} ({why}): {path}", flush=True)


def load_checkpoint(path, rank, device):
    """The checkpoint's state on every rank (read by rank 0, broadcast), or None when rank 0 has
    none."""
    box = [None]
    if rank == 0 and os.path.exists(path):
        box[0] = torch.load(path, map_location="cpu")
    dist.broadcast_object_list(box, src=0)
    return box[0]


def main(argv):
    args = parse_args(argv)
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    restart_count = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    # Installed before the process group exists: a stop that comes early is not lost.
    signal.signal(signal.SIGTERM, on_sigterm)
    signal.signal(signal.SIGUSR1, on_sigusr1)

    backend = pick_backend(args.backend)
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend)
    world = dist.get_world_size()
    if rank == 0:
        print(f"training on {world} rank(s), backend {backend}, restart count {restart_count}", flush=True)

    torch.manual_seed(0)  # The same initial model on every rank (DDP also broadcasts rank 0's).
    model = make_model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    path = os.path.join(args.checkpoint_dir, "checkpoint.pt")
    step = 0
    state = load_checkpoint(path, rank, device)
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = state["step"]
        if rank == 0:
            print(f"resumed from step {step} (restart count {restart_count})", flush=True)
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if backend == "nccl" else None)
    loss_fn = nn.MSELoss()
    last_loss = None
    saved_at = -1

    while step < args.steps:
        if step == args.fail_at_step and rank == 1 and restart_count == 0:
            print(f"rank=1 failing on purpose at step {step} (--fail_at_step)", flush=True)
            os._exit(3)
        x, y = batch_for(step, rank, args.batch_size, device)
        opt.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        step += 1
        last_loss = loss.item()
        # Agree on the signals: any rank that got one decides for all.
        flags = torch.tensor([float(Flags.stop), float(Flags.save)], device=device)
        Flags.save = False
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        stop, save = bool(flags[0].item()), bool(flags[1].item())
        if rank == 0 and step % args.log_every == 0:
            print(f"rank=0 step={step} loss={last_loss:.5f}", flush=True)
        periodic = args.checkpoint_every > 0 and step % args.checkpoint_every == 0
        if rank == 0 and (stop or save or periodic):
            save_checkpoint(path, step, ddp, opt, "SIGTERM" if stop else "SIGUSR1" if save else "periodic")
            saved_at = step
        if stop:
            dist.barrier()  # Nobody leaves before the checkpoint is on disk.
            if rank == 0:
                print(f"stopped by SIGTERM at step {step}", flush=True)
            dist.destroy_process_group()
            return 128 + signal.SIGTERM

    if rank == 0 and saved_at != step:
        save_checkpoint(path, step, ddp, opt, "end")
    if rank == 0:
        print(f"done: {step} steps" + ("" if last_loss is None else f", last loss {last_loss:.5f}"), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
