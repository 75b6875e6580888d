#!/usr/bin/env bash
# The lighthouse survives its leader (issue 33): two replica groups step through quorums of
# meshrun's replicated lighthouse with torchft 0.2.0's own client while the leading replica is
# killed (kill -9). On loopback: a real 3-member etcd (tests/etcd/etcd_cluster.sh), 3
# `meshrun server` replicas on it, one job of 2 workers, each a replica group
# (tests/e2e/lighthouse_steps.py: a quorum per step, retried as torchft's Manager retries).
#
# Checked from outside, in the groups' own logs: no worker restarts (each starts once, restart
# count 0); both groups go on stepping after the kill (at least 5 steps each); at every step
# both groups got the same quorum (id and members); quorum ids never go back, and the first id
# after the failover is above every id before it (the next leader numbers its quorums above
# its election revision x 2^24, lighthouse_registry.h). The groups' longest stall is printed.
#
# FORM replica_groups: the same job as 2 nodes under `--replica_groups=2` (2 agents, one group
# each, a run of its own per group); besides the above, neither group's run re-forms and both
# agents exit 0 (one exit barrier across the groups).
#
# usage: lighthouse_failover_test.sh MESHRUN_BINARY [CACHE_DIR] [FORM]
#        (0 pass, 1 fail, 77 skip: no etcd, no Python 3.11, or torchft's wheel unreachable)
set -uo pipefail
meshrun=$(readlink -f "${1:?usage: lighthouse_failover_test.sh MESHRUN_BINARY [CACHE_DIR]}")
cache=${2:--}  # "-": the default.
[[ $cache != - ]] || cache=${MESHRUN_TEST_CACHE:-$HOME/.cache/meshrun-tests}
form=${3:-workers}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/etcd/etcd_cluster.sh
source "$here/etcd_cluster.sh"
etcd_require
# shellcheck source=tests/support/wait_for.sh
source "$here/../support/wait_for.sh"
# shellcheck source=tests/etcd/replicas.sh
source "$here/replicas.sh"
# shellcheck source=tests/e2e/torchft_extension.sh
source "$here/../e2e/torchft_extension.sh"

work=$(mktemp -d /tmp/meshrun-lighthouse-failover.XXXXXX)
server_pid=() agent_pids=()
cleanup() {
  local p
  for p in "${agent_pids[@]}" "${server_pid[@]}"; do
    [[ -n $p ]] && kill -KILL "$p" 2>/dev/null && wait "$p" 2>/dev/null
  done
  etcd_down
  [[ -z ${LIGHTHOUSE_KEEP:-} && $work == /tmp/meshrun-lighthouse-failover.* ]] && rm -rf -- "$work"
}
fail() {
  local f
  echo "FAIL: $*"
  for f in "$work"/server*.log "$work"/agent*.log "$work"/group*.steps; do
    [[ -f $f ]] || continue
    echo "--- ${f##*/} (last 15 lines)"
    tail -n 15 "$f"
  done
  exit 1
}
trap cleanup EXIT
torchft_extension "$cache" "$work"  # Sets TORCHFT_SO, or skips (77).
export TORCHFT_SO
etcd_up 3 || fail "etcd did not come up"
trap cleanup EXIT  # etcd_up sets its own: ours calls etcd_down too.

start_replicas "$meshrun" "$work" lighthouse-test --state_lease_ttl 2 ||
  fail "the 3 replicas did not all listen within 20 s"
led() { leader_now >/dev/null; }
wait_for 30 led || fail "no replica led within 30 s"
leader=$(leader_now)

# The job: 2 workers, each a replica group; min_replicas 2 (a quorum needs both).
conf=leader_grace=60,lighthouse_min_replicas=2,lighthouse_heartbeat_timeout=5
if [[ $form == replica_groups ]]; then
  for n in 0 1; do
    OUT=$work "$meshrun" --nnodes=2 --replica_groups=2 --nproc_per_node=1 --rdzv_endpoint="$endpoints" --rdzv_id=lh \
      --max_restarts=3 --rdzv_conf "$conf" --no_python sh -c 'echo "$TORCHELASTIC_RESTART_COUNT" >> \
        "$OUT/start.$REPLICA_GROUP_ID"; GROUP=group$REPLICA_GROUP_ID exec python3 '"$here"'/../e2e/lighthouse_steps.py' \
      >"$work/agent$n.log" 2>&1 &
    agent_pids+=($!)
  done
else
  OUT=$work "$meshrun" --nnodes=1 --nproc_per_node=2 --rdzv_endpoint="$endpoints" --rdzv_id=lh --max_restarts=3 \
    --rdzv_conf "$conf" \
    --no_python sh -c 'echo "$TORCHELASTIC_RESTART_COUNT" >> "$OUT/start.$RANK"; exec python3 '"$here"'/../e2e/lighthouse_steps.py' \
    >"$work/agent.log" 2>&1 &
  agent_pids+=($!)
fi
steps() { [[ -f $work/group$1.steps ]] && wc -l <"$work/group$1.steps" || echo 0; }
stepped() { (($(steps 0) >= $1 && $(steps 1) >= $1)); }
wait_for 60 stepped 5 || fail "the groups did not step 5 times within 60 s"
before=$(($(steps 0) > $(steps 1) ? $(steps 0) : $(steps 1)))
pre_id=$(awk '{print $2}' "$work"/group*.steps | sort -n | tail -n 1)
echo "replica $leader leads; both groups stepped ($before steps, quorum id $pre_id); kill -9 of the leader"
kill -KILL "${server_pid[leader]}"
wait "${server_pid[leader]}" 2>/dev/null
server_pid[leader]=
wait_for 60 stepped $((before + 5)) || fail "the groups did not step 5 more times within 60 s of the kill"
touch "$work/release"
agent_done() { local p; for p in "${agent_pids[@]}"; do kill -0 "$p" 2>/dev/null && return 1; done; return 0; }
wait_for 60 agent_done || fail "the job did not end within 60 s of the release"
for p in "${agent_pids[@]}"; do
  wait "$p"
  rc=$?
  ((rc == 0)) || fail "an agent of the job exited $rc"
done
agent_pids=()
if [[ $form == replica_groups ]]; then
  ! grep -q "re-forming\|restarting workers" "$work"/agent*.log || fail "a group's run re-formed or restarted"
fi
[[ $(cat "$work/start.0" "$work/start.1" | tr '\n' ' ') == "0 0 " ]] ||
  fail "a worker restarted: starts $(cat "$work"/start.* | tr '\n' ' ')"

# The groups' logs: same quorum at every step both made; ids never go back; the failover's
# first id above every earlier one; the longest run of retries.
python3 - "$work/group0.steps" "$work/group1.steps" "$pre_id" <<'PY' || fail "the quorums' record is wrong (above)"
import sys
g0 = [l.split() for l in open(sys.argv[1])]
g1 = [l.split() for l in open(sys.argv[2])]
pre = int(sys.argv[3])
for a, b in zip(g0, g1):
    if a[:3] != b[:3]:
        sys.exit(f"step {a[0]}: group0 got quorum {a[1]} {a[2]}, group1 {b[1]} {b[2]}")
    if a[2] != "group0,group1":
        sys.exit(f"step {a[0]}: members {a[2]}")
for g in (g0, g1):
    ids = [int(s[1]) for s in g]
    if any(y < x for x, y in zip(ids, ids[1:])):
        sys.exit(f"quorum ids went back: {ids}")
after = [int(s[1]) for s in g0 if int(s[1]) != pre and int(s[1]) > 0]
changes = sorted(set(int(s[1]) for s in g0))
print(f"quorum ids: {changes[0]} before the failover, {changes[1:]} after it" if len(changes) > 1 else f"ids {changes}")
if len(changes) < 2 or changes[1] <= pre:
    sys.exit(f"no quorum id above {pre} after the failover: {changes}")
print(f"steps: {len(g0)} and {len(g1)}; most retries of one step: {max(int(s[3]) for s in g0 + g1)}")
PY
echo "PASS: both groups stepped on through the leader's kill -9 with no restart; same quorum at every step; ids never went back"
