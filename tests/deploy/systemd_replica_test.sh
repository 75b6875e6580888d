#!/usr/bin/env bash
# deploy/systemd/meshrun-replica@.service: the replicas' template unit, verified and run.
#
#   1. The unit has what a replica needs: hardening, its own user, LimitNOFILE, restart on
#      failure, SIGTERM to stop (a leader resigns first), /etc/meshrun/replica.env, and an
#      ExecStart of `meshrun server` on port %i with --state ${MESHRUN_STATE} and
#      --advertise_addr ${MESHRUN_ADVERTISE}; replica.env.example sets those three variables.
#   2. systemd-analyze verify prints nothing for the instance meshrun-replica@29400 (the
#      binary's path pointed at the build), and security --offline rates it at most 3.0.
#   3. ExecStart as written, for three instances (%i: a free port each, as systemd would put
#      the instance name there; ${VAR}: the environment file's values, the token made here,
#      MESHRUN_STATE naming a real 3-member etcd started here, MESHRUN_ADVERTISE the
#      replica's address), each as an unprivileged user without new privileges: one leads,
#      the others stand by. A 2-node job through the three (the token from the file) runs;
#      the leader is stopped as `systemctl stop` would (SIGTERM, TimeoutStopSec=15): it exits
#      0, another replica leads, both agents follow it, and the job finishes with exit 0, its
#      workers started once, TORCHELASTIC_RESTART_COUNT 0.
#
# usage: systemd_replica_test.sh SOURCE_DIR MESHRUN_BINARY   (0 pass, 1 fail, 77 skip)
# Every wait is bounded; everything started here is killed on exit, failure included.
set -uo pipefail

src=$(cd "${1:?usage: systemd_replica_test.sh SOURCE_DIR MESHRUN_BINARY}" && pwd)
meshrun=$(readlink -f "${2:?usage: systemd_replica_test.sh SOURCE_DIR MESHRUN_BINARY}")
t0=${EPOCHREALTIME/./}
unit=$src/deploy/systemd/meshrun-replica@.service
envex=$src/deploy/systemd/replica.env.example

skip() { echo "skip: $*"; exit 77; }
[ -x "$meshrun" ] || { echo "FAIL: no meshrun binary at $meshrun"; exit 1; }
py=$(command -v python3) || skip "no python3"
# shellcheck source=tests/etcd/etcd_cluster.sh
source "$src/tests/etcd/etcd_cluster.sh"
etcd_require

work=$(mktemp -d /tmp/meshrun-systemd-replica-test.XXXXXX)
chmod 755 "$work"
server_pid=() agent_pid=()
cleanup() {
  local p
  for p in "${agent_pid[@]}" "${server_pid[@]}"; do
    [[ -n $p ]] && kill -KILL "$p" 2>/dev/null && wait "$p" 2>/dev/null
  done
  etcd_down
  [[ -z ${KEEP:-} ]] && rm -rf -- "$work"
}
trap cleanup EXIT
fail() {
  local f
  echo "FAIL: $*"
  for f in "$work"/replica*.log "$work"/agent*.log; do
    [[ -f $f ]] || continue
    echo "--- ${f##*/} (last 12 lines)"
    tail -n 12 "$f"
  done
  exit 1
}
# shellcheck source=tests/support/wait_for.sh
source "$src/tests/support/wait_for.sh"

# ---- 1. what the unit must say (last assignment of a key wins, as in systemd).
"$py" - "$unit" "$envex" >"$work/static.log" 2>&1 <<'EOF'
import re, shlex, sys
unit, envex = sys.argv[1], sys.argv[2]
sections, cur, bad = {}, None, []
for line in open(unit):
    line = line.strip()
    if not line or line[0] in "#;":
        continue
    m = re.fullmatch(r"\[(.+)\]", line)
    if m:
        cur = sections.setdefault(m.group(1), {})
        continue
    k, _, v = line.partition("=")
    cur[k.strip()] = v.strip()
svc = sections.get("Service", {})
want = {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
        "LimitNOFILE": "1048576", "Restart": "on-failure", "KillSignal": "SIGTERM",
        "EnvironmentFile": "/etc/meshrun/replica.env"}
for k, v in want.items():
    if svc.get(k) != v:
        bad.append(f"[Service] {k}={svc.get(k)!r}, expected {v!r}")
if svc.get("DynamicUser") != "yes" and svc.get("User", "root") in ("root", "0", ""):
    bad.append("[Service] needs DynamicUser=yes or a non-root User=")
argv = shlex.split(svc.get("ExecStart", ""))
def value(flag):
    return argv[argv.index(flag) + 1] if flag in argv[:-1] else None
if argv[1:2] != ["server"]:
    bad.append(f"ExecStart must run `meshrun server`: {argv}")
for flag, v in (("--port", "%i"), ("--state", "${MESHRUN_STATE}"), ("--advertise_addr", "${MESHRUN_ADVERTISE}")):
    if value(flag) != v:
        bad.append(f"ExecStart must give {flag} {v}: {argv}")
if sections.get("Install", {}).get("WantedBy") != "multi-user.target":
    bad.append("[Install] WantedBy=multi-user.target missing")
text = open(envex).read()
for var in ("MESHRUN_TOKEN", "MESHRUN_STATE", "MESHRUN_ADVERTISE"):
    if not re.search(rf"^{var}=\S+", text, re.M):
        bad.append(f"replica.env.example has no {var}= line")
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
EOF
[ $? = 0 ] || { cat "$work/static.log"; fail "the unit lacks required settings"; }
echo "unit: hardening, own user, LimitNOFILE=1048576, Restart=on-failure, SIGTERM, replica.env, port %i, --state and --advertise_addr from it"

# ---- 2. systemd-analyze verify / security of an instance.
verified=0
if command -v systemd-analyze >/dev/null 2>&1; then
  mkdir -p "$work/units"
  sed "s#^ExecStart=[^ ]*meshrun #ExecStart=$meshrun #" "$unit" >"$work/units/meshrun-replica@.service"
  grep -q "^ExecStart=$meshrun server " "$work/units/meshrun-replica@.service" || fail "could not point ExecStart at $meshrun"
  ln -s meshrun-replica@.service "$work/units/meshrun-replica@29400.service"
  if ! (cd "$work/units" && systemd-analyze verify "$work/units/meshrun-replica@29400.service") >"$work/verify.log" 2>&1 ||
     [ -s "$work/verify.log" ]; then
    cat "$work/verify.log"; fail "systemd-analyze verify complains about meshrun-replica@29400"
  fi
  verified=1
  echo "systemd-analyze verify meshrun-replica@29400: clean"
  if systemd-analyze security --help 2>/dev/null | grep -q -- '--offline'; then
    (cd "$work/units" && systemd-analyze security --offline=yes --threshold=30 "$work/units/meshrun-replica@29400.service") \
      >"$work/security.log" 2>&1 || { tail -n 3 "$work/security.log"; fail "systemd-analyze security: exposure above 3.0"; }
    echo "systemd-analyze security: $(grep -o 'Overall exposure level.*' "$work/security.log")"
  fi
fi

# ---- 3. Three instances on a real etcd, a job through them, the leader stopped.
etcd_up 3 || fail "etcd did not come up"
trap cleanup EXIT  # etcd_up sets its own; ours calls etcd_down too.
token=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
# Three distinct ports: etcd_cluster.sh's picker binds them all at once.
mapfile -t ports < <(_etcd_free_ports 3)
endpoints="127.0.0.1:${ports[0]},127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}"
runner=()
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null 2>&1; then
  runner=(setpriv --reuid=65534 --regid=65534 --clear-groups --no-new-privs)
fi
# start_instance I: ExecStart of meshrun-replica@PORT_I, with its replica.env.
start_instance() {
  local i=$1 members=${ETCD_CLIENT[$1]} j
  for j in 0 1 2; do ((j != i)) && members+=",${ETCD_CLIENT[j]}"; done
  sed -e "s/^MESHRUN_TOKEN=.*/MESHRUN_TOKEN=$token/" \
      -e "s#^MESHRUN_STATE=.*#MESHRUN_STATE=etcd://$members/systemd-test#" \
      -e "s/^MESHRUN_ADVERTISE=.*/MESHRUN_ADVERTISE=127.0.0.1:${ports[i]}/" "$envex" >"$work/replica$i.env"
  local -a envs argv
  mapfile -t envs < <(grep -E '^[A-Za-z_][A-Za-z0-9_]*=' "$work/replica$i.env")
  # ExecStart as systemd runs it: %i is the instance, ${VAR} one word from the environment.
  mapfile -t argv < <("$py" - "$unit" "$meshrun" "${ports[i]}" "$work/replica$i.env" <<'EOF'
import re, shlex, sys
unit, meshrun, instance, envfile = sys.argv[1:5]
env = dict(l.rstrip("\n").split("=", 1) for l in open(envfile) if re.match(r"[A-Za-z_][A-Za-z0-9_]*=", l))
line = [l.strip() for l in open(unit) if l.strip().startswith("ExecStart=")][-1]
argv = [re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], a.replace("%i", instance))
        for a in shlex.split(line.partition("=")[2])]
argv[0] = meshrun
print("\n".join(argv))
EOF
  )
  [ "${#argv[@]}" -ge 8 ] || fail "could not read ExecStart"
  env -i PATH=/usr/bin:/bin "${envs[@]}" "${runner[@]}" "${argv[@]}" >>"$work/replica$i.log" 2>&1 &
  server_pid[i]=$!
}
for i in 0 1 2; do start_instance "$i"; done
leader_of() {  # the index of the replica whose log says it leads (latest first), or 1
  local i
  for i in 0 1 2; do
    [[ -n ${server_pid[i]} ]] && grep -q "meshrun server: leading" "$work/replica$i.log" 2>/dev/null && { echo "$i"; return 0; }
  done
  return 1
}
has_leader() { leader_of >/dev/null; }
wait_for 20 has_leader || fail "no instance led within 20 s"
leader=$(leader_of)
listening() { grep -q "listening on :: port ${ports[$1]}" "$work/replica$1.log"; }
for i in 0 1 2; do wait_for 10 listening "$i" || fail "instance @${ports[i]} does not listen on :: port ${ports[i]}"; done
if [ ${#runner[@]} -gt 0 ]; then
  uid=$(awk '/^Uid:/ {print $2}' "/proc/${server_pid[leader]}/status")
  nnp=$(awk '/^NoNewPrivs:/ {print $2}' "/proc/${server_pid[leader]}/status")
  [ "$uid" = 65534 ] && [ "$nnp" = 1 ] || fail "the leader runs as uid $uid with NoNewPrivs=$nnp"
fi
echo "instances @${ports[0]} @${ports[1]} @${ports[2]} on :: (uid ${uid:-$(id -u)}); @${ports[leader]} leads"

worker='echo "$TORCHELASTIC_RESTART_COUNT" >> "$OUT/rank$RANK.start"
for i in $(seq 1200); do [ -e "$OUT/release" ] && break; sleep 0.05; done
[ -e "$OUT/release" ] || exit 3'
for n in 0 1; do
  OUT=$work MESHRUN_TOKEN=$token "$meshrun" --nnodes=2 --nproc_per_node=1 --rdzv_endpoint="$endpoints" \
    --rdzv_id=systemd --max_restarts=1 --no_python sh -c "$worker" >"$work/agent$n.log" 2>&1 &
  agent_pid[n]=$!
done
running() { [[ -s $work/rank0.start && -s $work/rank1.start ]]; }
wait_for 30 running || fail "the job's workers did not start within 30 s"
echo "job running through the three instances"

# systemctl stop meshrun-replica@PORT: SIGTERM, at most TimeoutStopSec=15 s.
kill -TERM "${server_pid[leader]}"
stopped() { ! kill -0 "${server_pid[leader]}" 2>/dev/null; }
wait_for 15 stopped || fail "the leader did not stop within TimeoutStopSec=15 s of SIGTERM"
wait "${server_pid[leader]}"; rc=$?
server_pid[leader]=
[ $rc = 0 ] || fail "the leader exited $rc on SIGTERM (Restart=on-failure would restart it)"
new_leader() { local l; l=$(leader_of) && [[ $l != "$leader" ]]; }
wait_for 15 new_leader || fail "no other instance led within 15 s of stopping the leader"
followed() { [[ $(grep -l "following the rendezvous leader" "$work"/agent0.log "$work"/agent1.log 2>/dev/null | wc -l) == 2 ]]; }
wait_for 30 followed || fail "the agents did not both follow the next leader within 30 s"
echo "stopped @${ports[leader]} (SIGTERM, exit 0); @${ports[$(leader_of)]} leads; both agents follow it"

touch "$work/release"
for n in 0 1; do
  done_() { ! kill -0 "${agent_pid[$1]}" 2>/dev/null; }
  wait_for 60 done_ "$n" || fail "agent $n did not finish within 60 s of the release"
  wait "${agent_pid[n]}"; rc=$?
  agent_pid[n]=
  [ $rc = 0 ] || fail "agent $n exited $rc (expected 0)"
done
for r in 0 1; do
  [[ $(cat "$work/rank$r.start") == 0 ]] || fail "worker rank $r started as '$(tr '\n' ' ' <"$work/rank$r.start")' (expected once, restart count 0)"
done
grep -qF "$token" "$work"/replica*.log && fail "an instance printed the token"
echo "job: exit 0 on both nodes, each worker started once, TORCHELASTIC_RESTART_COUNT 0"

if [ $verified = 0 ]; then
  skip "systemd-analyze not found (package systemd), the unit was not verified; other checks passed ($(((${EPOCHREALTIME/./} - t0) / 1000000)) s)"
fi
echo "PASS: systemd replicas ($(((${EPOCHREALTIME/./} - t0) / 1000000)) s)"
