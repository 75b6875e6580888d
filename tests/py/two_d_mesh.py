# A 2-D device mesh of CPU processes over Gloo, run under meshrun (or torchrun) with the usual
# worker variables (RANK, WORLD_SIZE, MASTER_ADDR/PORT). The world of W ranks is laid out as a
# (R, W / R) grid, rank = row * (W / R) + column, with the dimension names ("replicate",
# "shard"): a "shard" group is one row (contiguous ranks), a "replicate" group is one column
# (ranks W / R apart). Each rank all-reduces its own rank number over each of its two groups and
# checks the sum against the one computed from the layout, and checks each group's size and its
# own rank in it.
#
# Two ways to build the groups, and the program says which one it used:
#   device_mesh  torch.distributed.device_mesh.init_device_mesh("cpu", (R, W / R), ...), then
#                mesh.get_group(<name>) per dimension (PyTorch 2.2 and later);
#   new_group    one dist.new_group per row and per column, every rank creating every group in
#                the same order (as new_group requires), keeping the ones it belongs to
#                (any PyTorch; Debian 12's python3-torch is 1.13, which has no device_mesh).
# --api=auto (default) takes device_mesh where PyTorch has it, else new_group.
#
# Prints one line per rank:
#   rank=<r> api=<api> mesh=<R>x<C> coords=(<row>, <col>) shard_sum=<s> replicate_sum=<t> OK
# and exits 0; a wrong sum, size or rank raises (a non-zero exit). --corrupt_rank=K makes rank K
# add 1000 to what it contributes, so its groups' checks fail: the checks can fail.
#
# Usage: two_d_mesh.py [--rows=R] [--api=auto|device_mesh|new_group] [--corrupt_rank=K]
import argparse
import os
import sys

import torch
import torch.distributed as dist


def device_mesh_available():
    try:
        from torch.distributed.device_mesh import init_device_mesh  # noqa: F401
    except ImportError:
        return False
    return True


def groups_from_device_mesh(rows, cols):
    """(shard group, replicate group, how) through PyTorch's DeviceMesh."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (rows, cols), mesh_dim_names=("replicate", "shard"))
    return mesh.get_group("shard"), mesh.get_group("replicate")


def groups_from_new_group(rows, cols, rank):
    """(shard group, replicate group) built one dimension at a time with new_group.

    new_group is collective over the whole world: every rank must create every group, in the
    same order, even the groups it is not a member of."""
    shard = replicate = None
    for row in range(rows):
        members = [row * cols + col for col in range(cols)]
        g = dist.new_group(members)
        if rank in members:
            shard = g
    for col in range(cols):
        members = [row * cols + col for row in range(rows)]
        g = dist.new_group(members)
        if rank in members:
            replicate = g
    return shard, replicate


def main():
    p = argparse.ArgumentParser(prog="two_d_mesh.py")
    p.add_argument("--rows", type=int, default=2, help="size of the replicate dimension (default 2)")
    p.add_argument("--api", choices=("auto", "device_mesh", "new_group"), default="auto")
    p.add_argument("--corrupt_rank", type=int, default=-1)
    args = p.parse_args()

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if args.rows < 1 or world % args.rows != 0:
        sys.exit(f"two_d_mesh.py: WORLD_SIZE={world} does not split into {args.rows} rows")
    rows, cols = args.rows, world // args.rows
    api = args.api
    if api == "auto":
        api = "device_mesh" if device_mesh_available() else "new_group"
    elif api == "device_mesh" and not device_mesh_available():
        sys.exit(f"two_d_mesh.py: --api=device_mesh needs PyTorch 2.2 or later; this is {torch.__version__}")

    dist.init_process_group("gloo")
    assert dist.get_rank() == rank and dist.get_world_size() == world, "the world does not match RANK/WORLD_SIZE"
    if api == "device_mesh":
        shard, replicate = groups_from_device_mesh(rows, cols)
    else:
        shard, replicate = groups_from_new_group(rows, cols, rank)

    row, col = divmod(rank, cols)
    # The layout says who is in each group: the group sizes and this rank's place in them.
    checks = [
        ("shard group size", dist.get_world_size(group=shard), cols),
        ("replicate group size", dist.get_world_size(group=replicate), rows),
        ("rank in its shard group", dist.get_rank(group=shard), col),
        ("rank in its replicate group", dist.get_rank(group=replicate), row),
    ]
    mine = float(rank + (1000 if rank == args.corrupt_rank else 0))
    shard_sum = torch.tensor([mine])
    dist.all_reduce(shard_sum, group=shard)
    replicate_sum = torch.tensor([mine])
    dist.all_reduce(replicate_sum, group=replicate)
    # Row `row` holds row*cols .. row*cols+cols-1; column `col` holds col, col+cols, ...
    want_shard = sum(row * cols + c for c in range(cols))
    want_replicate = sum(r * cols + col for r in range(rows))
    checks += [
        ("all-reduce over the shard group", int(shard_sum.item()), want_shard),
        ("all-reduce over the replicate group", int(replicate_sum.item()), want_replicate),
    ]
    for what, got, want in checks:
        if got != want:
            raise SystemExit(f"rank={rank} api={api}: {what} is {got}, expected {want}")
    print(f"rank={rank} api={api} mesh={rows}x{cols} coords=({row}, {col}) "
          f"shard_sum={want_shard} replicate_sum={want_replicate} OK", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
