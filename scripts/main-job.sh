#!/usr/bin/env bash
# Builds meshrun and runs a real 8-worker job on this host: every worker
# builds a Gloo full mesh through meshrun's rendezvous store and allreduces.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
exec build/launcher/meshrun --standalone --nproc_per_node=8 build/tests/gloo_allreduce_worker
