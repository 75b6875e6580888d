#!/usr/bin/env bash
# deploy/slurm/meshrun.sbatch on a real Slurm (Debian's slurmctld, slurmd, munged), started
# here, whose three compute nodes are network-namespace hosts (tests/hosts/netns_hosts.sh)
# set up like Debian machines: each maps its own name to 127.0.1.1, and host0 has a
# docker0-like interface that no other host reaches.
#
#   1. sbatch -N 3 --export=NONE,... of the script runs a 2-D PyTorch mesh over Gloo
#      (tests/py/two_d_mesh.py) with 2 workers per node under /usr/bin/python3; the job ends
#      COMPLETED, all 6 ranks report OK, every meshrun got the same token, and the token shows up
#      in no output or log.
#   2. A second job of long-waiting workers (each with a grandchild that ignores SIGTERM):
#      `scancel -s USR1` reaches every worker (they record each SIGUSR1 and its sender), every
#      meshrun survives it and the job goes on; SIGUSR1 sent to the meshruns alone is forwarded
#      to every worker; `scancel -b -s USR1` (the batch shell, which is srun) reaches every
#      worker too; `scancel` then ends the job CANCELLED and leaves no job process in any
#      namespace. Its token differs from the first job's. Its workers run in the step's cgroups
#      (proctrack/cgroup, task/cgroup), when the cluster runs with them (below).
#   3. Two jobs sharing the three nodes at once both finish COMPLETED, on the two ports the
#      script derives from their job ids.
#   4. Two jobs forced onto one port (MESHRUN_PORT): the second fails with one line naming the
#      first job's run; the first is unharmed.
#
# Slurm runs as production clusters run it: ProctrackType=proctrack/cgroup and
# TaskPlugin=task/cgroup,task/affinity, cgroup v1 (this machine's cgroups are v1 with a
# unified mount). `ip netns exec` mounts a fresh /sys without cgroups, so each slurmd gets its
# own subtree of each controller (mr<lease>-slurm-host<i>) bind-mounted at /sys/fs/cgroup/<c>:
# three slurmds on one kernel would otherwise share /slurm/uid_0/job_N. Where that cannot be
# set up (no cgroup v1 controllers here), the test says why and runs with
# proctrack/linuxproc and task/none instead.
#
# usage: slurm_test.sh SOURCE_DIR MESHRUN_BINARY    (exit 0 pass, 1 fail, 77 skip)
# Skipped (77) only for what this machine lacks: the Slurm and munge programs, root, PyTorch,
# network namespaces (hosts_require). Once namespaces are shown to work, a fixture or a Slurm
# that does not come up is a failure.
set -uo pipefail

src=$(cd "${1:?usage: slurm_test.sh SOURCE_DIR MESHRUN_BINARY}" && pwd)
meshrun=$(readlink -f "${2:?usage: slurm_test.sh SOURCE_DIR MESHRUN_BINARY}")
t0=$SECONDS

skip() { echo "skip: $*"; exit 77; }

for b in slurmctld slurmd munged sbatch srun scontrol scancel sinfo; do
  command -v "$b" >/dev/null 2>&1 || skip "no $b (Debian packages slurm-wlm and munge: scripts/install-deps.sh)"
done
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces, Slurm daemons)"
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import torch' 2>/dev/null ||
  skip "/usr/bin/python3 has no torch (Debian package python3-torch)"
case_py=$src/tests/py/two_d_mesh.py
fixture=$src/tests/hosts/netns_hosts.sh
[ -f "$fixture" ] || skip "no hosts fixture $fixture"
# shellcheck source=/dev/null
source "$fixture"
hosts_require
# shellcheck source=tests/etcd/etcd_cluster.sh
source "$src/tests/etcd/etcd_cluster.sh"
etcd_require

sbatch_script=$src/deploy/slurm/meshrun.sbatch
work=$(mktemp -d /tmp/meshrun-slurm-test.XXXXXX)
chmod 755 "$work"
munged_pid_file=$work/munge/munged.pid

cleanup() {
  local rc=$? i p
  trap - EXIT INT TERM
  # Every process of every host (daemons, slurmstepd, job processes): TERM, then KILL.
  for ((i = 0; i < ${HOSTS_N:-0}; i++)); do
    for p in $(ip netns pids "${HOSTS_NS[i]}" 2>/dev/null); do kill -TERM "$p" 2>/dev/null; done
  done
  for _ in $(seq 1 30); do
    left=0
    for ((i = 0; i < ${HOSTS_N:-0}; i++)); do
      [ -n "$(ip netns pids "${HOSTS_NS[i]}" 2>/dev/null)" ] && left=1
    done
    [ $left = 0 ] && break
    sleep 0.1
  done
  for ((i = 0; i < ${HOSTS_N:-0}; i++)); do
    for p in $(ip netns pids "${HOSTS_NS[i]}" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
  done
  if [ -f "$munged_pid_file" ]; then
    p=$(cat "$munged_pid_file" 2>/dev/null)
    if [ -n "$p" ]; then
      kill -TERM "$p" 2>/dev/null
      for _ in $(seq 1 30); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$p" 2>/dev/null
    fi
  fi
  declare -F cg_cleanup >/dev/null && cg_cleanup
  declare -F etcd_down >/dev/null && etcd_down
  hosts_down
  rm -rf "$work"
  exit $rc
}

dump() {
  local f
  for f in "$work"/slurmctld.log "$work"/slurmd-*.log "$work"/*.out; do
    [ -f "$f" ] || continue
    echo "----- ${f##*/} (last 40 lines)"
    tail -n 40 "$f"
  done
}
fail() { echo "FAIL: $*"; dump; exit 1; }

hosts_up 3 --debian-hosts --decoy-iface || { rm -rf "$work"; echo "FAIL: hosts_up 3 failed (namespaces work here)"; exit 1; }
trap cleanup EXIT   # replaces the fixture's EXIT trap; cleanup calls hosts_down
for ((i = 0; i < 3; i++)); do
  [ "${HOSTS_NAME[i]}" = "host$i" ] || fail "fixture named host $i '${HOSTS_NAME[i]}'"
done

# ---- munge: one daemon in the root namespace; its socket is a path, seen by every host.
mkdir -p "$work/munge" && chmod 755 "$work/munge"
head -c 1024 /dev/urandom >"$work/munge/munge.key" && chmod 0400 "$work/munge/munge.key"
munged --force --socket="$work/munge/munge.sock" --key-file="$work/munge/munge.key" \
  --pid-file="$munged_pid_file" --log-file="$work/munge/munged.log" \
  --seed-file="$work/munge/munged.seed" >"$work/munge/start.log" 2>&1 ||
  fail "munged does not start: $(tail -n 1 "$work/munge/start.log")"
for _ in $(seq 1 50); do [ -S "$work/munge/munge.sock" ] && break; sleep 0.1; done
[ -S "$work/munge/munge.sock" ] || fail "munged socket did not appear"

# ---- cgroups: one subtree per host of each cgroup v1 controller Slurm uses.
cg_controllers="freezer cpuset memory devices cpu cpuacct"
cg_prefix="mr${HOSTS_LEASE}-slurm-host"
cg_reason=""
for c in $cg_controllers; do
  if ! grep -qE "^cgroup /sys/fs/cgroup/$c cgroup " /proc/mounts; then
    cg_reason="no cgroup v1 '$c' controller mounted at /sys/fs/cgroup/$c (cgroup v2 only?)"
    break
  fi
done
cg_cleanup() {  # removes the hosts' subtrees, deepest first (every process is gone by now)
  local c top
  for c in $cg_controllers; do
    for top in /sys/fs/cgroup/"$c"/"$cg_prefix"*; do
      [ -d "$top" ] && find "$top" -depth -type d -exec rmdir {} + 2>/dev/null
    done
  done
}
if [ -z "$cg_reason" ]; then
  proctrack=proctrack/cgroup
  taskplugin=task/cgroup,task/affinity
  printf 'CgroupPlugin=cgroup/v1\nConstrainCores=yes\nConstrainDevices=no\nConstrainRAMSpace=no\n' >"$work/cgroup.conf"
else
  proctrack=proctrack/linuxproc
  taskplugin=task/none
  echo "CgroupPlugin=cgroup/v1" >"$work/cgroup.conf"
  echo "note: Slurm runs without its cgroup plugins here: $cg_reason"
fi
# slurmd's launcher on a host: its own subtree of each controller, where Slurm looks for it.
{
  echo '#!/bin/sh'
  echo 'set -e'
  if [ "$proctrack" = proctrack/cgroup ]; then
    echo 'h=$(hostname)'
    echo 'mount -t tmpfs cgroup_root /sys/fs/cgroup'
    echo "for c in $cg_controllers; do"
    echo "  all=$work/cgroups/\$h/\$c"
    echo "  sub=$cg_prefix\${h#host}"
    echo '  mkdir -p /sys/fs/cgroup/$c "$all"'
    echo '  mount -t cgroup -o "$c" cgroup "$all"'
    echo '  mkdir -p "$all/$sub"'
    echo '  if [ "$c" = cpuset ]; then'
    echo '    cat "$all/cpuset.cpus" >"$all/$sub/cpuset.cpus"'
    echo '    cat "$all/cpuset.mems" >"$all/$sub/cpuset.mems"'
    echo '  fi'
    echo '  mount --bind "$all/$sub" "/sys/fs/cgroup/$c"'
    echo 'done'
  fi
  echo 'exec slurmd -D'
} >"$work/slurmd-on-host"
chmod 755 "$work/slurmd-on-host"

# ---- slurm.conf for a 3-node cluster on the namespace hosts.
mkdir -p "$work/state" "$work/spool/host0" "$work/spool/host1" "$work/spool/host2"
{
  echo "ClusterName=meshrun"
  echo "SlurmctldHost=host0(${HOSTS_V4[0]})"
  echo "SlurmUser=root"
  echo "SlurmdUser=root"
  echo "AuthType=auth/munge"
  echo "CredType=cred/munge"
  echo "AuthInfo=socket=$work/munge/munge.sock"
  echo "StateSaveLocation=$work/state"
  echo "SlurmdSpoolDir=$work/spool/%n"
  echo "SlurmctldPidFile=$work/slurmctld.pid"
  echo "SlurmdPidFile=$work/slurmd-%n.pid"
  echo "SlurmctldLogFile=$work/slurmctld.log"
  echo "SlurmdLogFile=$work/slurmd-%n.log"
  echo "ProctrackType=$proctrack"
  echo "TaskPlugin=$taskplugin"
  echo "SwitchType=switch/none"
  echo "MpiDefault=none"
  echo "MailProg=/bin/true"
  echo "AccountingStorageType=accounting_storage/none"
  echo "JobAcctGatherType=jobacct_gather/none"
  echo "JobCompType=jobcomp/none"
  echo "SelectType=select/cons_tres"
  echo "SelectTypeParameters=CR_CPU"
  echo "SlurmdParameters=config_overrides"
  echo "ReturnToService=2"
  echo "KillWait=5"
  echo "SchedulerParameters=batch_sched_delay=0"
  for ((i = 0; i < 3; i++)); do echo "NodeName=host$i NodeAddr=${HOSTS_V4[i]} CPUs=4 State=UNKNOWN"; done
  echo "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
} >"$work/slurm.conf"
export SLURM_CONF=$work/slurm.conf

(cd "$work" && on_host 0 slurmctld -D -i >"$work/slurmctld.stderr" 2>&1) &
for ((i = 0; i < 3; i++)); do
  (cd "$work" && on_host "$i" "$work/slurmd-on-host" >"$work/slurmd-host$i.stderr" 2>&1) &
done

ready=0
for _ in $(seq 1 150); do  # 30 s
  states=$(on_host 0 sinfo -h -N -o %T 2>/dev/null | sort | uniq -c | tr -s ' ')
  [ "$states" = " 3 idle" ] && { ready=1; break; }
  sleep 0.2
done
[ $ready = 1 ] || fail "the Slurm cluster did not come up in 30 s (sinfo: ${states:-nothing})"
echo "slurm: 3 idle nodes after $((SECONDS - t0)) s ($proctrack, $taskplugin)"

# ---- helpers
job_state() { on_host 0 scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
wait_state() {  # JOB TIMEOUT_S STATE...: waits until the job is in one of STATEs or any end state
  local job=$1 limit=$2 s end; shift 2
  end=$((SECONDS + limit))
  while ((SECONDS < end)); do
    s=$(job_state "$job")
    for want in "$@" COMPLETED FAILED CANCELLED TIMEOUT NODE_FAIL OUT_OF_MEMORY PREEMPTED BOOT_FAIL DEADLINE; do
      [ "$s" = "$want" ] && { echo "$s"; return 0; }
    done
    sleep 0.2
  done
  echo "${s:-unknown}"
}
count_files() { ls "$@" 2>/dev/null | wc -l; }

# meshrun wrapper: records a hash of the token each meshrun got (srun's tasks), then execs it.
cat >"$work/meshrun-wrap" <<EOF
#!/bin/bash
printf '%s' "\${MESHRUN_TOKEN:-}" | sha256sum | cut -c1-64 >"$work/token.\$SLURM_JOB_ID.\$SLURM_NODEID"
printf '%s' "\${MESHRUN_TOKEN:-}" >"$work/secret.\$SLURM_JOB_ID.\$SLURM_NODEID"
exec "$meshrun" "\$@"
EOF
chmod 755 "$work/meshrun-wrap"

export MESHRUN=$work/meshrun-wrap
export PYTHON_EXEC=/usr/bin/python3
export NPROC_PER_NODE=2
cd "$work" || fail "cd $work"

# ---- 1. a real job: 3 nodes x 2 workers, a 2-D PyTorch mesh over Gloo, ends COMPLETED.
t1=$SECONDS
# Submitted with --export=NONE (only the named variables): srun in the script must still hand
# the token to every meshrun.
job1=$(on_host 0 sbatch --parsable --export=NONE,MESHRUN="$MESHRUN",PYTHON_EXEC="$PYTHON_EXEC",NPROC_PER_NODE=2 \
  -N 3 -o "$work/job1.out" "$sbatch_script" "$case_py" 2>"$work/sbatch1.err")
[ -n "$job1" ] || fail "sbatch refused job 1: $(cat "$work/sbatch1.err")"
state=$(wait_state "$job1" 60)
echo "job 1 ($job1): $state after $((SECONDS - t1)) s"
[ "$state" = COMPLETED ] || fail "job 1 ended $state, expected COMPLETED"
# A (2, 3) mesh of 6 ranks: rows {0,1,2} {3,4,5} sum to 3 and 12, columns {c, c+3} to 2c+3.
for r in 0 1 2 3 4 5; do
  grep -q "rank=$r api=[a-z_]* mesh=2x3 coords=($((r / 3)), $((r % 3))) shard_sum=$((9 * (r / 3) + 3)) replicate_sum=$((2 * (r % 3) + 3)) OK" "$work/job1.out" ||
    fail "job 1: rank $r did not report OK"
done
ok_lines=$(grep -c 'replicate_sum=.* OK' "$work/job1.out")
[ "$ok_lines" = 6 ] || fail "job 1: $ok_lines OK lines, expected 6"
grep -q "3 node(s) x 2 worker(s), rendezvous host0:$((29400 + job1 % 1000))" "$work/job1.out" ||
  fail "job 1: the script's summary line is missing or wrong (port 29400 + job id % 1000)"
[ "$(count_files "$work"/token."$job1".*)" = 3 ] || fail "job 1: not every node ran meshrun"
[ "$(sort -u "$work"/token."$job1".* | wc -l)" = 1 ] || fail "job 1: nodes got different tokens"
secret1=$(cat "$work/secret.$job1.0")
[ ${#secret1} -ge 32 ] || fail "job 1: token missing or short (${#secret1} characters)"

# ---- 2. signals: USR1 reaches every worker, scancel leaves nothing behind.
# The worker (plain python3, no torch): starts a grandchild that ignores SIGTERM, then waits
# for SIGUSR1s and records who sent each one (pid and name: meshrun forwarding it, or Slurm
# signalling every process of the step).
cat >"$work/sleeper.py" <<'PYEOF'
import os, signal, subprocess, sys
work, job, rank = sys.argv[1], os.environ["SLURM_JOB_ID"], os.environ["RANK"]
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
subprocess.Popen(["sh", "-c", "trap '' TERM; exec sleep 600"])
with open(f"{work}/started.{job}.{rank}", "w") as f:
    f.write(str(os.getpid()))
while True:
    info = signal.sigwaitinfo({signal.SIGUSR1})
    try:
        with open(f"/proc/{info.si_pid}/comm") as f:
            comm = f.read().strip()
    except OSError:
        comm = "gone"
    with open(f"{work}/usr1.{job}.{rank}", "a") as f:
        f.write(f"{info.si_pid} {comm}\n")
PYEOF

job2=$(on_host 0 sbatch --parsable -N 3 -o "$work/job2.out" "$sbatch_script" "$work/sleeper.py" "$work" 2>"$work/sbatch2.err")
[ -n "$job2" ] || fail "sbatch refused job 2: $(cat "$work/sbatch2.err")"
for _ in $(seq 1 150); do  # 30 s
  [ "$(count_files "$work"/started."$job2".*)" = 6 ] && break
  sleep 0.2
done
[ "$(count_files "$work"/started."$job2".*)" = 6 ] ||
  fail "job 2: $(count_files "$work"/started."$job2".*) of 6 workers started (state $(job_state "$job2"))"
[ "$(job_state "$job2")" = RUNNING ] || fail "job 2 is $(job_state "$job2"), expected RUNNING"
if [ "$proctrack" = proctrack/cgroup ]; then
  # Every worker runs in its step's cgroups: the freezer one (proctrack/cgroup) and the
  # cpuset one (task/cgroup), under its host's subtree.
  for f in "$work"/started."$job2".*; do
    cg=$(cat "/proc/$(cat "$f")/cgroup" 2>/dev/null)
    for c in freezer cpuset; do
      # slurm_<node>: Debian's Slurm is built for several slurmds on one kernel.
      grep -qE "^[0-9]+:$c:/${cg_prefix}[0-2]/slurm(_host[0-2])?/uid_0/job_${job2}/step_0(/|$)" <<<"$cg" ||
        fail "job 2: worker ${f##*.} is not in its step's $c cgroup: $(grep ":$c:" <<<"$cg")"
    done
  done
  echo "job 2: every worker in its step's freezer and cpuset cgroups (proctrack/cgroup, task/cgroup)"
fi

on_host 0 scancel -s USR1 "$job2" || fail "scancel -s USR1 failed"
for _ in $(seq 1 75); do  # 15 s
  [ "$(count_files "$work"/usr1."$job2".*)" = 6 ] && break
  sleep 0.2
done
got=$(count_files "$work"/usr1."$job2".*)
[ "$got" = 6 ] || fail "USR1 reached $got of 6 workers"
# Slurm signals every process of the step (proctrack), so a worker may get it straight from
# slurmstepd as well as from meshrun (two signals that arrive together merge into one).
sleep 1
from_meshrun=$(grep -l ' meshrun' "$work"/usr1."$job2".* | wc -l)
from_slurm=$(grep -l ' slurmstepd' "$work"/usr1."$job2".* | wc -l)
# meshrun must survive it (SIGUSR1's default action would kill it) and the job go on.
[ "$(job_state "$job2")" = RUNNING ] || fail "job 2 is $(job_state "$job2") after USR1, expected RUNNING"
for f in "$work"/started."$job2".*; do
  kill -0 "$(cat "$f")" 2>/dev/null || fail "worker ${f##*.} is gone after USR1"
done
meshruns=()
for ((i = 0; i < 3; i++)); do
  for p in $(ip netns pids "${HOSTS_NS[i]}" 2>/dev/null); do
    [ "$(cat /proc/"$p"/comm 2>/dev/null)" = meshrun ] && meshruns+=("$p")
  done
done
[ ${#meshruns[@]} = 3 ] || fail "job 2: ${#meshruns[@]} meshrun processes after USR1, expected 3"
echo "job 2 ($job2): scancel -s USR1 reached 6 of 6 workers (from slurmstepd: $from_slurm, from meshrun: $from_meshrun); job still running"
# meshrun forwards SIGUSR1 itself (where Slurm signals only the task, or a user signals it).
rm -f "$work"/usr1."$job2".*
kill -USR1 "${meshruns[@]}"
for _ in $(seq 1 50); do  # 10 s
  [ "$(grep -l ' meshrun' "$work"/usr1."$job2".* 2>/dev/null | wc -l)" = 6 ] && break
  sleep 0.2
done
from_meshrun=$(grep -l ' meshrun' "$work"/usr1."$job2".* 2>/dev/null | wc -l)
[ "$from_meshrun" = 6 ] || fail "SIGUSR1 to the 3 meshruns reached $from_meshrun of 6 workers"
[ "$(job_state "$job2")" = RUNNING ] || fail "job 2 is $(job_state "$job2") after USR1 to meshrun"
echo "job 2: SIGUSR1 to each meshrun forwarded to 6 of 6 workers"
# The batch shell is srun (the script execs it), which passes SIGUSR1 on to the step:
# `scancel -b -s USR1` (and `--signal=B:USR1@T`) reach the workers too.
rm -f "$work"/usr1."$job2".*
on_host 0 scancel -b -s USR1 "$job2" || fail "scancel -b -s USR1 failed"
for _ in $(seq 1 50); do  # 10 s
  [ "$(count_files "$work"/usr1."$job2".*)" = 6 ] && break
  sleep 0.2
done
got=$(count_files "$work"/usr1."$job2".*)
[ "$got" = 6 ] || fail "scancel -b -s USR1 (the batch shell) reached $got of 6 workers"
sleep 0.5
[ "$(job_state "$job2")" = RUNNING ] || fail "job 2 is $(job_state "$job2") after scancel -b -s USR1"
echo "job 2: scancel -b -s USR1 (batch shell = srun) reached 6 of 6 workers"

[ "$(sort -u "$work"/token."$job2".* | wc -l)" = 1 ] || fail "job 2: nodes got different tokens"
[ "$(cat "$work/token.$job1.0")" != "$(cat "$work/token.$job2.0")" ] || fail "jobs 1 and 2 got the same token"

daemons() {  # pids of the Slurm daemons on host I
  local i=$1 p
  for p in $(ip netns pids "${HOSTS_NS[i]}" 2>/dev/null); do
    case "$(cat /proc/"$p"/comm 2>/dev/null)" in slurmctld | slurmd | slurmscriptd) echo "$p" ;; esac
  done
}
job_pids() {  # every other process of every host
  local i p d
  for ((i = 0; i < 3; i++)); do
    d=" $(daemons "$i" | tr '\n' ' ') "
    for p in $(ip netns pids "${HOSTS_NS[i]}" 2>/dev/null); do
      case "$d" in *" $p "*) ;; *) echo "$p" ;; esac
    done
  done
}
[ -n "$(job_pids)" ] || fail "no job processes seen in the namespaces while job 2 runs"

t3=$SECONDS
on_host 0 scancel "$job2" || fail "scancel failed"
state=$(wait_state "$job2" 30)
[ "$state" = CANCELLED ] || fail "job 2 ended $state after scancel, expected CANCELLED"
left=""
for _ in $(seq 1 100); do  # 20 s (KillWait is 5 s)
  left=$(job_pids)
  [ -z "$left" ] && break
  sleep 0.2
done
if [ -n "$left" ]; then
  for p in $left; do echo "left behind: $p $(tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null)"; done
  fail "processes left behind after scancel"
fi
echo "job 2: scancel -> CANCELLED, no process left after $((SECONDS - t3)) s"

# ---- 3. two jobs sharing the three nodes at once: both finish, each on its own port.
# Each worker waits (bounded) until all 12 workers of both jobs have started: the jobs overlap.
cat >"$work/meet.sh" <<'MEETEOF'
#!/bin/sh
touch "$1/meet.$SLURM_JOB_ID.$RANK"
i=0
while [ "$(ls "$1"/meet.* | wc -l)" -lt 12 ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
[ "$(ls "$1"/meet.* | wc -l)" -ge 12 ]
MEETEOF
chmod 755 "$work/meet.sh"
t4=$SECONDS
job3=$(on_host 0 sbatch --parsable -N 3 -o "$work/job3.out" "$sbatch_script" "$work/meet.sh" "$work" 2>"$work/sbatch3.err")
[ -n "$job3" ] || fail "sbatch refused job 3: $(cat "$work/sbatch3.err")"
job4=$(on_host 0 sbatch --parsable -N 3 -o "$work/job4.out" "$sbatch_script" "$work/meet.sh" "$work" 2>"$work/sbatch4.err")
[ -n "$job4" ] || fail "sbatch refused job 4: $(cat "$work/sbatch4.err")"
state3=$(wait_state "$job3" 90)
state4=$(wait_state "$job4" 90)
[ "$state3" = COMPLETED ] && [ "$state4" = COMPLETED ] ||
  fail "jobs 3 and 4 sharing the nodes ended $state3 and $state4, expected COMPLETED twice"
[ "$(count_files "$work"/meet."$job3".*)" = 6 ] && [ "$(count_files "$work"/meet."$job4".*)" = 6 ] ||
  fail "jobs 3 and 4: not every worker ran"
port3=$((29400 + job3 % 1000))
port4=$((29400 + job4 % 1000))
grep -q "rendezvous host0:$port3" "$work/job3.out" && grep -q "rendezvous host0:$port4" "$work/job4.out" ||
  fail "jobs 3 and 4 did not use the ports derived from their ids ($port3, $port4)"
echo "jobs 3 and 4 ($job3, $job4): shared the 3 nodes, ports $port3 and $port4, both COMPLETED after $((SECONDS - t4)) s"

# ---- 4. two jobs forced onto one port: the second is told whose server holds it.
cat >"$work/hold.sh" <<'HOLDEOF'
#!/bin/sh
touch "$1/held.$SLURM_JOB_ID.$RANK"
i=0
while [ ! -e "$1/release" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
[ -e "$1/release" ]
HOLDEOF
chmod 755 "$work/hold.sh"
forced=$((29400 + (job4 + 500) % 1000))
job5=$(on_host 0 env MESHRUN_PORT=$forced sbatch --parsable -N 3 -o "$work/job5.out" "$sbatch_script" "$work/hold.sh" "$work" \
  2>"$work/sbatch5.err")
[ -n "$job5" ] || fail "sbatch refused job 5: $(cat "$work/sbatch5.err")"
for _ in $(seq 1 150); do  # 30 s
  [ "$(count_files "$work"/held."$job5".*)" = 6 ] && break
  sleep 0.2
done
[ "$(count_files "$work"/held."$job5".*)" = 6 ] || fail "job 5: $(count_files "$work"/held."$job5".*) of 6 workers started"
# One node, the head node: the one that can see who holds the port (the other nodes only hear
# "wrong token", and srun --kill-on-bad-exit may stop the head node before it says more).
job6=$(on_host 0 env MESHRUN_PORT=$forced sbatch --parsable -N 1 -w host0 -o "$work/job6.out" "$sbatch_script" \
  "$work/hold.sh" "$work" 2>"$work/sbatch6.err")
[ -n "$job6" ] || fail "sbatch refused job 6: $(cat "$work/sbatch6.err")"
state6=$(wait_state "$job6" 60)
[ "$state6" = FAILED ] || fail "job 6 on job 5's port ended $state6, expected FAILED"
grep -q "another job's server holds that port" "$work/job6.out" && grep -q "run '$job5')" "$work/job6.out" ||
  fail "job 6: no line naming job 5 as the holder of port $forced: $(grep 'meshrun: error' "$work/job6.out" | head -3)"
[ "$(count_files "$work"/held."$job6".*)" = 0 ] || fail "job 6 ran workers on another job's server"
[ "$(job_state "$job5")" = RUNNING ] || fail "job 5 is $(job_state "$job5") after job 6 failed, expected RUNNING"
touch "$work/release"
state5=$(wait_state "$job5" 60)
[ "$state5" = COMPLETED ] || fail "job 5 ended $state5, expected COMPLETED"
echo "jobs 5 and 6 ($job5, $job6) on one port $forced: job 6 FAILED naming job 5; job 5 COMPLETED"
echo "  $(grep 'another job' "$work/job6.out" | head -1)"

# The token is never printed: not in the job outputs, nor in Slurm's logs.
secret2=$(cat "$work/secret.$job2.0")
for f in "$work"/*.out "$work"/*.log "$work"/*.stderr; do
  [ -f "$f" ] || continue
  if grep -qF -e "$secret1" -e "$secret2" "$f"; then fail "a token appears in ${f##*/}"; fi
done

# ---- 5. a standing, replicated rendezvous on service daemons: an etcd member and a `meshrun
# server --state etcd://...` replica on each of the three hosts, started outside any job (as on
# Slurm's service nodes). MESHRUN_RDZV_ENDPOINT lists the replicas and MESHRUN_TOKEN is theirs:
# the job runs the 2-D mesh and ends COMPLETED, every meshrun having used the replicas' token.
t5=$SECONDS
etcd_up 3 --hosts || fail "etcd did not come up on the 3 hosts"
trap cleanup EXIT  # etcd_up set its own; cleanup calls etcd_down
standing_token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
eps=
for i in 0 1 2; do
  MESHRUN_TOKEN=$standing_token on_host "$i" "$meshrun" server --host "${HOSTS_V4[i]}" --port 29399 \
    --state "$(etcd_url /slurm-test)" >"$work/replica$i.log" 2>&1 &
  eps+="${eps:+,}${HOSTS_V4[i]}:29399"
done
leads() { grep -l "meshrun server: leading" "$work"/replica*.log >/dev/null 2>&1; }
for _ in $(seq 1 100); do leads && break; sleep 0.2; done  # 20 s
leads || fail "no replica led within 20 s: $(tail -n 3 "$work"/replica*.log)"
job7=$(on_host 0 env MESHRUN_RDZV_ENDPOINT="$eps" MESHRUN_TOKEN="$standing_token" sbatch --parsable -N 3 \
  -o "$work/job7.out" "$sbatch_script" "$case_py" 2>"$work/sbatch7.err")
[ -n "$job7" ] || fail "sbatch refused job 7: $(cat "$work/sbatch7.err")"
state7=$(wait_state "$job7" 60)
[ "$state7" = COMPLETED ] || fail "job 7 on the replicas ended $state7, expected COMPLETED ($(tail -n 3 "$work"/replica*.log))"
[ "$(grep -c 'replicate_sum=.* OK' "$work/job7.out")" = 6 ] || fail "job 7: not every rank reported OK"
grep -q "3 node(s) x 2 worker(s), rendezvous $eps" "$work/job7.out" || fail "job 7: the summary line does not name the replicas"
want=$(printf '%s' "$standing_token" | sha256sum | cut -c1-64)
[ "$(count_files "$work"/token."$job7".*)" = 3 ] && [ "$(sort -u "$work"/token."$job7".*)" = "$want" ] ||
  fail "job 7: not every meshrun used the replicas' token"
echo "job 7 ($job7): on 3 replicas ($eps, state in etcd on the same hosts): COMPLETED after $((SECONDS - t5)) s"

echo "PASS: slurm ($((SECONDS - t0)) s)"
