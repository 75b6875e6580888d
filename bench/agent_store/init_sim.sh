#!/usr/bin/env bash
# init_process_group's store traffic at 8, 64 and 512 ranks, simulated
# (init_sim.py: ranks as threads, each with its own PyTorch TCPStore client):
# PyTorch's own TCPStore server against meshrun's agent store (node rank 0's
# agent, over a `meshrun server` daemon on loopback), runs interleaved. Per
# run: connect time, traffic time, and the connections and bytes each server
# port received (the agent store's, and behind it the rendezvous server's).
# Then, to calibrate the model, the store requests the rendezvous server
# counts for a real init_process_group("gloo") of 8 worker processes and for
# its simulation at 8 ranks.
# usage: init_sim.sh MESHRUN ["8 64 512"] [RUNS=3] [PYTHON=torch2 venv]
# RDZV_CONFS="- agent_store_read_cache_bytes=0": meshrun once per --rdzv_conf
# of the list in each run ("-": none), each reported apart (default "-").
set -euo pipefail
meshrun=$1 sizes=${2:-8 64 512} runs=${3:-3} confs=${RDZV_CONFS:--}
py=${4:-${MESHRUN_TORCH2_VENV:-$HOME/.cache/meshrun-tests/torch-2.15.0}/bin/python}
here="$(cd "$(dirname "$0")" && pwd)"
out=$(mktemp -d)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$out"
}
trap cleanup EXIT
"$meshrun" server --host 127.0.0.1 --port 0 --port_file "$out/port" --metrics_port 0 \
  --limit max_waiters_per_run=1048576 >"$out/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do [ -s "$out/port" ] && grep -q "metrics" "$out/server.log" && break; sleep 0.1; done
port=$(cat "$out/port")
metrics=$(grep -o 'http://[^ ]*/metrics' "$out/server.log" | head -n 1)
[ -n "$port" ] && [ -n "$metrics" ] || { echo "the server did not start: $(cat "$out/server.log")"; exit 1; }
version=$("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)
echo "PyTorch $version; meshrun server on 127.0.0.1:$port; $runs runs per size, interleaved"
# The store requests of the nodes that appeared since the last call (a job's agents: the
# server counts per node, and forgets a node's count with its run).
requests_since() {
  curl -s "$metrics" | grep '^meshrun_store_requests_total{' >"$out/m.now" || true
  awk 'NR == FNR { seen[$1] = 1; next } !($1 in seen) { s += $NF } END { printf "%d", s }' "$out/m.last" "$out/m.now"
  mv "$out/m.now" "$out/m.last"
}
run_id=0
for n in $sizes; do
  for ((i = 0; i < runs; i++)); do
    "$py" "$here/init_sim.py" "$n" own 2>/dev/null | sed 's/^/pytorch /' | tee -a "$out/pytorch.$n"
    for conf in $confs; do
      run_id=$((run_id + 1))
      label=meshrun
      conf_flag=()
      if [ "$conf" != - ]; then label="meshrun:$conf" conf_flag=(--rdzv_conf "$conf"); fi
      "$meshrun" --rdzv_endpoint="127.0.0.1:$port" --rdzv_id="sim$run_id" --nnodes=1 --nproc_per_node=1 \
        "${conf_flag[@]}" --no_python "$py" "$here/init_sim.py" "$n" agent "$port" 2>"$out/err" >"$out/run" ||
        { echo "meshrun failed: $(tail -n 5 "$out/err")"; exit 1; }
      line=$(sed -n 's/^\[n0:r0\] //p' "$out/run")
      echo "$label $line" | tee -a "$out/$label.$n"
    done
  done
done
med() { sort -n | awk '{ a[NR] = $1 } END { printf "%.3f", (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
echo "medians (connect s, traffic s; connections and bytes the store port received):"
for n in $sizes; do
  for label in pytorch $(for conf in $confs; do if [ "$conf" = - ]; then echo meshrun; else echo "meshrun:$conf"; fi; done); do
    f="$out/$label.$n"
    printf '  %4d ranks %-8s connect %7s s  traffic %7s s  store port: %5s connections %10s bytes; rendezvous server: %s connections %s bytes\n' \
      "$n" "$label" "$(awk '{ print $4 }' "$f" | med)" "$(awk '{ print $5 }' "$f" | med)" \
      "$(awk '{ print $6 }' "$f" | tail -n 1)" "$(awk '{ print $7 }' "$f" | tail -n 1)" \
      "$(awk '{ print ($8 == "") ? "-" : $8 }' "$f" | tail -n 1)" "$(awk '{ print ($9 == "") ? "-" : $9 }' "$f" | tail -n 1)"
  done
done
# Calibration: the rendezvous server's store requests for a real 8-process init and for 8 simulated ranks.
touch "$out/m.last"
requests_since >/dev/null
"$meshrun" --rdzv_endpoint="127.0.0.1:$port" --rdzv_id=real8 --nnodes=1 --nproc_per_node=8 \
  --no_python "$py" "$here/init_pg_worker.py" >/dev/null 2>"$out/err" || { echo "real init failed: $(tail -n 5 "$out/err")"; exit 1; }
real=$(requests_since)
"$meshrun" --rdzv_endpoint="127.0.0.1:$port" --rdzv_id=sim8 --nnodes=1 --nproc_per_node=1 \
  --no_python "$py" "$here/init_sim.py" 8 agent >/dev/null 2>"$out/err" || { echo "sim failed: $(tail -n 5 "$out/err")"; exit 1; }
sim=$(requests_since)
echo "calibration: store requests at the rendezvous server, real init_process_group + barrier of 8 processes: $real; simulated 8 ranks: $sim"
