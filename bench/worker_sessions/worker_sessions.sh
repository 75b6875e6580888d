#!/usr/bin/env bash
# Workers in sessions of their own (issue 32): 4 CPU-bound workers under
# meshrun and under torchrun, side by side, interleaved, while two busy
# processes run in sessions of their own (as other users' work would). With the
# kernel's scheduler autogroups (kernel.sched_autogroup_enabled=1, Debian's and
# Ubuntu's default) each session gets an equal share of the CPUs, so workers
# that share one session get less than workers that do not. Prints, for each
# run, the slowest worker's own time for its loop (launch overhead apart) and
# the wall time from launch to exit. MESHRUN_BEFORE=<an older meshrun> adds
# that binary to each round. A benchmark, not a test (docs/performance.md).
#   usage: bench/worker_sessions/worker_sessions.sh MESHRUN [RUNS] [WORK]
#          (torchrun: Debian's python3-torch 1.13, through tools/torchrun_shim.py, which
#          works around its start-up crash on Python 3.11; WORK: iterations per worker)
set -euo pipefail
meshrun=$(readlink -f "${1:?usage: worker_sessions.sh MESHRUN [RUNS] [WORK]}")
runs=${2:-3}
work=${3:-30000000}
here=$(cd "$(dirname "$0")/../.." && pwd)
/usr/bin/python3 -c 'import torch' 2> /dev/null || { echo "worker_sessions: no python3-torch" >&2; exit 2; }
echo "sched_autogroup_enabled=$(cat /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null || echo n/a) cpus=$(nproc)"
w=$(mktemp -d)
hogs=()
cleanup() { for p in "${hogs[@]}"; do kill -- "-$p" 2>/dev/null || true; done; rm -rf "$w"; }
trap cleanup EXIT
cat > "$w/worker.py" <<PY
import time
t = time.monotonic()
s = 0
for i in range($work):
    s += i
print("loop=%.3f" % (time.monotonic() - t), flush=True)
PY
for _ in 1 2; do
  setsid bash -c 'while :; do :; done' & hogs+=($!)
done
sleep 1
# one NAME COMMAND...: "NAME: loop X s (slowest worker), wall Y s".
one() {
  local name=$1 t0 t1 loop; shift
  t0=$(date +%s.%N)
  "$@" > "$w/out" 2>&1 || { tail -5 "$w/out"; echo "worker_sessions: $name failed" >&2; exit 1; }
  t1=$(date +%s.%N)
  loop=$(grep -o 'loop=[0-9.]*' "$w/out" | cut -d= -f2 | sort -g | tail -1)
  [[ $(grep -c 'loop=' "$w/out") == 4 ]] || { cat "$w/out"; echo "worker_sessions: $name: not 4 workers" >&2; exit 1; }
  printf "%s: loop %.2f s (slowest worker), wall %.2f s; " "$name" "$loop" "$(echo "$t1 - $t0" | bc)"
}
for ((i = 1; i <= runs; i++)); do
  echo -n "run $i: "
  if [[ -n ${MESHRUN_BEFORE:-} ]]; then
    one "meshrun before" "$MESHRUN_BEFORE" --standalone --nproc_per_node=4 /usr/bin/python3 "$w/worker.py"
  fi
  one meshrun "$meshrun" --standalone --nproc_per_node=4 /usr/bin/python3 "$w/worker.py"
  one torchrun /usr/bin/python3 "$here/tools/torchrun_shim.py" --standalone --nproc_per_node=4 "$w/worker.py"
  echo
done
