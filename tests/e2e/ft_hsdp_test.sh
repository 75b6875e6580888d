#!/usr/bin/env bash
# examples/ft_hsdp under meshrun --replica_groups=3 (issue 33, libmesh's fault-tolerance
# manager): a (3, 2) mesh named (replicate, shard), 3 agents of 2 workers on loopback, one
# `meshrun server`, 200 steps. At step ~50 a worker of group 1 is killed (kill -9); its
# group's restarted workers wait 3 s first (--restart_delay_ms, standing for loading a model).
# Checked from outside, in the workers' output:
#   - groups 0 and 2 step on: each of their workers started once (restart 0 only), and they
#     commit steps with 2 replicas while group 1 is away; their longest stall is printed;
#   - group 1 restarts alone (its workers say restart 1) and heals from a peer to a step past
#     the one it died at ("healed to step N", N > 55: the others trained on meanwhile);
#   - every worker reaches step 200, every agent exits 0, and the final weights are equal
#     across the three groups, shard by shard (a digest of each rank's shard).
#   - a healthy group's committed step never goes back (a group that started over would
#     still end equal).
# FORM stop: instead of the kill, group 1's rank 1 is stopped (SIGSTOP) for 8 s, longer than
# the collectives' timeout (--timeout_s=5): the others' collectives with it fail, their step
# does not commit, and their replicate rows are built anew (new keys) whether or not the
# quorum's groups changed; group 1 restarts or not (whether its own collective with the
# stopped rank timed out); groups 0 and 2 must not restart nor go back, and all end equal.
# (Before: with the same groups in the next quorum, every group aborted and restarted.)
# usage: ft_hsdp_test.sh MESHRUN FT_HSDP [FORM]   (0 pass, 1 fail)
set -uo pipefail
meshrun=$(readlink -f "${1:?usage: ft_hsdp_test.sh MESHRUN FT_HSDP}")
example=$(readlink -f "${2:?usage: ft_hsdp_test.sh MESHRUN FT_HSDP}")
form=${3:-kill}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/support/wait_for.sh
source "$here/../support/wait_for.sh"
# shellcheck source=tests/support/rdzv_server.sh
source "$here/../support/rdzv_server.sh"
# shellcheck source=tests/support/ft_hsdp_log.sh
source "$here/../support/ft_hsdp_log.sh"
work=$(mktemp -d /tmp/meshrun-ft-hsdp.XXXXXX)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  grep -ho 'pid [0-9]*' "$work"/g*.log 2>/dev/null | awk '{ print $2 }' | xargs -r kill -CONT 2>/dev/null
  grep -ho 'pid [0-9]*' "$work"/g*.log 2>/dev/null | awk '{ print $2 }' | xargs -r kill -KILL 2>/dev/null
  [[ -z ${FT_HSDP_KEEP:-} && $work == /tmp/meshrun-ft-hsdp.* ]] && rm -rf -- "$work"
}
fail() {
  local f
  echo "FAIL: $*"
  for f in "$work"/*.log; do
    [[ -f $f ]] && { echo "--- ${f#"$work"/} (last 20 lines)"; tail -n 20 "$f"; }
  done
  echo "--- the workers' errors and the agents' failure lines"
  grep -H "ft_hsdp: [a-z_]*: \|failed with" "$work"/g*.log | head -n 20
  exit 1
}
trap cleanup EXIT

start_rdzv_server "$meshrun" "$work" || fail "the server did not listen within 20 s"

steps=200
# The stop form: group 1 is away for about 12 s (8 s stopped, its restart, 3 s of load), which
# 200 steps would not outlast: the others would finish first (a group back after the others
# finished finds no quorum of 2).
[[ $form == stop ]] && steps=600
# Agents one by one: groups fill in order. lighthouse_min_replicas=2: a quorum goes on with
# two groups; heartbeat_timeout 1 s: a dead group is left out of the quorum after 1 s.
for g in 0 1 2; do
  (MESHRUN_LOG_LEVEL=info "$meshrun" --nnodes=3 --replica_groups=3 --nproc_per_node=2 \
     --rdzv_endpoint="$endpoint" --rdzv_id=ft --max_restarts=3 \
     --rdzv_conf lighthouse_min_replicas=2,lighthouse_heartbeat_timeout=1 \
     --no_python "$example" --steps=$steps --step_ms=20 --restart_delay_ms=3000 --timeout_s=5 >"$work/g$g.log" 2>&1 &
   echo $! >"$work/g$g.pid"
   wait $!
   echo $? >"$work/g$g.rc") &
  pids+=($!)
  placed="grep -q 'replica group $g of 3' $work/g$g.log 2>/dev/null"
  wait_for 20 eval "$placed" || fail "agent $g was not placed in group $g within 20 s"
  pids+=("$(cat "$work/g$g.pid")")
done

# Kill -9 group 1's rank 1 once group 1 has committed step 50.
at50="grep -q '\] step 50 quorum' $work/g1.log"
wait_for 60 eval "$at50" || fail "group 1 did not reach step 50 within 60 s"
victim=$(grep -o 'group 1 rank 1 pid [0-9]* restart 0' "$work/g1.log" | awk '{ print $6 }')
[[ -n $victim ]] || fail "no pid for group 1's rank 1"
if [[ $form == stop ]]; then
  kill -STOP "$victim"
  echo "stopped group 1's rank 1 (pid $victim) after its step 50, for 8 s"
  sleep 8  # The fault itself: a worker hung for 8 s (not a wait for a state).
  kill -CONT "$victim" 2>/dev/null
else
  kill -KILL "$victim"
  echo "killed group 1's rank 1 (pid $victim) after its step 50"
fi

rc() { [[ -s $work/$1.rc ]] && cat "$work/$1.rc"; }
ended() { [[ -n $(rc g0) && -n $(rc g1) && -n $(rc g2) ]]; }
wait_for 120 ended || fail "the agents did not exit within 120 s of the kill"
for g in 0 1 2; do [[ $(rc g$g) == 0 ]] || fail "the agent of group $g exited $(rc g$g), not 0"; done

for g in 0 2; do
  starts=$(grep -c "ft_hsdp: group $g rank" "$work/g$g.log")
  [[ $starts == 2 ]] || fail "group $g's workers started $starts times, not once each (2)"
  [[ $form == stop ]] || grep -q "replicas 2 time" "$work/g$g.log" ||
    fail "group $g committed no step with 2 groups while group 1 was away"
done
for g in 0 2; do
  for r in 0 1; do
    back=$(step_went_back "$work/g$g.log" "$r")
    [[ -z $back ]] || fail "group $g rank $r's committed step went back: $back"
  done
done
if [[ $form == stop ]]; then
  echo "groups 0 and 2 never restarted nor went back; group 1's workers started $(grep -c "ft_hsdp: group 1 rank" "$work/g1.log") times"
else
grep -q "ft_hsdp: group 1 rank 0 pid [0-9]* restart 1" "$work/g1.log" || fail "group 1 did not restart"
healed=$(grep -o 'healed to step [0-9]*' "$work/g1.log" | awk '{ print $4 }' | sort -n | tail -n 1)
[[ -n $healed && $healed -gt 55 ]] || fail "group 1 did not heal from a peer to a step past 55 after its restart (${healed:-none})"
echo "group 1 restarted alone and healed to step $healed; groups 0 and 2 never restarted nor went back"
fi

for r in 0 1; do
  digests=$(grep -ho "final group [0-2] rank $r step $steps loss [0-9.]* weights [0-9a-f]*" "$work"/g*.log |
            awk '{ print $NF }' | sort -u)
  n=$(grep -ho "final group [0-2] rank $r step $steps" "$work"/g*.log | wc -l)
  [[ $n == 3 ]] || fail "$n of the 3 groups' rank $r reached step $steps"
  [[ $(wc -l <<<"$digests") == 1 ]] || fail "rank $r's weights differ across the groups: $(echo $digests)"
done
echo "all 3 groups reached step $steps with equal weights (shard by shard)"

# The replicate rows' store keys (MeshOptions::releasable_keys): a worker releases its keys of
# a row when it drops the row (a failed step, or a new quorum's build), so the job's run (the
# groups' shared store, kept after the job for ended_run_ttl) holds the rows' last build only,
# however many times they were built, plus what workers stopped by a restart never released.
# One build of the two rows writes 12 keys (2 rows x 3 members x a description and a payload,
# which carries the Gloo address); each restart of group 1 leaves its 2 workers' 2 keys. Without
# the release this test's run held 40 keys (32 in the stop form).
status_json=$("$meshrun" status --rdzv_endpoint="$endpoint" --rdzv_id=ft --json --timeout 5 2>&1)
keys=$(grep -o '"kv_keys":[0-9]*' <<<"$status_json" | head -n 1 | cut -d: -f2)
quorums=$(grep -o '"quorum_id":[0-9]*' <<<"$status_json" | head -n 1 | cut -d: -f2)
[[ -n $keys ]] || fail "meshrun status shows no key count for the job's run: $status_json"
restarts=$(grep -o "ft_hsdp: group 1 rank 0 pid [0-9]* restart [1-9]" "$work/g1.log" | sort -u | wc -l)
bound=$((12 + 4 * restarts))
((keys <= bound)) || fail "the job's run holds $keys store keys after $quorums quorums (at most $bound: the rows' last build, and 4 per restart of group 1)"
echo "the job's store after $quorums quorums and $restarts restart(s) of group 1: $keys keys (at most $bound)"

# The healthy groups' longest stall: the longest time between two committed steps.
for g in 0 2; do
  grep -o 'step [0-9]* quorum [0-9]* replicas [0-9] time [0-9.]*' "$work/g$g.log" | awk '{ print $NF }' | sort -n |
    awk -v g=$g 'NR > 1 && $1 - prev > worst { worst = $1 - prev } { prev = $1 }
                 END { printf "group %d: longest stall %.2f s\n", g, worst }'
done
echo "PASS"
