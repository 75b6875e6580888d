#!/usr/bin/env bash
# Every answer is durable, or it is not an answer (issue 30, item 2; docs/etcd.md): a round
# that closes while etcd has no quorum is not answered, and the job still finishes after the
# quorum returns and the leader is killed. On loopback, distinct ports.
#
#   1. A real 3-member etcd cluster (tests/etcd/etcd_cluster.sh) and 3 `meshrun server`
#      replicas sharing `--state etcd://...`, replica i listing etcd member i first, with a
#      long lease (--state_lease_ttl 10; UNSAVED_LEASE_TTL=N for another): the leader keeps
#      serving for several seconds after etcd loses its quorum (it pauses only once its lease
#      cannot be confirmed within its TTL).
#   2. Node 0 of a 2-node job (`--rdzv_endpoint` listing the 3 replicas, rdzv_conf
#      leader_grace=60) joins; its join is saved (etcd has its quorum).
#   3. The two etcd members that are not the leader's own are killed (kill -9): no quorum.
#      Node 1 starts at once: its join closes the round on the leader, which still serves but
#      cannot save the round. Seen from outside: no worker starts while etcd has no quorum
#      (watched for 8 s from the kill, and until the leader has logged the failed save), the
#      leader's log says the run's state could not be saved and that it reloads its state
#      from etcd, and both agents keep running.
#   4. The two etcd members come back: a replica leads (it knows the run), the round closes
#      again and both workers start (measured from the quorum's return).
#   5. kill -9 of the leading replica (its etcd member stays): both agents follow the next
#      leader, which knows the run (meshrun status: running); the workers are released and
#      both agents exit 0; each worker started exactly once, at the round its agent joined,
#      with restart count 0; no agent was refused ("not a member of run", "wrong session
#      credential").
#
# Before the change, the round was answered anyway: the workers started while etcd had no
# quorum, the save failed (only logged), and after the failover the next leader did not know
# the round: both agents were refused and stopped their workers (exit 1). Step 3 fails then.
#
# usage: unsaved_round_test.sh MESHRUN_BINARY
#        (0 pass, 1 fail, 77 skip: no etcd/etcdctl)
# Every wait is bounded; everything started here is killed on exit, failure included.
# UNSAVED_KEEP=1 keeps the scratch directory (logs) in /tmp.
set -uo pipefail

meshrun=$(readlink -f "${1:?usage: unsaved_round_test.sh MESHRUN_BINARY}")
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/etcd/etcd_cluster.sh
source "$here/etcd_cluster.sh"
etcd_require
# shellcheck source=tests/support/wait_for.sh
source "$here/../support/wait_for.sh"
# shellcheck source=tests/etcd/replicas.sh
source "$here/replicas.sh"
lease_ttl=${UNSAVED_LEASE_TTL:-10}
leader_grace=60
# The agents' "joined run ... round N" lines are info (MESHRUN_LOG_LEVEL=debug for more).
log_level=${MESHRUN_LOG_LEVEL:-info}
no_quorum_watch_s=8  # How long, at least, no worker may start once the quorum is gone.

work=$(mktemp -d /tmp/meshrun-unsaved-round-test.XXXXXX)
server_pid=() agent_pid=()
cleanup() {
  local p
  for p in "${agent_pid[@]}" "${server_pid[@]}"; do
    [[ -n $p ]] && kill -KILL "$p" 2>/dev/null && wait "$p" 2>/dev/null
  done
  etcd_down
  [[ -z ${UNSAVED_KEEP:-} && $work == /tmp/meshrun-unsaved-round-test.* ]] && rm -rf -- "$work"
}
fail() {
  local f
  echo "FAIL: $*"
  [[ -n ${endpoints:-} ]] && echo "--- meshrun status: $("$meshrun" status --rdzv_endpoint="$endpoints" --rdzv_id=unsaved --timeout 2 2>&1)"
  for f in "$work"/server*.log "$work"/agent*.log; do
    [[ -f $f ]] || continue
    echo "--- ${f##*/} (last 20 lines)"
    tail -n 20 "$f"
  done
  exit 1
}
trap cleanup EXIT
etcd_up 3 || fail "etcd did not come up"
trap cleanup EXIT  # etcd_up sets its own: ours calls etcd_down too.

# 1. Three replicas, each with its own etcd member first.
MESHRUN_LOG_LEVEL=$log_level start_replicas "$meshrun" "$work" unsaved-test --state_lease_ttl "$lease_ttl" ||
  fail "the 3 replicas did not all listen within 20 s"
# serving_leader: a replica leads and serves the run 'unsaved' (meshrun status); sets $leader.
serving_leader() {
  local i
  i=$(leader_now) || return 1
  "$meshrun" status --rdzv_endpoint="$endpoints" --rdzv_id=unsaved --timeout 2 2>/dev/null |
    grep -q "run 'unsaved' at 127.0.0.1:$(cat "$work/port$i"): " || return 1
  leader=$i
}
led() { grep -q "meshrun server: leading" "$work"/server*.log 2>/dev/null && leader_now >/dev/null; }
wait_for 30 led || fail "no replica led within 30 s"
leader=$(leader_now) || fail "meshrun status names no leader"
echo "etcd: $(etcd_endpoints); replicas: $endpoints; replica $leader leads (lease TTL $lease_ttl s)"

# 2. Node 0 joins. Each worker records its start (restart count, round, rank), then waits
# for the release file (bounded: 120 s).
worker='echo "$TORCHELASTIC_RESTART_COUNT $MESHRUN_ROUND $RANK" >> "$OUT/rank$RANK.start"
for i in $(seq 2400); do [ -e "$OUT/release" ] && break; sleep 0.05; done
[ -e "$OUT/release" ] || exit 3
echo "$TORCHELASTIC_RESTART_COUNT" > "$OUT/rank$RANK.end"'
start_agent() {
  OUT=$work MESHRUN_LOG_LEVEL=$log_level "$meshrun" --nnodes=2 --nproc_per_node=1 --rdzv_endpoint="$endpoints" --rdzv_id=unsaved \
    --max_restarts=3 --rdzv_conf=leader_grace=$leader_grace --no_python sh -c "$worker" >"$work/agent$1.log" 2>&1 &
  agent_pid[$1]=$!
}
started() { compgen -G "$work/rank*.start" >/dev/null; }
start_agent 0
joined0() { grep -q "1/2 nodes joined" "$work/agent0.log"; }
wait_for 30 joined0 || fail "node 0's agent did not report its join within 30 s"
started && fail "a worker started with one node of two joined"
echo "node 0 joined and waits for node 1"

# 3. etcd loses its quorum (the two members that are not the leader's own); node 1 joins at once.
t_q=$(now_ms)
for i in 0 1 2; do ((i != leader)) && { etcd_kill "$i" || fail "etcd member $i outlived kill -9"; }; done
start_agent 1
leader_log=$work/server$leader.log
save_failed() { grep -q "could not be saved" "$leader_log"; }
t_failed=
while (($(now_ms) < t_q + no_quorum_watch_s * 1000)) || [[ -z $t_failed ]]; do
  started && fail "a worker started while etcd had no quorum, $(($(now_ms) - t_q)) ms after it was lost: $(cat "$work"/rank*.start | tr '\n' ';')"
  [[ -z $t_failed ]] && save_failed && t_failed=$(now_ms)
  (($(now_ms) >= t_q + 30000)) && fail "the leader (replica $leader) logged no failed save within 30 s of etcd losing its quorum"
  sleep 0.05
done
echo "leader, $((t_failed - t_q)) ms after quorum was lost: $(grep -h "could not be saved" "$leader_log" | head -n 1 | sed 's/.*\] //' | cut -c1-220)..."
reloads() { grep -q "reloads its state from etcd" "$leader_log"; }
wait_for 10 reloads || fail "the leader (replica $leader) did not say it reloads its state from etcd"
echo "leader: $(grep -h "reloads its state from etcd" "$leader_log" | head -n 1 | sed 's/.*\] //' | cut -c1-160)..."
for n in 0 1; do kill -0 "${agent_pid[n]}" 2>/dev/null || fail "agent $n stopped while etcd had no quorum (leader_grace is $leader_grace s)"; done
grep -q "joined run 'unsaved' round" "$work/agent1.log" && fail "node 1's agent was answered while etcd had no quorum"
echo "no worker started during the $(($(now_ms) - t_q)) ms without quorum; both agents wait"

# 4. The quorum returns: a replica leads again, knowing the run, and the workers start.
for i in 0 1 2; do ((i != leader)) && etcd_start "$i"; done
etcd_wait_healthy 20 || fail "etcd did not recover its quorum within 20 s"
t_back=$(now_ms)
both_started() { [[ -s $work/rank0.start && -s $work/rank1.start ]]; }
# unanswered: the agents whose join was never answered ("joined run" is an info line).
unanswered() {
  local n out=
  for n in 0 1; do grep -q "joined run 'unsaved' round" "$work/agent$n.log" || out+="${out:+, }agent $n"; done
  echo "${out:-none}"
}
wait_for 60 both_started ||
  fail "the workers did not both start within 60 s of etcd's quorum returning (joins never answered: $(unanswered))"
t_started=$(now_ms)
wait_for 20 serving_leader || fail "no replica leads and serves the run 'unsaved' within 20 s of the workers' start"
echo "quorum lost for $((t_back - t_q)) ms; both workers started $((t_started - t_back)) ms after it returned; replica $leader leads"

# 5. kill -9 of the leading replica (not its etcd member): both agents follow the next leader.
follows() { cat "$work"/agent0.log "$work"/agent1.log 2>/dev/null | grep -c "following the rendezvous leader"; }
before=$(follows)
t_kill=$(now_ms)
kill -KILL "${server_pid[leader]}"
wait "${server_pid[leader]}" 2>/dev/null
server_pid[leader]=
killed=$leader
moved() { (($(follows) >= before + 2)) && serving_leader && ((leader != killed)); }
wait_for 60 moved || fail "the agents did not both follow a next leader that serves the run within 60 s of killing replica $killed"
echo "failover: both agents on replica $leader $(($(now_ms) - t_kill)) ms after kill -9 of replica $killed"
"$meshrun" status --rdzv_endpoint="$endpoints" --rdzv_id=unsaved --timeout 5 >"$work/status.txt" 2>&1 ||
  fail "meshrun status failed: $(cat "$work/status.txt")"
grep -q "run 'unsaved' at 127.0.0.1:$(cat "$work/port$leader"): running" "$work/status.txt" ||
  fail "the next leader does not show the run running: $(cat "$work/status.txt")"
for n in 0 1; do kill -0 "${agent_pid[n]}" 2>/dev/null || fail "agent $n stopped after the failover"; done
echo "next leader: $(grep -m1 "run 'unsaved' at" "$work/status.txt")"

touch "$work/release"
agent_done() { ! kill -0 "${agent_pid[$1]}" 2>/dev/null; }
for n in 0 1; do
  wait_for 60 agent_done "$n" || fail "agent $n did not finish within 60 s of the release"
  wait "${agent_pid[n]}"
  rc=$?
  agent_pid[n]=
  ((rc == 0)) || fail "agent $n exited $rc (expected 0)"
done
refused=$(grep -h -E "not a member of run|wrong session credential" "$work"/agent*.log | head -n 3)
[[ -z $refused ]] || fail "an agent was refused: $refused"
# Each worker once, at the round its agent joined (the agents' last "joined" line), restart 0.
for r in 0 1; do
  [[ $(wc -l <"$work/rank$r.start") == 1 ]] || fail "worker rank $r was started $(wc -l <"$work/rank$r.start") times: $(tr '\n' ';' <"$work/rank$r.start")"
  read -r count _ <"$work/rank$r.start"
  [[ $count == 0 ]] || fail "worker rank $r started with restart count $count (expected 0)"
  [[ $(cat "$work/rank$r.end" 2>/dev/null) == 0 ]] || fail "worker rank $r did not finish with restart count 0"
done
read -r _ round0 _ <"$work/rank0.start"
read -r _ round1 _ <"$work/rank1.start"
[[ $round0 == "$round1" ]] || fail "the workers started at rounds $round0 and $round1"
for n in 0 1; do
  joined=$(grep -h "joined run 'unsaved' round" "$work/agent$n.log" | tail -n 1 | sed -E "s/.*joined run 'unsaved' round ([0-9]+) .*/\1/")
  [[ $joined == "$round0" ]] || fail "agent $n joined round '$joined' but the workers started at round $round0"
  [[ $(grep -c "joined run 'unsaved' round" "$work/agent$n.log") == 1 ]] ||
    fail "agent $n joined more than once: $(grep -h "joined run 'unsaved' round" "$work/agent$n.log" | tr '\n' ';')"
done
echo "PASS: the round that closed while etcd had no quorum was not answered (no worker started, the leader reloaded); after the quorum returned both workers started once at round $round0, and after kill -9 of the leader both agents followed the next leader and exited 0, unrefused"
