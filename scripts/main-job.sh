#!/usr/bin/env bash
# Builds meshrun and runs the main job on this host: the DeviceMesh
# tutorial's 2-D setup with libmesh, 8 workers on a (2, 4) mesh named
# (replicate, shard) over Gloo, one checked allreduce per mesh dimension.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh --main  # the build's packages and the two programs below only
build/launcher/meshrun mesh --nproc_per_node=8 --shape 2,4 --names replicate,shard
exec build/launcher/meshrun --standalone --nproc_per_node=8 build/examples/two_d_setup --device cpu
