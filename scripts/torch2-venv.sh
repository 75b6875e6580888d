#!/usr/bin/env bash
# Makes the PyTorch 2.x virtual environment that the agent-store tests and
# the benchmarks compare against (about 5 GB from PyPI: PyTorch's CUDA
# libraries come with it; it runs on CPU). Cached outside the clone, keyed by
# the pinned version: $MESHRUN_TORCH2_VENV, else
# ~/.cache/meshrun-tests/torch-<version>. Prints the venv's python.
set -euo pipefail
version=2.15.0
venv=${MESHRUN_TORCH2_VENV:-$HOME/.cache/meshrun-tests/torch-$version}
if ! "$venv/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$version')" 2>/dev/null; then
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q "torch==$version" >&2
fi
echo "$venv/bin/python"
