#!/usr/bin/env bash
# init_process_group("gloo", env://) plus one barrier on N workers of one
# node: meshrun (its agent store on MASTER_PORT, over meshrun's store)
# against torchrun (the agent store of torchrun 2.x's c10d backend, PyTorch's
# own TCPStore server), both with the same PyTorch, runs interleaved. Per
# run: the time from the last rank's entry into init_process_group to the
# last rank's exit (what the store costs once every rank is there; a rank's
# own time includes waiting for the slowest one to start), and the
# launcher's wall time. Then the medians.
# usage: init_pg.sh MESHRUN [N=8] [RUNS=5] [PYTHON=torch2 venv]
set -euo pipefail
meshrun=$1 n=${2:-8} runs=${3:-5}
py=${4:-${MESHRUN_TORCH2_VENV:-$HOME/.cache/meshrun-tests/torch-2.15.0}/bin/python}
here="$(cd "$(dirname "$0")" && pwd)"
worker="$here/init_pg_worker.py"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
version=$("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)
echo "PyTorch $version, $n workers, $runs runs each, interleaved"
one() {  # LABEL COMMAND...
  local label=$1; shift
  local t0 t1 span
  t0=$(date +%s.%N)
  "$@" >"$out/run" 2>"$out/err" || { echo "$label failed: $(tail -n 3 "$out/err")"; exit 1; }
  t1=$(date +%s.%N)
  [ "$(grep -o 'init_at ' "$out/run" | wc -l)" = "$n" ] || { echo "$label: not every worker reported:"; cat "$out/run"; exit 1; }
  span=$(grep -o 'init_at [0-9]* [0-9.]* [0-9.]*' "$out/run" |
    awk '{ if ($3 > e) e = $3; if ($4 > x) x = $4 } END { printf "%.3f", x - e }')
  printf '%-8s last entry to last exit %6.3f s   launcher wall %6.3f s\n' "$label" "$span" "$(echo "$t1 - $t0" | bc)"
  echo "$span $(echo "$t1 - $t0" | bc)" >>"$out/$label"
}
for ((i = 0; i < runs; i++)); do
  one meshrun "$meshrun" --standalone --nproc_per_node="$n" --no_python "$py" "$worker"
  one torchrun "$py" -m torch.distributed.run --standalone --nproc_per_node="$n" "$worker"
done
med() { sort -n | awk '{ a[NR] = $1 } END { printf "%.3f", (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
for label in meshrun torchrun; do
  printf '%-8s median: last entry to last exit %s s, launcher wall %s s\n' "$label" \
    "$(cut -d' ' -f1 "$out/$label" | med)" "$(cut -d' ' -f2 "$out/$label" | med)"
done
