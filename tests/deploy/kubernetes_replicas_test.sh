#!/usr/bin/env bash
# deploy/kubernetes/meshrun-replicas.yaml: valid, and its pods, run as Kubernetes would run
# them, make a replicated rendezvous server that a job outlives the leader's pod with.
#
#   1. kubernetes-validate --strict (PyPI, pinned, the venv of kubernetes_test.sh) passes its
#      4 objects (2 headless Services, 2 StatefulSets), and the objects agree: each
#      StatefulSet's serviceName is a headless Service selecting its pods, MESHRUN_STATE names
#      every etcd pod by its DNS name, the probes ask the replica's health port.
#   2. The 6 pods on 8 namespace hosts (tests/hosts/netns_hosts.sh), each named like its pod
#      (hostname and DNS names in the hosts files: <pod>.<service> per pod, and the replicas'
#      headless Service name resolving to all 3 replicas, as Kubernetes' DNS does): the etcd
#      StatefulSet's 3 members and the 3 meshrun replicas, each with its container's command
#      line and environment from the YAML ($(VAR)s expanded; the token from a Secret made
#      here; the etcd volume's mount replaced by a scratch folder). Every replica's readiness
#      probe (gRPC health on its health port) answers SERVING, a standby's too.
#   3. A 2-node job on the other 2 hosts, given --rdzv_endpoint=meshrun-replica:29400 (the
#      headless Service, as the manifest's comment says), runs; the leader's pod dies (its
#      host, SIGKILL); both agents follow another replica, and the job finishes with exit 0,
#      each worker started once, TORCHELASTIC_RESTART_COUNT 0.
#
# usage: kubernetes_replicas_test.sh SOURCE_DIR MESHRUN_BINARY HEALTH_PROBE [CACHE_DIR]
#        (0 pass, 1 fail, 77 skip: no python3-yaml / etcd / PyPI / root and namespaces)
# Every wait is bounded; everything started here is killed on exit, failure included.
set -uo pipefail

src=$(cd "${1:?usage: kubernetes_replicas_test.sh SOURCE_DIR MESHRUN_BINARY HEALTH_PROBE [CACHE_DIR]}" && pwd)
meshrun=$(readlink -f "${2:?usage: kubernetes_replicas_test.sh SOURCE_DIR MESHRUN_BINARY HEALTH_PROBE [CACHE_DIR]}")
probe=$(readlink -f "${3:?usage: kubernetes_replicas_test.sh SOURCE_DIR MESHRUN_BINARY HEALTH_PROBE [CACHE_DIR]}")
cache=${4:-${XDG_CACHE_HOME:-$HOME/.cache}/meshrun-tests}
t0=${EPOCHREALTIME/./}
manifest=$src/deploy/kubernetes/meshrun-replicas.yaml

skip() { echo "skip: $*"; exit 77; }
py=/usr/bin/python3
[ -x $py ] || skip "no /usr/bin/python3"
$py -c 'import yaml' 2>/dev/null || skip "no python3-yaml (Debian package python3-yaml)"
$py -c 'import venv, ensurepip' 2>/dev/null || skip "no python3-venv (Debian package python3-venv)"
command -v etcd >/dev/null || skip "no etcd (Debian package etcd-server)"
work=$(mktemp -d /tmp/meshrun-k8s-replicas-test.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do [[ -n $p ]] && kill -KILL "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  [[ -n ${_HOSTS_UP:-} ]] && hosts_down
  [[ -z ${KEEP:-} ]] && rm -rf -- "$work"
}
trap cleanup EXIT
fail() {
  local f
  echo "FAIL: $*"
  for f in "$work"/*.log; do
    [[ -f $f ]] || continue
    echo "--- ${f##*/} (last 10 lines)"
    tail -n 10 "$f"
  done
  exit 1
}
# shellcheck source=tests/support/wait_for.sh
source "$src/tests/support/wait_for.sh"

# ---- 1. kubernetes-validate (pinned, in a venv kept in CACHE_DIR) and the objects agreeing.
# shellcheck source=tests/deploy/kubernetes_validate.sh
source "$src/tests/deploy/kubernetes_validate.sh"
kubernetes_validate_setup "$cache" "$work"
"$kv" --strict "$manifest" >"$work/kv.out" 2>&1 || { cat "$work/kv.out"; fail "kubernetes-validate --strict refused $manifest"; }
passed=$(grep -c ' passed for resource ' "$work/kv.out")
[ "$passed" = 4 ] || { cat "$work/kv.out"; fail "kubernetes-validate passed $passed of 4 resources"; }
echo "kubernetes-validate $KV_VERSION --strict: 2 Services and 2 StatefulSets pass"

# The pods, derived from the YAML: one file per pod with its name, service, argv and env
# (NUL-separated), and the checks that the objects agree.
token=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
$py - "$manifest" "$work" "$token" >"$work/derive.out" 2>&1 <<'EOF'
import re, sys, yaml
manifest, out, token = sys.argv[1:4]
docs = [d for d in yaml.safe_load_all(open(manifest)) if d]
services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
sets = [d for d in docs if d["kind"] == "StatefulSet"]
bad = []
def expand(s, env):
    return re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), s)
pods = []
for ss in sets:
    name, spec = ss["metadata"]["name"], ss["spec"]
    svc = services.get(spec["serviceName"])
    if svc is None or svc["spec"].get("clusterIP") != "None":
        bad.append(f"StatefulSet {name}: serviceName {spec['serviceName']} is not a headless Service here")
    labels = spec["template"]["metadata"]["labels"]
    if svc and any(labels.get(k) != v for k, v in svc["spec"]["selector"].items()):
        bad.append(f"Service {spec['serviceName']} does not select StatefulSet {name}'s pods")
    (c,) = spec["template"]["spec"]["containers"]
    for i in range(spec["replicas"]):
        pod = f"{name}-{i}"
        env = {}
        for e in c.get("env", []):
            if "value" in e:
                env[e["name"]] = expand(e["value"], env)
            elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name":
                env[e["name"]] = pod
            elif e.get("valueFrom", {}).get("secretKeyRef", {}).get("name") == "meshrun-token":
                env[e["name"]] = token
            else:
                bad.append(f"{pod}: env {e['name']} has a source this test does not know")
        argv = [expand(a, env) for a in c["command"] + c.get("args", [])]
        # The volume claim's mount: a scratch folder per pod.
        for m in c.get("volumeMounts", []):
            argv = [a.replace(m["mountPath"], f"{out}/{pod}.{m['name']}") for a in argv]
        probe = c.get("readinessProbe", {}).get("grpc", {}).get("port")
        pods.append((pod, spec["serviceName"], argv, env, probe))
replica = [p for p in pods if p[2][:2] == ["meshrun", "server"]]
etcd = [p for p in pods if p[2][:1] == ["etcd"]]
if len(replica) != 3 or len(etcd) != 3:
    bad.append(f"expected 3 meshrun replicas and 3 etcd members, found {len(replica)} and {len(etcd)}")
for pod, svc, argv, env, probe in replica:
    state = argv[argv.index("--state") + 1]
    for e in etcd:
        if f"{e[0]}.{e[1]}:2379" not in state:
            bad.append(f"{pod}: --state {state} does not name etcd pod {e[0]}.{e[1]}:2379")
    if str(probe) != argv[argv.index("--health_port") + 1]:
        bad.append(f"{pod}: the readiness probe asks port {probe}, the health port is {argv[argv.index('--health_port') + 1]}")
    if argv[argv.index("--advertise_addr") + 1] != f"{pod}.{svc}:29400":
        bad.append(f"{pod}: --advertise_addr is not its DNS name {pod}.{svc}:29400")
for b in bad:
    print(b)
if bad:
    sys.exit(1)
with open(f"{out}/pods", "w") as f:
    for k, (pod, svc, argv, env, probe) in enumerate(etcd + replica):
        f.write(f"{k} {pod} {svc} {probe or ''}\n")
        open(f"{out}/{pod}.argv", "wb").write(b"\0".join(a.encode() for a in argv) + b"\0")
        env = dict(env, PATH="/usr/local/bin:/usr/bin:/bin")
        open(f"{out}/{pod}.env", "wb").write(b"\0".join(f"{k}={v}".encode() for k, v in env.items()) + b"\0")
EOF
[ $? = 0 ] || { cat "$work/derive.out"; fail "the manifest's objects do not agree"; }
echo "objects agree: headless Services select their StatefulSets, --state names every etcd pod, probes ask the health port"

# ---- 2. The pods on namespace hosts: etcd on 0-2, replicas on 3-5, the job's nodes on 6-7.
# shellcheck source=tests/hosts/netns_hosts.sh
source "$src/tests/hosts/netns_hosts.sh"
hosts_require
hosts_up 8 || fail "hosts_up 8 failed (namespaces work here)"
trap cleanup EXIT
declare -A pod_host=() pod_svc=() pod_probe=()
replicas=()
while read -r k pod svc port; do
  pod_host[$pod]=$k pod_svc[$pod]=$svc pod_probe[$pod]=$port
  [[ $svc == meshrun-replica ]] && replicas+=("$pod")
done <"$work/pods"
for ((h = 0; h < 8; h++)); do  # Kubernetes' DNS: every pod by <pod>.<service>, the Service by its name
  f=/etc/netns/${HOSTS_NS[h]}/hosts
  for pod in "${!pod_host[@]}"; do echo "${HOSTS_V4[${pod_host[$pod]}]} $pod.${pod_svc[$pod]}" >>"$f"; done
  for pod in "${replicas[@]}"; do echo "${HOSTS_V4[${pod_host[$pod]}]} meshrun-replica" >>"$f"; done
done
# run_pod POD: its container's command, with the image's PATH (meshrun next to its shim),
# started again 1 s after it fails, as the kubelet does (restartPolicy Always; its back-off
# starts at 10 s): a replica started before etcd answers exits with one line, and is
# restarted.
run_pod() {
  local pod=$1 h=${pod_host[$1]} argv env
  mapfile -d '' argv <"$work/$pod.argv"
  mapfile -d '' env <"$work/$pod.env"
  env=("${env[@]/#PATH=/PATH=$(dirname "$meshrun"):}")
  ip netns exec "${HOSTS_NS[h]}" unshare --uts sh -c 'hostname "$0"
    for try in $(seq 60); do "$@"; rc=$?; [ "$rc" = 0 ] && exit 0; echo "(kubelet: exit $rc; restarted in 1 s)"; sleep 1; done' "$pod" \
    env -i "${env[@]}" "${argv[@]}" >"$work/$pod.log" 2>&1 &
  pids+=($!)
}
for pod in meshrun-etcd-0 meshrun-etcd-1 meshrun-etcd-2 "${replicas[@]}"; do run_pod "$pod"; done
# readinessProbe: gRPC health on the probe's port, from the pod's own host (as the kubelet).
ready() {
  local pod=$1 out
  out=$(ip netns exec "${HOSTS_NS[${pod_host[$pod]}]}" "$probe" "${HOSTS_V4[${pod_host[$pod]}]}:${pod_probe[$pod]}" 2>&1)
  [[ $out == SERVING ]]
}
for pod in "${replicas[@]}"; do
  wait_for 60 ready "$pod" ||
    fail "$pod's readiness probe did not answer SERVING within 60 s: $(ip netns exec "${HOSTS_NS[${pod_host[$pod]}]}" "$probe" "${HOSTS_V4[${pod_host[$pod]}]}:${pod_probe[$pod]}" 2>&1)"
done
leader_pod() {
  local pod
  for pod in "${replicas[@]}"; do grep -q "meshrun server: leading" "$work/$pod.log" 2>/dev/null && { echo "$pod"; return 0; }; done
  return 1
}
has_leader() { leader_pod >/dev/null; }
wait_for 60 has_leader || fail "no replica led within 60 s"
leader=$(leader_pod)
echo "pods: 3 etcd members and 3 replicas running; every readiness probe SERVING; $leader leads"

# ---- 3. A job through the headless Service; the leader's pod dies.
worker='echo "$TORCHELASTIC_RESTART_COUNT" >> "$OUT/rank$RANK.start"
for i in $(seq 1200); do [ -e "$OUT/release" ] && break; sleep 0.05; done
[ -e "$OUT/release" ] || exit 3'
agent=()
for n in 0 1; do
  h=$((6 + n))
  OUT=$work MESHRUN_TOKEN=$token on_host "$h" "$meshrun" --nnodes=2 --nproc_per_node=1 \
    --rdzv_endpoint=meshrun-replica:29400 --rdzv_id=k8s-replicas --max_restarts=1 --no_python sh -c "$worker" \
    >"$work/agent$n.log" 2>&1 &
  agent[n]=$!
  pids+=($!)
done
running() { [[ -s $work/rank0.start && -s $work/rank1.start ]]; }
wait_for 30 running || fail "the job's workers did not start within 30 s"
echo "job running through meshrun-replica:29400"
host_kill "${pod_host[$leader]}" || fail "$leader's host outlived host_kill"
followed() { [[ $(grep -l "following the rendezvous leader" "$work"/agent0.log "$work"/agent1.log 2>/dev/null | wc -l) == 2 ]]; }
wait_for 30 followed || fail "the agents did not both follow another replica within 30 s of $leader's death"
echo "$leader killed; agents: $(grep -h "following the rendezvous leader" "$work"/agent0.log | tail -n 1 | sed 's/.*\] //')"
touch "$work/release"
for n in 0 1; do
  finished() { ! kill -0 "${agent[$1]}" 2>/dev/null; }
  wait_for 60 finished "$n" || fail "agent $n did not finish within 60 s of the release"
  wait "${agent[n]}"; rc=$?
  [ $rc = 0 ] || fail "agent $n exited $rc (expected 0)"
done
for r in 0 1; do
  [[ $(cat "$work/rank$r.start") == 0 ]] || fail "worker rank $r started as '$(tr '\n' ' ' <"$work/rank$r.start")' (expected once, restart count 0)"
done
echo "job: exit 0 on both nodes, each worker started once, TORCHELASTIC_RESTART_COUNT 0"
echo "PASS: kubernetes replicas ($(((${EPOCHREALTIME/./} - t0) / 1000000)) s)"
