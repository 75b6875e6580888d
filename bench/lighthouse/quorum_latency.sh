#!/usr/bin/env bash
# Quorum latency (issue 33): a Quorum call to its answer with every group present, meshrun's
# lighthouse (through each node agent's endpoint, the server behind it) beside torchft 0.2.0's
# own LighthouseServer, same machine, same settings (min_replicas = the groups, so a quorum
# needs all of them; quorum_tick 100 ms; heartbeat_timeout 5 s), in one run.
#
# Each group (bench/lighthouse/quorum_worker.py, torchft's own client) asks ROUNDS times; before
# each round the groups meet at a file barrier. Latency of a round: from the last group's call
# to the first answer (the lighthouse's own time: the groups' arrival spread left out), and
# to the last answer. Round 0 is the first quorum; later rounds are torchft's fast quorum.
#
# usage: quorum_latency.sh MESHRUN [GROUPS...] (default: 4 64); ROUNDS=20 by default.
# Needs Python 3.11 and torchft's wheel (kept in ~/.cache/meshrun-tests, as the tests do).
set -uo pipefail
meshrun=$(readlink -f "${1:?usage: quorum_latency.sh MESHRUN [GROUPS...]}")
shift
groups=("$@")
[[ $# -eq 0 ]] && groups=(4 64)
rounds=${ROUNDS:-20}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/e2e/torchft_extension.sh
source "$here/../../tests/e2e/torchft_extension.sh"
work=$(mktemp -d /tmp/meshrun-quorum-latency.XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf -- "$work"' EXIT
torchft_extension "${MESHRUN_TEST_CACHE:-$HOME/.cache/meshrun-tests}" "$work"
export TORCHFT_SO ROUNDS=$rounds

summary() {  # summary DIR: median and p90 over rounds >= 1, and round 0, in ms
  python3 - "$1" <<'PY'
import glob, statistics, sys
rows = {}
for f in glob.glob(sys.argv[1] + "/lat.*"):
    for line in open(f):
        r, t0, t1, qid, n = line.split()
        rows.setdefault(int(r), []).append((float(t0), float(t1), int(n)))
first, last = [], []
for r, calls in sorted(rows.items()):
    assert all(c[2] == len(calls) for c in calls), f"round {r}: a quorum without every group"
    start = max(c[0] for c in calls)
    first.append((min(c[1] for c in calls) - start) * 1e3)
    last.append((max(c[1] for c in calls) - start) * 1e3)
fast_first, fast_last = sorted(first[1:]), sorted(last[1:])
p90 = lambda v: v[min(len(v) - 1, int(0.9 * len(v)))]
print(f"{first[0]:.1f} | {statistics.median(fast_first):.1f} | {p90(fast_first):.1f} | "
      f"{statistics.median(fast_last):.1f} | {p90(fast_last):.1f} |")
PY
}

echo "| lighthouse | groups | first quorum, last call -> first answer (ms) | fast quorum: median | p90 | last answer: median | p90 |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for n in "${groups[@]}"; do
  # meshrun: one job, n workers, each a group; the server on loopback.
  d=$work/meshrun-$n
  mkdir -p "$d"
  "$meshrun" server --host 127.0.0.1 --port 0 --port_file "$d/port" >"$d/server.log" 2>&1 &
  server=$!
  pids+=("$server")
  for _ in $(seq 200); do [[ -s $d/port ]] && break; sleep 0.05; done
  OUT=$d LH_GROUPS=$n "$meshrun" --nnodes=1 --nproc_per_node="$n" --rdzv_endpoint="127.0.0.1:$(cat "$d/port")" \
    --rdzv_id=bench --rdzv_conf lighthouse_min_replicas="$n",lighthouse_quorum_tick=0.1,lighthouse_heartbeat_timeout=5 \
    python3 "$here/quorum_worker.py" >"$d/job.log" 2>&1 || { tail -n 20 "$d/job.log"; exit 1; }
  kill "$server"; wait "$server" 2>/dev/null
  echo "| meshrun (agent endpoint + server) | $n | $(summary "$d")"
  # torchft's own lighthouse, the groups started by hand.
  d=$work/torchft-$n
  mkdir -p "$d"
  python3 - "$TORCHFT_SO" "$n" >"$d/addr" 2>"$d/lighthouse.log" <<'PY' &
import importlib.util, sys, time
s = importlib.util.spec_from_file_location("_torchft", sys.argv[1]); ft = importlib.util.module_from_spec(s)
s.loader.exec_module(ft)
server = ft.LighthouseServer(bind="127.0.0.1:0", min_replicas=int(sys.argv[2]), quorum_tick_ms=100,
                             heartbeat_timeout_ms=5000)
print("http://127.0.0.1:" + server.address().rsplit(":", 1)[1], flush=True)
time.sleep(600)
PY
  lighthouse=$!
  pids+=("$lighthouse")
  for _ in $(seq 200); do [[ -s $d/addr ]] && break; sleep 0.05; done
  gp=()
  for ((r = 0; r < n; r++)); do
    RANK=$r OUT=$d LH_GROUPS=$n TORCHFT_LIGHTHOUSE=$(head -n 1 "$d/addr") python3 "$here/quorum_worker.py" >"$d/g$r.log" 2>&1 &
    gp+=($!)
  done
  for p in "${gp[@]}"; do wait "$p" || { cat "$d"/g*.log | tail -n 20; exit 1; }; done
  kill "$lighthouse"; wait "$lighthouse" 2>/dev/null
  echo "| torchft $TORCHFT_VERSION torchft_lighthouse | $n | $(summary "$d")"
done
