#!/usr/bin/env bash
# The GPU checks, for a machine with one NVIDIA GPU (run whenever one is
# lent): runs the [gpu] tests, every example with --device cuda on one rank,
# a corrupted run, and the refusals of two ranks on one GPU. Prints one
# PASS/FAIL/SKIP line per check; exits with the number that failed (without
# a usable GPU every check is skipped: exit 77).
#   bash scripts/gpu-check.sh                  builds here first (scripts/build.sh)
#   GPU_BUNDLE=.gpubundle bash scripts/gpu-check.sh, or bash .gpubundle/gpu-check.sh
#                                              runs what scripts/gpu-bundle.sh packed,
#                                              with the machine's own libnccl.so.2
#                                              (or NCCL_LIB_DIR's)
# Logs go to $OUT (or /tmp).
set -uo pipefail
# Paths given relative to where this was started from.
out="$(realpath -m "${OUT:-/tmp}")"
bundle="${GPU_BUNDLE:+$(realpath -m "$GPU_BUNDLE")}"
here="$(dirname "$(realpath "$0")")"
# The copy inside a bundle runs that bundle.
[[ -z "$bundle" && -e "$here/.meshrun-gpu-bundle" ]] && bundle="$here"
cd "$here/.."
if [[ -n "$bundle" ]]; then
  [[ -x "$bundle/bin/gpu_tests" ]] || { echo "FAIL bundle: $bundle/bin/gpu_tests not found (scripts/gpu-bundle.sh makes it)"; exit 1; }
  B="$bundle/bin"
  nccl="${NCCL_LIB_DIR:-}"
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu; do
    [[ -z "$nccl" && -e "$d/libnccl.so.2" ]] && nccl="$d"
  done
  [[ -n "$nccl" ]] || nccl="$(dirname "$(find /opt /usr -name 'libnccl.so.2' 2>/dev/null | head -1)")"
  export NCCL_LIB_DIR="$nccl"
  echo "NCCL from: $nccl"
  export LD_LIBRARY_PATH="$bundle/lib:$nccl${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  ldd "$B/gpu_tests" 2>&1 | grep -E "not found" && { echo "FAIL bundle: libraries missing"; exit 1; }
else
  bash scripts/build.sh > "$out/gpu-build.log" 2>&1 || { echo "FAIL build (see gpu-build.log)"; tail -30 "$out/gpu-build.log"; exit 1; }
  # The same layout as a bundle: programs side by side (meshrun finds its
  # worker shim beside itself).
  B="$(mktemp -d)"
  ln -s "$PWD"/build/tests/gpu_tests "$PWD"/build/launcher/meshrun "$PWD"/build/launcher/meshrun-worker-shim \
    "$PWD"/build/examples/{two_d_setup,hsdp,three_d_slicing} "$B/"
fi
command -v nvidia-smi > /dev/null && nvidia-smi -L
mkdir -p "$out"
# gpu_tests exits 77 when no CUDA device is usable: then nothing here can run.
skip="$("$B/gpu_tests" --list-tests 2>&1)"
if [[ $? == 77 ]]; then
  echo "$skip" | head -1
  echo "SKIP all checks: no usable CUDA device"
  exit 77
fi
export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"
fails=0
check() {
  local name="$1"; shift
  if timeout 120 "$@" > "$out/$name.log" 2>&1; then echo "PASS $name"; else echo "FAIL $name"; tail -20 "$out/$name.log"; fails=$((fails + 1)); fi
}
M="$B/meshrun"
check gpu_tests "$B/gpu_tests" --success
check two_d_setup "$M" --standalone --nproc_per_node=1 "$B/two_d_setup" --device cuda --shape 1,1
check hsdp "$M" --standalone --nproc_per_node=1 "$B/hsdp" --device cuda --shape 1,1
check three_d_slicing "$M" --standalone --nproc_per_node=1 "$B/three_d_slicing" --device cuda --shape 1,1,1
# A corrupted contribution must fail the example's own check (its message),
# not fail for another reason.
check corrupt_detected bash -c "'$M' --standalone --nproc_per_node=1 '$B/two_d_setup' --device cuda --shape 1,1 --corrupt_rank=0 > '$out/corrupt.out' 2>&1; s=\$?; cat '$out/corrupt.out'; [[ \$s != 0 ]] && grep -q 'sum 1000, expected 0' '$out/corrupt.out'"
# Two local ranks, one GPU: refused before any NCCL call, naming both ranks.
check shared_gpu_refused bash -c "'$M' --standalone --nproc_per_node=2 --max_restarts=0 '$B/two_d_setup' --device cuda --shape 1,2 > '$out/shared_gpu.out' 2>&1; s=\$?; cat '$out/shared_gpu.out'; [[ \$s != 0 ]] && grep -q 'local ranks 0 and 1 of node 0 share one GPU' '$out/shared_gpu.out'"
# Two nodes on this host (one agent and one rank each, both on the one GPU;
# one local rank per node, so no shared-GPU check): other shapes fail both
# ranks with the verdict before any NCCL call; the same shape reaches NCCL,
# which refuses two ranks on one GPU: both fail, neither hangs.
two_nodes() {  # <name> <shape of node 0> <shape of node 1> <text both must print>
  local port=$((29600 + RANDOM % 2000))
  check "$1" bash -c "
    '$M' --nnodes=2 --nproc_per_node=1 --rdzv_endpoint=127.0.0.1:$port --rdzv_id=$1 '$B/two_d_setup' --device cuda --shape $2 > '$out/$1.0.out' 2>&1 & a=\$!
    '$M' --nnodes=2 --nproc_per_node=1 --rdzv_endpoint=127.0.0.1:$port --rdzv_id=$1 '$B/two_d_setup' --device cuda --shape $3 > '$out/$1.1.out' 2>&1; b=\$?
    wait \$a; a=\$?; cat '$out/$1.0.out' '$out/$1.1.out'
    [[ \$a != 0 && \$b != 0 ]] && grep -q '$4' '$out/$1.0.out' && grep -q '$4' '$out/$1.1.out'"
}
two_nodes mismatch_two_nodes 1,2 2,1 'rank 1 and rank 0 disagree on the shape: (2,1) vs (1,2)'
two_nodes one_gpu_two_nodes 1,2 1,2 'ncclCommInitRankConfig failed'
grep -h "NCCL version" "$out"/*.log | head -1
echo "gpu-check: $fails failed"
exit $fails
