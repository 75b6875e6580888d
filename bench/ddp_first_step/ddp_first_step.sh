#!/usr/bin/env bash
# The 4-worker DDP trainer's first step (issue 32): meshrun against torchrun
# 2.x from the same venv, interleaved, while two busy processes run in sessions
# of their own (other work on the machine). For each run: the slowest rank's
# time from the launch to the end of its first DDP step (import, process
# group, DDP wrap, one step: ddp_worker.py), and the launcher's wall time. Then
# the medians. A benchmark, not a test (docs/performance.md).
#   usage: bench/ddp_first_step/ddp_first_step.sh MESHRUN [RUNS] [PYTHON]
#          PYTHON: a python with PyTorch 2.x (default: the venv of
#          scripts/torch2-venv.sh, made there if missing)
set -euo pipefail
meshrun=$(readlink -f "${1:?usage: ddp_first_step.sh MESHRUN [RUNS] [PYTHON]}")
runs=${2:-5}
here=$(cd "$(dirname "$0")" && pwd)
py=${3:-$(bash "$here/../../scripts/torch2-venv.sh")}
"$py" -c 'import torch' 2> /dev/null || { echo "ddp_first_step: no torch in $py" >&2; exit 2; }
echo "torch $("$py" -c 'import torch; print(torch.__version__)') cpus=$(nproc)" \
  "sched_autogroup_enabled=$(cat /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null || echo n/a)"
w=$(mktemp -d)
hogs=()
cleanup() { for p in "${hogs[@]}"; do kill -- "-$p" 2>/dev/null || true; done; rm -rf "$w"; }
trap cleanup EXIT
for _ in 1 2; do
  setsid bash -c 'while :; do :; done' & hogs+=($!)
done
sleep 1
# one NAME COMMAND...: appends "NAME FIRST_STEP WALL" to $w/times.
one() {
  local name=$1 t0 t1 first; shift
  t0=$(date +%s.%N)
  BENCH_T0=$t0 "$@" > "$w/out" 2>&1 || { tail -20 "$w/out"; echo "ddp_first_step: $name failed" >&2; exit 1; }
  t1=$(date +%s.%N)
  [[ $(grep -c 'first_step=' "$w/out") == 4 ]] || { cat "$w/out"; echo "ddp_first_step: $name: not 4 ranks" >&2; exit 1; }
  first=$(grep -o 'first_step=[0-9.]*' "$w/out" | cut -d= -f2 | sort -g | tail -1)
  echo "$name $first $(echo "$t1 - $t0" | bc)" >> "$w/times"
  printf "%s: first step %.2f s, wall %.2f s; " "$name" "$first" "$(echo "$t1 - $t0" | bc)"
}
for ((i = 1; i <= runs; i++)); do
  echo -n "run $i: "
  PYTHON_EXEC=$py one meshrun "$meshrun" --standalone --nproc_per_node=4 "$here/ddp_worker.py"
  one torchrun "$py" -m torch.distributed.run --standalone --nproc_per_node=4 "$here/ddp_worker.py"
  echo
done
for name in meshrun torchrun; do
  printf "%s: median first step %.2f s, median wall %.2f s (%d runs)\n" "$name" \
    "$(awk -v n="$name" '$1 == n {print $2}' "$w/times" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')" \
    "$(awk -v n="$name" '$1 == n {print $3}' "$w/times" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')" "$runs"
done
