#!/usr/bin/env python3
"""bench/mesh_init worker for PyTorch: mesh set-up time on gloo, per rank.

Run under torchrun (one process per rank), for example

    /usr/bin/python3 tools/torchrun_shim.py --standalone --nproc_per_node=8 \\
        bench/torch_mesh_init.py 2,4
    /tmp/torchvenv/bin/torchrun --standalone --nproc_per_node=8 \\
        bench/torch_mesh_init.py --device-mesh 2,4

The time runs from just before ``init_process_group("gloo")`` until one
all_reduce has completed on every mesh dimension, on this rank.  Rank 0
prints the maximum over ranks (an all_reduce MAX of the durations on the
world group, after the timed part) in one line:

    TORCH_MESH_INIT shape=2,4 api=new_group torch=1.13.0a0 max_ms=812.34

Two ways to build the mesh (the groups are the same):

  new_group (default)  by hand, as the PyTorch 1.x tutorials do: the ranks
                       are laid out row-major over the shape, and for every
                       dimension d, one ``dist.new_group`` per row along d
                       (the ranks whose coordinates differ only in d).  Every
                       rank calls new_group for every row of every dimension,
                       in the same order, as PyTorch requires; each rank keeps
                       the group of its own row.
  --device-mesh        PyTorch's own ``init_device_mesh("cpu", shape)``
                       (PyTorch 2.2 or newer), after the same
                       ``init_process_group("gloo")``; the group of dimension
                       d is ``mesh.get_group(d)``.

Then one all_reduce (sum of a one-element float tensor of ones) on the group
of each dimension, in dimension order; the results are checked after the
clock has stopped.

Not timed: Python start-up and every import (torch, torch.distributed and,
with --device-mesh, torch.distributed.device_mesh).  Because 8 ranks import
torch at different speeds on a small machine, the ranks first meet at a
barrier, so that every rank starts its clock when all of them are ready and
no rank's time includes waiting for another rank's imports.  The barrier is a
TCPStore of its own, hosted by rank 0 on a free port of 127.0.0.1 that it
writes to a file in the temporary directory named after torchrun's run id
(TORCHELASTIC_RUN_ID) and MASTER_PORT; it stays open, idle, until the end.
"""

import argparse
import datetime
import itertools
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("shape", help="mesh shape, comma-separated, e.g. 2,4 or 2,2,2")
    p.add_argument("--device-mesh", action="store_true",
                   help="build the mesh with init_device_mesh (PyTorch >= 2.2) "
                   "instead of new_group by hand")
    args = p.parse_args()
    try:
        args.shape = [int(s) for s in args.shape.split(",")]
    except ValueError:
        p.error(f"bad shape: {args.shape!r}")
    if not args.shape or any(s < 1 for s in args.shape):
        p.error(f"bad shape: {args.shape!r}")
    return args


def rows_of_dim(shape, d):
    """The rows along dimension d of a row-major layout of range(prod(shape)),
    in row-major order of the other coordinates."""
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    others = [range(n) if i != d else range(1) for i, n in enumerate(shape)]
    rows = []
    for coord in itertools.product(*others):
        base = sum(c * s for c, s in zip(coord, strides))
        rows.append([base + k * strides[d] for k in range(shape[d])])
    return rows


def start_barrier(rank, world_size):
    """Every rank returns at (nearly) the same moment, once all have arrived.

    Rank 0 hosts a TCPStore of its own on a free port and writes the port to
    a file named after torchrun's run id; the other ranks read it and connect.
    (torchrun's own store at MASTER_PORT cannot be used: with PyTorch 1.13's
    --standalone it only exists once rank 0's init_process_group has created
    it.)  Returns the store and the port file, to be kept until the end.
    """
    timeout = datetime.timedelta(seconds=120)
    path = os.path.join(tempfile.gettempdir(),
                        f"bench_mesh_init.{os.environ.get('TORCHELASTIC_RUN_ID', 'none')}."
                        f"{os.environ['MASTER_PORT']}.port")
    if rank == 0:
        store = dist.TCPStore("127.0.0.1", 0, world_size, True, timeout,
                              wait_for_workers=False)
        with open(path + ".tmp", "w") as f:
            f.write(str(store.port))
        os.replace(path + ".tmp", path)
    else:
        deadline = time.monotonic() + timeout.total_seconds()
        while not os.path.exists(path):
            if time.monotonic() > deadline:
                sys.exit(f"rank {rank}: no barrier port file {path}")
            time.sleep(0.005)
        with open(path) as f:
            port = int(f.read())
        store = dist.TCPStore("127.0.0.1", port, world_size, False, timeout)
    if store.add("arrived", 1) == world_size:
        store.set("go", "1")
    store.wait(["go"])
    return store, path


def main():
    args = parse_args()
    shape = args.shape
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    size = 1
    for n in shape:
        size *= n
    if size != world_size:
        sys.exit(f"rank {rank}: shape {shape} has {size} ranks, world size is {world_size}")
    if args.device_mesh:
        from torch.distributed.device_mesh import init_device_mesh  # not timed
    all_rows = [rows_of_dim(shape, d) for d in range(len(shape))]
    ones = [torch.ones(1) for _ in shape]

    store, port_file = start_barrier(rank, world_size)

    start = time.perf_counter()
    dist.init_process_group("gloo")
    if args.device_mesh:
        mesh = init_device_mesh("cpu", tuple(shape))
        groups = [mesh.get_group(d) for d in range(len(shape))]
    else:
        groups = [None] * len(shape)
        for d, rows in enumerate(all_rows):
            for ranks in rows:
                g = dist.new_group(ranks)
                if rank in ranks:
                    groups[d] = g
    for d, g in enumerate(groups):
        dist.all_reduce(ones[d], group=g)
    elapsed_ms = (time.perf_counter() - start) * 1000.0

    for d, t in enumerate(ones):
        if t.item() != shape[d]:
            sys.exit(f"rank {rank}: all_reduce on dimension {d} gave {t.item()}, "
                     f"expected {shape[d]}")
    worst = torch.tensor([elapsed_ms], dtype=torch.float64)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    if rank == 0:
        api = "init_device_mesh" if args.device_mesh else "new_group"
        print(f"TORCH_MESH_INIT shape={','.join(map(str, shape))} api={api} "
              f"torch={torch.__version__} max_ms={worst.item():.2f}", flush=True)
    dist.destroy_process_group()
    # Every rank has passed the all_reduce MAX, so none still needs the port
    # file; rank 0's store (the barrier's server) goes when rank 0 exits.
    if rank == 0:
        os.unlink(port_file)
    del store
    return 0


if __name__ == "__main__":
    sys.exit(main())
