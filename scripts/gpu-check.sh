#!/usr/bin/env bash
# The GPU checks, for a machine with one NVIDIA GPU (run whenever one is
# lent): builds, runs the [gpu] tests, and runs every example with
# --device cuda on one rank. Prints one PASS/FAIL line per check; exits
# non-zero when any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp}"
bash scripts/build.sh > "$out/gpu-build.log" 2>&1 || { echo "FAIL build (see gpu-build.log)"; tail -30 "$out/gpu-build.log"; exit 1; }
nvidia-smi -L || true
fails=0
check() {
  local name="$1"; shift
  if "$@" > "$out/$name.log" 2>&1; then echo "PASS $name"; else echo "FAIL $name"; tail -20 "$out/$name.log"; fails=$((fails + 1)); fi
}
check gpu_tests build/tests/gpu_tests --success
M=build/launcher/meshrun
check two_d_setup $M --standalone --nproc_per_node=1 build/examples/two_d_setup --device cuda --shape 1,1
check hsdp $M --standalone --nproc_per_node=1 build/examples/hsdp --device cuda --shape 1,1
check three_d_slicing $M --standalone --nproc_per_node=1 build/examples/three_d_slicing --device cuda --shape 1,1,1
check corrupt_detected bash -c "! $M --standalone --nproc_per_node=1 build/examples/two_d_setup --device cuda --shape 1,1 --corrupt_rank=0"
echo "gpu-check: $fails failed"
exit $fails
