#!/usr/bin/env bash
# libmesh's fault-tolerance manager through a kill -9 of the leading server replica (issue
# 33): examples/ft_hsdp under meshrun --replica_groups=3 (3 agents of 2 workers on loopback)
# on 3 `meshrun server` replicas over a real 3-member etcd (tests/etcd/etcd_cluster.sh). Once
# every group has committed step 40, the leader is killed, and with it a worker of group 1
# (both kill -9): group 1's agent reports the failure to the next leader.
#
# Checked from outside, in the workers' output: groups 0 and 2 do not restart (each of their
# 2 workers starts once, restart 0) and their runs do not re-form; group 1 restarts once and
# heals from a peer; every group reaches the last step, the final weights are equal across
# the groups (shard by shard), every agent exits 0. The healthy groups' longest stall (the
# failover, as their store calls and quorums wait for the next leader, and group 1 left out)
# is printed.
# usage: ft_hsdp_failover_test.sh MESHRUN FT_HSDP   (0 pass, 1 fail, 77 skip: no etcd)
set -uo pipefail
meshrun=$(readlink -f "${1:?usage: ft_hsdp_failover_test.sh MESHRUN FT_HSDP}")
example=$(readlink -f "${2:?usage: ft_hsdp_failover_test.sh MESHRUN FT_HSDP}")
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/etcd/etcd_cluster.sh
source "$here/etcd_cluster.sh"
etcd_require
# shellcheck source=tests/support/wait_for.sh
source "$here/../support/wait_for.sh"
# shellcheck source=tests/etcd/replicas.sh
source "$here/replicas.sh"
# shellcheck source=tests/support/ft_hsdp_log.sh
source "$here/../support/ft_hsdp_log.sh"

work=$(mktemp -d /tmp/meshrun-ft-failover.XXXXXX)
server_pid=() agent_pids=()
cleanup() {
  local p
  for p in "${agent_pids[@]}" "${server_pid[@]}"; do
    [[ -n $p ]] && kill -KILL "$p" 2>/dev/null && wait "$p" 2>/dev/null
  done
  grep -ho 'pid [0-9]*' "$work"/g*.log 2>/dev/null | awk '{ print $2 }' | xargs -r kill -KILL 2>/dev/null
  etcd_down
  [[ -z ${FT_FAILOVER_KEEP:-} && $work == /tmp/meshrun-ft-failover.* ]] && rm -rf -- "$work"
}
fail() {
  local f
  echo "FAIL: $*"
  for f in "$work"/server*.log "$work"/g*.log; do
    [[ -f $f ]] && { echo "--- ${f##*/} (last 15 lines)"; tail -n 15 "$f"; }
  done
  exit 1
}
trap cleanup EXIT
etcd_up 3 || fail "etcd did not come up"
trap cleanup EXIT  # etcd_up sets its own: ours calls etcd_down too.

start_replicas "$meshrun" "$work" ft-test --state_lease_ttl 2 || fail "the 3 replicas did not all listen within 20 s"
led() { leader_now >/dev/null; }
wait_for 30 led || fail "no replica led within 30 s"
leader=$(leader_now)

steps=300
# A quorum goes on with 2 groups; a group is left out after 5 s of silence (a failover takes
# about 2-3 s).
for g in 0 1 2; do
  MESHRUN_LOG_LEVEL=info "$meshrun" --nnodes=3 --replica_groups=3 --nproc_per_node=2 --rdzv_endpoint="$endpoints" \
    --rdzv_id=ftf --max_restarts=3 \
    --rdzv_conf leader_grace=60,lighthouse_min_replicas=2,lighthouse_heartbeat_timeout=5 \
    --no_python "$example" --steps=$steps --step_ms=20 >"$work/g$g.log" 2>&1 &
  agent_pids+=($!)
  placed="grep -q 'replica group $g of 3' $work/g$g.log 2>/dev/null"
  wait_for 20 eval "$placed" || fail "agent $g was not placed in group $g within 20 s"
done
at40() { local g; for g in 0 1 2; do grep -q '\] step 40 quorum' "$work/g$g.log" || return 1; done; }
wait_for 90 at40 || fail "the groups did not all commit step 40 within 90 s"
victim=$(grep -o 'group 1 rank 1 pid [0-9]* restart 0' "$work/g1.log" | awk '{ print $6 }')
[[ -n $victim ]] || fail "no pid for group 1's rank 1"
echo "replica $leader leads; every group committed step 40; kill -9 of the leader and of group 1's rank 1"
kill -KILL "${server_pid[leader]}" "$victim"
wait "${server_pid[leader]}" 2>/dev/null
server_pid[leader]=
kill_time=$(date +%s.%N)

agent_done() { local p; for p in "${agent_pids[@]}"; do kill -0 "$p" 2>/dev/null && return 1; done; return 0; }
wait_for 180 agent_done || fail "the job did not end within 180 s of the kill"
for p in "${agent_pids[@]}"; do
  wait "$p"
  rc=$?
  ((rc == 0)) || fail "an agent of the job exited $rc"
done
agent_pids=()
! grep -q "re-forming\|restarting workers" "$work"/g0.log "$work"/g2.log || fail "group 0's or 2's run re-formed"
for g in 0 2; do
  starts=$(grep -c "ft_hsdp: group $g rank [01] pid [0-9]* restart 0" "$work/g$g.log")
  all=$(grep -c "ft_hsdp: group $g rank" "$work/g$g.log")
  [[ $starts == 2 && $all == 2 ]] || fail "group $g's workers started $all times ($starts at restart 0), not once each"
done
for r in 0 1; do
  n=$(grep -ho "final group [0-2] rank $r step $steps" "$work"/g*.log | wc -l)
  [[ $n == 3 ]] || fail "$n of the 3 groups' rank $r reached step $steps"
  digests=$(grep -ho "final group [0-2] rank $r step $steps loss [0-9.]* weights [0-9a-f]*" "$work"/g*.log |
            awk '{ print $NF }' | sort -u)
  [[ $(wc -l <<<"$digests") == 1 ]] || fail "rank $r's weights differ across the groups: $(echo $digests)"
done
for g in 0 2; do
  for r in 0 1; do
    back=$(step_went_back "$work/g$g.log" "$r")
    [[ -z $back ]] || fail "group $g rank $r's committed step went back: $back"
  done
done
grep -q "ft_hsdp: group 1 rank 1 pid [0-9]* restart 1" "$work/g1.log" || fail "group 1 did not restart"
grep -q "healed to step" "$work/g1.log" || fail "group 1 did not heal from a peer after its restart"
echo "groups 0 and 2 never restarted, group 1 restarted once and healed; all 3 reached step $steps with equal weights"
for g in 0 2; do
  grep -o 'step [0-9]* quorum [0-9]* replicas [0-9] time [0-9.]*' "$work/g$g.log" | awk '{ print $NF }' | sort -n |
    awk -v g=$g -v k="$kill_time" 'NR > 1 && $1 - prev > worst { worst = $1 - prev; at = prev - k }
      { prev = $1 } END { printf "group %d: longest stall %.2f s (from %.2f s after the kill)\n", g, worst, at }'
done
echo "PASS"
