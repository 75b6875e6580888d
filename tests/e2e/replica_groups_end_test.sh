#!/usr/bin/env bash
# The end of a job of replica groups (issue 33): one exit barrier across the groups, and
# --min_replica_groups. Two jobs of 3 groups x 1 node x 1 worker (--max_restarts=0), 6 agents
# and one `meshrun server` on loopback.
#   Job "a" (--min_replica_groups 1, the default): group 0's worker exits 0 at once, group 1's
#   exits 3 (its group fails), group 2's runs on. The agents of groups 0 and 1 wait for the
#   job (they have not exited while group 2 runs); released, group 2 finishes and all three
#   agents exit 0, group 1's saying its group failed but the job succeeded.
#   Job "b" (--min_replica_groups=2): group 1 fails at once; groups 0 and 2 run on (2 alive).
#   Then group 2's worker crashes: 1 group alive, fewer than 2: group 0's agent stops its
#   running worker and fails its group, and every agent of the job exits non-zero.
# usage: replica_groups_end_test.sh MESHRUN   (0 pass, 1 fail)
set -uo pipefail
meshrun=$(readlink -f "${1:?usage: replica_groups_end_test.sh MESHRUN}")
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/support/wait_for.sh
source "$here/../support/wait_for.sh"
# shellcheck source=tests/support/rdzv_server.sh
source "$here/../support/rdzv_server.sh"
work=$(mktemp -d /tmp/meshrun-replica-end.XXXXXX)
pids=()
cleanup() {
  local p
  touch "$work/a/release" "$work/b/release" 2>/dev/null
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  cat "$work"/*/starts 2>/dev/null | awk '{ print $NF }' | xargs -r kill -KILL 2>/dev/null
  [[ -z ${REPLICA_GROUPS_KEEP:-} && $work == /tmp/meshrun-replica-end.* ]] && rm -rf -- "$work"
}
fail() {
  local f
  echo "FAIL: $*"
  for f in "$work"/*.log "$work"/*/starts; do
    [[ -f $f ]] && { echo "--- ${f#"$work"/} (last 15 lines)"; tail -n 15 "$f"; }
  done
  exit 1
}
trap cleanup EXIT
mkdir -p "$work/a" "$work/b"

start_rdzv_server "$meshrun" "$work" || fail "the server did not listen within 20 s"

# agent JOB G [FLAGS...]: a node of job JOB (a or b) that is placed in group G (agents are
# started one by one, and groups fill in order); its exit code lands in JOB-G.rc.
agent() {
  local job=$1 g=$2
  shift 2
  (env OUT="$work/$job" FINISH_GROUP="${FINISH_GROUP:--1}" FAIL_GROUP="${FAIL_GROUP:--1}" \
     CRASH_GROUP="${CRASH_GROUP:--1}" MESHRUN_LOG_LEVEL=info \
     "$meshrun" --nnodes=3 --replica_groups=3 "$@" --nproc_per_node=1 --rdzv_endpoint="$endpoint" \
     --rdzv_id="$job" --max_restarts=0 --rdzv_conf keep_alive_interval=0.5,keep_alive_max_attempt=2 \
     --no_python sh "$here/replica_group_end_worker.sh" >"$work/$job-$g.log" 2>&1 &
   echo $! >"$work/$job-$g.pid"
   wait $!
   echo $? >"$work/$job-$g.rc") &
  pids+=($!)
  local placed="grep -q 'replica group $g of 3' $work/$job-$g.log 2>/dev/null"
  wait_for 20 eval "$placed" || fail "agent $job-$g was not placed in group $g within 20 s"
  pids+=("$(cat "$work/$job-$g.pid")")
}
rc() { [[ -s $work/$1.rc ]] && cat "$work/$1.rc"; }
said() { grep -q "$2" "$work/$1.log"; }

# ---- Job a: one exit barrier across the groups.
for g in 0 1 2; do FINISH_GROUP=0 FAIL_GROUP=1 agent a $g; done
waiting() { said a-0 "waiting for the job's other groups" && said a-1 "waiting for the job's other groups"; }
wait_for 30 waiting || fail "job a: the agents of groups 0 and 1 do not say they wait for the job within 30 s"
[[ -z $(rc a-0) && -z $(rc a-1) ]] || fail "job a: an agent exited ($(rc a-0), $(rc a-1)) while group 2 runs"
said a-1 "replica group 1 FAILED" || fail "job a: group 1's agent did not report its group's failure"
echo "job a: groups 0 (finished) and 1 (failed) wait while group 2 runs"
touch "$work/a/release"
ended_a() { [[ -n $(rc a-0) && -n $(rc a-1) && -n $(rc a-2) ]]; }
wait_for 30 ended_a || fail "job a: the agents did not exit within 30 s of the release"
for g in 0 1 2; do [[ $(rc a-$g) == 0 ]] || fail "job a: agent of group $g exited $(rc a-$g), not 0"; done
said a-1 "replica group 1 failed, but the job succeeded" || fail "job a: group 1's agent does not say the job succeeded"
echo "job a: released, every agent exited 0 (group 1's: its group failed, the job succeeded)"

# ---- Job b: --min_replica_groups=2.
for g in 0 1 2; do FAIL_GROUP=1 CRASH_GROUP=2 agent b $g --min_replica_groups=2; done
b1_failed() { said b-1 "replica group 1 FAILED"; }
wait_for 30 b1_failed || fail "job b: group 1 did not fail within 30 s"
running_b() { (($(awk '$1 == 0 || $1 == 2' "$work/b/starts" | wc -l) == 2)); }
wait_for 20 running_b || fail "job b: the workers of groups 0 and 2 did not start"
# Groups 0 and 2 run on with group 1 failed: 2 alive, enough. (Their workers would have
# been stopped within a heartbeat or two, 0.5 s each; 3 s of them still running proves it.)
stays_alive() { [[ -n $(rc b-0) || -n $(rc b-2) ]]; }
wait_for 3 stays_alive && fail "job b: an agent of groups 0 or 2 exited with 2 of 3 groups alive"
echo "job b: group 1 failed; groups 0 and 2 run on (2 alive, --min_replica_groups=2)"
touch "$work/b/crash"
t0=$(now_ms)
ended_b() { [[ -n $(rc b-0) && -n $(rc b-1) && -n $(rc b-2) ]]; }
wait_for 30 ended_b || fail "job b: the agents did not exit within 30 s of group 2's crash"
for g in 0 1 2; do [[ $(rc b-$g) != 0 ]] || fail "job b: agent of group $g exited 0; the job failed"; done
said b-0 "too few replica groups are alive (.*--min_replica_groups=2); stopping group 0" ||
  fail "job b: group 0's agent does not say why it stopped"
said b-0 "the job failed" || fail "job b: group 0's agent does not say the job failed"
echo "job b: group 2 crashed; group 0 stopped $(($(now_ms) - t0)) ms later and every agent exited non-zero" \
  "($(rc b-0) $(rc b-1) $(rc b-2))"
echo "PASS: one exit barrier across replica groups, and --min_replica_groups fails the job when too few are alive"
