#!/usr/bin/env bash
# --replica_groups (issue 33): one job of 3 replica groups (--nnodes=3 --replica_groups=3, 2
# workers per node), 3 agents and one `meshrun server` on loopback.
#   1. Each group is its own run (job-group-0..2): its workers get RANK 0..1, WORLD_SIZE 2,
#      their group's MASTER_PORT, REPLICA_GROUP_ID, NUM_REPLICA_GROUPS=3 and TORCHFT_LIGHTHOUSE.
#   2. Rank 0 of group 1 crashes at its first start: group 1 alone restarts (its restart count
#      becomes 1); the workers of groups 0 and 2 keep running, started once, restart count 0.
#   3. A 4th agent finds every group full and stands by; group 2's node is lost (its agent
#      and workers killed with SIGKILL): the standby takes its place and group 2 runs again,
#      while groups 0 and 1 run on untouched.
#   4. Released, every group ends 0 (the lost agent aside), and `meshrun status` shows the
#      three groups' runs with their restarts.
# usage: replica_groups_test.sh MESHRUN   (0 pass, 1 fail)
set -uo pipefail
meshrun=$(readlink -f "${1:?usage: replica_groups_test.sh MESHRUN}")
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/support/wait_for.sh
source "$here/../support/wait_for.sh"
# shellcheck source=tests/support/rdzv_server.sh
source "$here/../support/rdzv_server.sh"
work=$(mktemp -d /tmp/meshrun-replica-groups.XXXXXX)
pids=()
cleanup() {
  local p
  touch "$work/release"
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  # Workers of a killed agent (each line of starts ends with its pid).
  [[ -f $work/starts ]] && awk '{ print $NF }' "$work/starts" | xargs -r kill -KILL 2>/dev/null
  [[ -z ${REPLICA_GROUPS_KEEP:-} && $work == /tmp/meshrun-replica-groups.* ]] && rm -rf -- "$work"
}
fail() {
  local f
  echo "FAIL: $*"
  for f in "$work"/*.log "$work/starts"; do
    [[ -f $f ]] && { echo "--- ${f##*/} (last 15 lines)"; tail -n 15 "$f"; }
  done
  exit 1
}
trap cleanup EXIT

start_rdzv_server "$meshrun" "$work" || fail "the server did not listen within 20 s"
# agent N: one node's meshrun; its pid lands in $work/agentN.pid, its exit code in agentN.rc.
agent() {
  (env OUT="$work" FAIL_GROUP=1 MESHRUN_LOG_LEVEL=info "$meshrun" --nnodes=3 --replica_groups=3 \
     --nproc_per_node=2 --rdzv_endpoint="$endpoint" --rdzv_id=job --max_restarts=1 \
     --rdzv_conf keep_alive_interval=0.5,keep_alive_max_attempt=2 \
     --no_python sh "$here/replica_group_worker.sh" >"$work/agent$1.log" 2>&1 &
   echo $! >"$work/agent$1.pid"
   wait $!
   echo $? >"$work/agent$1.rc") &
  pids+=($!)
  local has_pid="[[ -s $work/agent$1.pid ]]"
  wait_for 10 eval "$has_pid" || fail "agent $1 did not start"
  pids+=("$(cat "$work/agent$1.pid")")
}
# starts GROUP [RESTART_COUNT]: the starts seen of GROUP's workers (with that restart count).
starts() { [[ -f $work/starts ]] && awk -v g="$1" -v r="${2:-}" '$1 == g && (r == "" || $8 == r)' "$work/starts" | wc -l || echo 0; }
for n in 0 1 2; do agent $n; done
# Groups 0 and 2 start 2 workers each; group 1 starts 2, loses rank 0 and starts 2 again (its
# first rank 1 may be stopped before it wrote its line).
formed() { (($(starts 0) >= 2 && $(starts 1 1) >= 2 && $(starts 2) >= 2)); }
wait_for 60 formed || fail "the three groups did not start (group 1 twice) within 60 s"

python3 - "$work/starts" <<'PY' || fail "the workers' environment is wrong (above)"
import sys
rows = [l.split() for l in open(sys.argv[1])]
ports = {}
for g, n, rank, world, lr, addr, port, restarts, run, lighthouse, pid in rows:
    where = f"group {g} rank {rank}"
    if n != "3" or world != "2" or rank not in ("0", "1") or lr != rank:
        sys.exit(f"{where}: NUM_REPLICA_GROUPS {n}, WORLD_SIZE {world}, LOCAL_RANK {lr}")
    if run != f"job-group-{g}":
        sys.exit(f"{where}: TORCHELASTIC_RUN_ID {run}, not job-group-{g}")
    if not lighthouse.startswith("http://127.0.0.1:"):
        sys.exit(f"{where}: TORCHFT_LIGHTHOUSE {lighthouse}")
    ports.setdefault(g, set()).add(port)
if sorted(ports) != ["0", "1", "2"]:
    sys.exit(f"groups seen: {sorted(ports)}")
if len({p for s in ports.values() for p in s}) != 3 or any(len(s) != 1 for s in ports.values()):
    sys.exit(f"MASTER_PORT per group: {ports} (one each, all different)")
counts = {g: sorted(r[7] for r in rows if r[0] == g) for g in "012"}
if counts["1"] == ["0", "1", "1"]:  # (Its first rank 1 stopped before it wrote.)
    counts["1"] = ["0", "0", "1", "1"]
if counts != {"0": ["0", "0"], "1": ["0", "0", "1", "1"], "2": ["0", "0"]}:
    sys.exit(f"restart counts per group: {counts}")
print(f"each group's run and MASTER_PORT: {dict(sorted((g, s.pop()) for g, s in ports.items()))}; "
      f"restart counts: {counts}")
PY

# The agent that holds group 2, by its log.
g2=""
for n in 0 1 2; do grep -q "replica group 2 of 3" "$work/agent$n.log" && g2=$n; done
[[ -n $g2 ]] || fail "no agent's log says it holds replica group 2"
agent 3
standing_by() { grep -q "stands by" "$work/agent3.log"; }
wait_for 30 standing_by || fail "the 4th agent did not stand by within 30 s"
kill -KILL "$(cat "$work/agent$g2.pid")"
awk '$1 == 2 { print $NF }' "$work/starts" | xargs -r kill -KILL 2>/dev/null
echo "group 2's node lost (agent $g2 and its workers killed with SIGKILL)"
t0=$(now_ms)
taken() { (($(starts 2) >= 4)); }
wait_for 60 taken || fail "the standby did not start group 2's workers within 60 s of the loss"
echo "the standby ran group 2's workers $(($(now_ms) - t0)) ms after the loss"
grep -q "replica group 2 of 3" "$work/agent3.log" || fail "the standby's log does not say it took group 2"
# The job's id names its groups' runs too.
status=$("$meshrun" status --rdzv_endpoint="$endpoint" --rdzv_id=job 2>&1) || fail "meshrun status: $status"
echo "$status" | grep "^run 'job"
touch "$work/release"
# Every agent but the one killed (whichever of agents 0-2 held group 2).
ended() { local n; for n in 0 1 2 3; do [[ -s $work/agent$n.rc ]] || [[ $n == "$g2" ]] || return 1; done; }
wait_for 60 ended || fail "the agents did not end within 60 s of the release"
for n in 0 1 2 3; do
  [[ $n == "$g2" ]] && continue
  [[ $(cat "$work/agent$n.rc") == 0 ]] || fail "agent $n exited $(cat "$work/agent$n.rc")"
done
# Groups 0 and 1 never saw the loss: still their first workers (2 and 4 starts).
(($(starts 0) == 2 && $(starts 1 1) == 2 && $(starts 1 2) == 0)) ||
  fail "groups 0 and 1 started again: $(starts 0) and $(starts 1 1)+$(starts 1 2) starts (2 and 2+0 expected)"
for g in 0 1 2; do
  echo "$status" | grep -q "^run 'job-group-$g'" || fail "meshrun status does not show run job-group-$g"
done
echo "$status" | grep "^run 'job-group-1'" | grep -q "restarts 1" || fail "job-group-1 does not show 1 restart"
echo "PASS: 3 replica groups in one job; group 1's crash restarted it alone; a standby took lost group 2's place; groups 0 and 1 untouched"
