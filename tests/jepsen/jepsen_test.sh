#!/usr/bin/env bash
# Jepsen-style test of the replicated rendezvous server (issue 30, docs/etcd.md "What is
# checked"). Five namespace hosts (tests/hosts/netns_hosts.sh): hosts 0-2 each run an etcd
# member, a replica (meshrun server --state, port 29400) and a probe; hosts 3-4 are a 2-node
# job of 2 workers each. Every worker is a jepsen_client that does store operations through
# its node's store proxy (which follows the leading replica) as fast as it can (5 ms apart):
# reads, writes of unique values and compare-sets on 4 registers, adds and reads on 2
# counters. Each probe reads one key at a time straight from its host's replica, every
# 20 ms, and records whether the replica served. Every operation is recorded with its
# invocation and completion times (jepsen_client.cc says how).
#
# Meanwhile the faults below hit the replica that leads at that moment, one after the
# other, each bounded; each must move the leadership to another replica (checked), and the
# job must go on between them (new operations completed: checked):
#   stop       SIGSTOP of the leader's replica until another replica leads, plus 1 s; SIGCONT
#   partition  the leader's host loses its link until another replica leads, plus 2 s
#   quorum     the two etcd members off the leader's host are killed for 5 s (past
#              --state_timeout), then started again; the leader pauses, no one else can lead
#   kill       kill -9 of everything on the leader's host (replica, etcd member, probe); its
#              etcd member and replica are then started again (a rebooted host)
#   quorum_kill  quorum, and once the leader has paused, kill of its host; the other etcd
#              members then start again and another replica leads (used by the lie below)
# Then the workers stop, the job must finish (both agents exit 0: never restarted), and
# jepsen_check (tests/jepsen/jepsen_check.cc) decides: every key's history linearizable
# (registers with compare-set, counters: so no lost acknowledged write, no stale read, no
# add applied twice), and no two replicas proven to serve at the same time.
#
# With --lie=KIND LYING_SERVER the replicas are tests/jepsen/lying_server.cc, which lies on
# purpose, and the test passes only when jepsen_check finds the lie (the job's own promises,
# progress after each fault and exit 0, are then only noted: lying replicas may break them):
#   ack_before_save    (fault quorum_kill) must give a history that is not linearizable
#   open_while_paused  (fault partition) must show two replicas serving at once
#
# usage: jepsen_test.sh MESHRUN JEPSEN_CLIENT JEPSEN_CHECK [--faults=LIST] [--lie=KIND LYING_SERVER]
#        (0 pass, 1 fail, 77 skip: no etcd, not root, no network namespaces)
# Every wait is bounded; everything started here is killed on exit, failure included.
# JEPSEN_KEEP=1 keeps the work directory (histories, logs) even when the test passes.
set -uo pipefail

meshrun=$(readlink -f "${1:?usage: jepsen_test.sh MESHRUN JEPSEN_CLIENT JEPSEN_CHECK ...}")
client=$(readlink -f "${2:?usage: jepsen_test.sh MESHRUN JEPSEN_CLIENT JEPSEN_CHECK ...}")
check=$(readlink -f "${3:?usage: jepsen_test.sh MESHRUN JEPSEN_CLIENT JEPSEN_CHECK ...}")
shift 3
faults=stop,partition,quorum,kill,quorum_kill lie= server_cmd=("$meshrun" server)
while (($#)); do
  case $1 in
    --faults=*) faults=${1#--faults=} ;;
    --lie=*)
      lie=${1#--lie=}
      server_cmd=("$(readlink -f "${2:?--lie=KIND needs the path of the lying server}")" "--lie=$lie")
      shift ;;
    *) echo "jepsen_test.sh: unknown argument '$1' (--faults=LIST, --lie=KIND LYING_SERVER)" >&2; exit 2 ;;
  esac
  shift
done
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/etcd/etcd_cluster.sh
source "$here/../etcd/etcd_cluster.sh"
etcd_require
# shellcheck source=tests/hosts/netns_hosts.sh
source "$here/../hosts/netns_hosts.sh"
hosts_require
# shellcheck source=tests/support/wait_for.sh
source "$here/../support/wait_for.sh"

port=29400 run=jepsen lease_ttl=2
work=$(mktemp -d /tmp/meshrun-jepsen-test.XXXXXX)
chmod 755 "$work"
server_pid=() agent_pid=() probe_pid=()
passed=0
cleanup() {
  local p
  for p in "${agent_pid[@]}" "${probe_pid[@]}" "${server_pid[@]}"; do
    [[ -n $p ]] && kill -CONT "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null && wait "$p" 2>/dev/null
  done
  etcd_down
  hosts_down
  if ((passed)) && [[ -z ${JEPSEN_KEEP:-} && $work == /tmp/meshrun-jepsen-test.* ]]; then
    rm -rf -- "$work"
  else
    echo "histories and logs kept in $work"
  fi
}
fail() {
  local f
  echo "FAIL: $*"
  for f in "$work"/server*.log "$work"/agent*.log; do
    [[ -f $f ]] || continue
    echo "--- ${f##*/} (last 10 lines)"
    tail -n 10 "$f"
  done
  exit 1
}

# expect WHAT: a promise about the job; with --lie only noted (replicas that lie may break
# the job too: the checker is what must notice, from what was recorded).
expect() {
  if [[ -n $lie ]]; then echo "note (the replicas lie): $*"; else fail "$*"; fi
}

trap cleanup EXIT
hosts_up 5 || fail "the namespace hosts did not come up"
trap cleanup EXIT
etcd_up 3 --hosts || fail "etcd did not come up"
trap cleanup EXIT  # hosts_up and etcd_up set their own: ours calls them too.

endpoints=
for i in 0 1 2; do endpoints+="${endpoints:+,}${HOSTS_V4[i]}:$port"; done
# start_replica I: replica I on host I, its own etcd member first.
start_replica() {
  local i=$1 members=${ETCD_CLIENT[$1]} j
  for j in 0 1 2; do ((j != i)) && members+=",${ETCD_CLIENT[j]}"; done
  on_host "$i" "${server_cmd[@]}" --host "${HOSTS_V4[i]}" --port $port --state "etcd://$members/jepsen" \
    --state_lease_ttl $lease_ttl >>"$work/server$i.log" 2>&1 &
  server_pid[i]=$!
}
# start_probe I: the probe of replica I, on host I.
start_probe() {
  on_host "$1" "$client" probe --replica "${HOSTS_V4[$1]}:$port" --run $run --name "probe$1" --out "$work" \
    --stop "$work/stop" --max_s 600 >>"$work/probe$1.log" 2>&1 &
  probe_pid[$1]=$!
}
for i in 0 1 2; do start_replica "$i"; done
# The replica that leads now, from meshrun status on host 3: its index (0..2).
leader_now() {
  local line i
  line=$(on_host 3 "$meshrun" status --rdzv_endpoint="$endpoints" --timeout 2 2>>"$work/status.err" | grep -m1 "^replicas") || return 1
  echo "$line" >>"$work/status.log"
  for i in 0 1 2; do
    [[ $line == *": ${HOSTS_V4[i]}:$port (leader)"* ]] && { echo "$i"; return 0; }
  done
  return 1
}
leads() { leader=$(leader_now); }
wait_for 30 leads || fail "no replica led within 30 s"
for i in 0 1 2; do start_probe "$i"; done

for n in 0 1; do
  on_host $((3 + n)) "$meshrun" --nnodes=2 --nproc_per_node=2 --rdzv_endpoint="$endpoints" --rdzv_id=$run \
    --max_restarts=0 --rdzv_conf=leader_grace=60 --no_python \
    "$client" worker --out "$work" --stop "$work/stop" --max_s 600 >"$work/agent$n.log" 2>&1 &
  agent_pid[n]=$!
done
# ok_ops: the operations the workers completed so far.
ok_ops() { cat "$work"/history.w* 2>/dev/null | awk -F'\t' '$6 == "ok"' | wc -l; }
# progress S N: the workers complete N more operations within S s.
progress() {
  local from
  from=$(ok_ops)
  more() { (($(ok_ops) >= from + $1)); }
  wait_for "$1" more "$2"
}
progress 60 100 || fail "the job's workers completed no store operations within 60 s"
echo "job running on hosts 3-4; replica $leader leads; ops so far: $(ok_ops)"

# another_leads: a replica other than $leader leads (meshrun status from host 3).
another_leads() {
  local now
  now=$(leader_now) && [[ $now != "$leader" ]] && new_leader=$now
}
# replica_pid I: the pid of replica I's process itself ($! is the shell that entered the host).
replica_pid() {
  local p
  for p in $(host_pids "$1"); do
    [[ $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null) == "${server_cmd[*]} "* ]] && { echo "$p"; return 0; }
  done
  return 1
}
fault_stop() {
  local pid
  pid=$(replica_pid "$leader") || fail "no process of replica $leader on host $leader"
  kill -STOP "$pid"
  wait_for 30 another_leads || { kill -CONT "$pid"; fail "no other replica led within 30 s of SIGSTOP of replica $leader"; }
  sleep 1  # The stopped leader's lease is long gone; the new leader serves meanwhile.
  kill -CONT "$pid"
}
fault_partition() {
  host_link "$leader" down || fail "cannot cut host $leader's link"
  wait_for 30 another_leads || { host_link "$leader" up; fail "no other replica led within 30 s of cutting host $leader off"; }
  sleep 2  # Both sides run: the cut-off replica must not serve meanwhile.
  host_link "$leader" up || fail "cannot restore host $leader's link"
}
fault_quorum() {
  local i
  for i in 0 1 2; do ((i != leader)) && etcd_kill "$i"; done
  paused() { grep -q "stopped serving until it is" "$work/server$leader.log"; }
  wait_for 15 paused || [[ -n $lie ]] || fail "replica $leader did not pause within 15 s of etcd losing its quorum"
  sleep 5  # Past --state_timeout (3 s): writes in flight when the quorum went have failed.
  for i in 0 1 2; do ((i != leader)) && etcd_start "$i"; done
  etcd_wait_healthy 30 || fail "etcd did not recover its quorum within 30 s"
  new_leader=$leader  # Nobody else could lead: the same replica serves again.
}
fault_kill() {
  host_kill "$leader" || fail "cannot kill host $leader"
  reboot_leader_host
}
# reboot_leader_host: after host_kill of $leader, another replica leads; then the host's etcd
# member, replica and probe start again (a rebooted host).
reboot_leader_host() {
  wait "${server_pid[leader]}" "${probe_pid[leader]}" 2>/dev/null
  ETCD_PID[leader]=
  wait_for 30 another_leads || fail "no other replica led within 30 s of killing host $leader"
  etcd_start "$leader" || fail "cannot start etcd member $leader again"
  start_replica "$leader"
  start_probe "$leader"
  etcd_wait_healthy 30 || fail "etcd member $leader did not rejoin within 30 s"
}
# quorum_kill: etcd loses its quorum as in quorum; once the leader has paused, its host is
# killed; the other members then start again, so that another replica leads with what etcd
# holds. A write acknowledged while etcd had no quorum and never saved is then lost for sure
# (with quorum alone the same replica leads again, and the job's later writes may hide it).
fault_quorum_kill() {
  local i
  for i in 0 1 2; do ((i != leader)) && etcd_kill "$i"; done
  paused() { grep -q "stopped serving until it is" "$work/server$leader.log"; }
  wait_for 15 paused || fail "replica $leader did not pause within 15 s of etcd losing its quorum"
  host_kill "$leader" || fail "cannot kill host $leader"
  for i in 0 1 2; do ((i != leader)) && etcd_start "$i"; done
  reboot_leader_host
}
IFS=, read -r -a fault_list <<<"$faults"
for f in "${fault_list[@]}"; do
  declare -F "fault_$f" >/dev/null || fail "unknown fault '$f' (stop, partition, quorum, kill, quorum_kill)"
  wait_for 10 leads || fail "no replica leads within 10 s before the fault '$f'"
  t0=$(now_ms) before=$(ok_ops)
  "fault_$f"
  progress 60 100 || expect "the job did not complete 100 store operations within 60 s after the fault '$f'"
  echo "fault $f: replica $leader led; replica $new_leader leads $(($(now_ms) - t0)) ms later, the job goes on ($(($(ok_ops) - before)) ops meanwhile)"
done

touch "$work/stop"
for n in 0 1; do
  done_() { ! kill -0 "${agent_pid[$1]}" 2>/dev/null; }
  wait_for 90 done_ "$n" || fail "agent $n did not finish within 90 s of the stop"
  wait "${agent_pid[n]}"
  rc=$?
  agent_pid[n]=
  ((rc == 0)) || expect "agent $n exited $rc (expected 0: the job is never restarted)"
done
for i in 0 1 2; do
  probe_done() { ! kill -0 "${probe_pid[$1]}" 2>/dev/null; }
  wait_for 10 probe_done "$i" || fail "probe $i did not stop within 10 s"
  wait "${probe_pid[i]}"
  probe_pid[i]=
done

timeout 300 "$check" --history "$work"/history.* --probes "$work"/probes.* >"$work/check.out" 2>&1
rc=$?
cat "$work/check.out"
case $lie in
  "") ((rc == 0)) || fail "jepsen_check exit $rc (expected 0)" ;;
  ack_before_save)
    ((rc == 1)) && grep -q "not linearizable" "$work/check.out" ||
      fail "the replicas acknowledged writes before saving them, and jepsen_check (exit $rc) did not find a history that is not linearizable" ;;
  open_while_paused)
    ((rc == 1)) && grep -q "served at once" "$work/check.out" ||
      fail "a cut-off leader went on serving, and jepsen_check (exit $rc) did not find two replicas serving at once" ;;
  *) fail "unknown --lie=$lie" ;;
esac
passed=1
echo "PASS: faults $faults${lie:+ against replicas that lie ($lie)}: $(ok_ops) operations completed by the workers"
