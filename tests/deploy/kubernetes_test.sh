#!/usr/bin/env bash
# deploy/kubernetes/: the manifests are valid, agree with each other, and the pods' command
# lines, as Kubernetes would run them, make a working job on two namespace hosts.
#
#   1. kubernetes-validate --strict (PyPI, pinned; in a venv made here) passes the indexed Job,
#      its headless Service and the example Secret, and fails a copy with an unknown field.
#   2. k8s_manifests.py check: the custom resources (PyTorchJob, TrainJob) by structure, the
#      core objects inside them (pod templates, the trainer container) by kubernetes-validate
#      --strict, and that names, ports, counts and the token's Secret agree.
#   3. The pods, run on namespace hosts named like the pods (their DNS names in the hosts
#      files), each with the command line and environment Kubernetes (and Kubeflow's
#      operators) would give it, $(VAR)s expanded from the YAML:
#        job:        the indexed Job; a 2-D PyTorch mesh over Gloo (tests/py/two_d_mesh.py) under
#                    /usr/bin/python3, 2 x 2 workers, node rank = JOB_COMPLETION_INDEX;
#        pytorchjob: training-operator's PET_* environment, --rdzv_backend=static;
#        trainjob:   Trainer v2's torch runtime PET_* environment.
#      Every pod exits 0, every rank reports, ranks follow the pods' node order, MASTER_ADDR
#      is pod 0's address, and the Secret's token reached every meshrun.
#
# usage: kubernetes_test.sh SOURCE_DIR MESHRUN_BINARY [CACHE_DIR]   (0 pass, 1 fail, 77 skip)
# Skipped (77) only for what this machine lacks (python3-yaml, python3-venv, PyPI, PyTorch, root
# and network namespaces); once namespaces are shown to work, a fixture that does not come up is
# a failure.
# CACHE_DIR (default ~/.cache/meshrun-tests) keeps the kubernetes-validate venv between runs.
set -uo pipefail

src=$(cd "${1:?usage: kubernetes_test.sh SOURCE_DIR MESHRUN_BINARY [CACHE_DIR]}" && pwd)
meshrun=$(readlink -f "${2:?usage: kubernetes_test.sh SOURCE_DIR MESHRUN_BINARY [CACHE_DIR]}")
cache=${3:-${XDG_CACHE_HOME:-$HOME/.cache}/meshrun-tests}
t0=$SECONDS

skip() { echo "skip: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

py=/usr/bin/python3
[ -x $py ] || skip "no /usr/bin/python3"
$py -c 'import yaml' 2>/dev/null || skip "no python3-yaml (Debian package python3-yaml)"
$py -c 'import venv, ensurepip' 2>/dev/null || skip "no python3-venv (Debian package python3-venv)"
kdir=$src/deploy/kubernetes
helper=$src/tests/deploy/k8s_manifests.py
work=$(mktemp -d /tmp/meshrun-k8s-test.XXXXXX)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT

# ---- 1. kubernetes-validate in its own venv (pinned), made once per cache dir.
# shellcheck source=tests/deploy/kubernetes_validate.sh
source "$src/tests/deploy/kubernetes_validate.sh"
kubernetes_validate_setup "$cache" "$work"

if ! "$kv" --strict "$kdir/meshrun-job.yaml" "$kdir/secret.example.yaml" >"$work/kv.log" 2>&1; then
  cat "$work/kv.log"; fail "kubernetes-validate --strict refused the core manifests"
fi
passed=$(grep -c ' passed for resource ' "$work/kv.log")
[ "$passed" = 3 ] || { cat "$work/kv.log"; fail "kubernetes-validate passed $passed of 3 resources"; }
# Negative control: the validator really is strict.
sed 's/^\(\s*\)terminationGracePeriodSeconds:/\1bogusField: 1\n&/' "$kdir/meshrun-job.yaml" >"$work/bogus.yaml"
grep -q bogusField "$work/bogus.yaml" || fail "could not make the negative-control manifest"
if "$kv" --strict "$work/bogus.yaml" >"$work/kv-bogus.log" 2>&1; then
  cat "$work/kv-bogus.log"; fail "kubernetes-validate --strict passed a manifest with an unknown field"
fi
echo "kubernetes-validate $KV_VERSION --strict: Service, Job, Secret pass; an unknown field fails"

# ---- 2. custom resources: structure, and the core objects inside them.
$py "$helper" check "$src/deploy" "$work/embedded.yaml" || fail "manifest checks failed"
if ! "$kv" --strict "$work/embedded.yaml" >"$work/kv-embedded.log" 2>&1; then
  cat "$work/kv-embedded.log"; fail "kubernetes-validate --strict refused the custom resources' pod templates"
fi
passed=$(grep -c ' passed for resource ' "$work/kv-embedded.log")
[ "$passed" = 3 ] || { cat "$work/kv-embedded.log"; fail "embedded objects: $passed of 3 passed"; }
echo "custom resources: structure ok; their pod templates pass kubernetes-validate --strict"

# ---- 3. run the pods on namespace hosts.
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import torch' 2>/dev/null ||
  skip "/usr/bin/python3 has no torch (Debian package python3-torch)"
case_py=$src/tests/py/two_d_mesh.py
fixture=$src/tests/hosts/netns_hosts.sh
[ -f "$fixture" ] || skip "no hosts fixture $fixture"
# shellcheck source=/dev/null
source "$fixture"
hosts_require
hosts_up 2 || fail "hosts_up 2 failed (namespaces work here)"
trap 'hosts_down; rm -rf "$work"' EXIT

token=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')

# A worker that reports what it got: rank, sizes, node rank, MASTER_ADDR, and the token's hash
# (not the token).
cat >"$work/report.sh" <<EOF
#!/bin/bash
h=\$(printf '%s' "\${MESHRUN_TOKEN:-}" | sha256sum | cut -c1-16)
echo "\$RANK \$WORLD_SIZE \$GROUP_RANK \$LOCAL_RANK \$MASTER_ADDR \$(hostname) \$h" >"$work/\$SCENARIO.rank.\$RANK"
EOF
chmod 755 "$work/report.sh"
token_hash=$(printf '%s' "$token" | sha256sum | cut -c1-16)
# Workers never get the token: it stays with meshrun, whose store proxy
# serves them (their MESHRUN_TOKEN is unset: the hash of "").
no_token_hash=$(printf '' | sha256sum | cut -c1-16)

# Pod's command lines: the job runs the 2-D mesh, the Kubeflow ones the reporting worker.
$py "$helper" pods "$src/deploy" "$work" "$token" 2 "$case_py" >"$work/pods-job.log" 2>&1 ||
  { cat "$work/pods-job.log"; fail "could not derive the pods"; }
mkdir -p "$work/kf"
$py "$helper" pods "$src/deploy" "$work/kf" "$token" 2 "$work/report.sh" >"$work/pods-kf.log" 2>&1 ||
  { cat "$work/pods-kf.log"; fail "could not derive the Kubeflow pods"; }
for s in pytorchjob trainjob; do cp "$work/kf/$s".* "$work/"; done

run_scenario() {  # SCENARIO: runs its two pods; exit codes in $work/SCENARIO.rc.I
  local s=$1 i idx name pids=() hostname argv env
  for ((i = 0; i < 2; i++)); do  # DNS: every pod name of the scenario, on every host
    while read -r idx name; do
      [ -n "$name" ] && echo "${HOSTS_V4[idx]} $name" >>"/etc/netns/${HOSTS_NS[i]}/hosts"
    done <"$work/$s.hosts"
    # kubelet's line for the pod's own hostname
    echo "${HOSTS_V4[i]} $(cat "$work/$s.$i.hostname")" >>"/etc/netns/${HOSTS_NS[i]}/hosts"
  done
  for ((i = 0; i < 2; i++)); do
    hostname=$(cat "$work/$s.$i.hostname")
    mapfile -d '' argv <"$work/$s.$i.argv"
    mapfile -d '' env <"$work/$s.$i.env"
    # The image: meshrun on PATH (next to its shim), Debian's python with torch.
    env=("${env[@]/#PATH=/PATH=$(dirname "$meshrun"):}" PYTHON_EXEC=/usr/bin/python3 SCENARIO="$s")
    (cd "$work" && timeout 40 ip netns exec "${HOSTS_NS[i]}" unshare --uts sh -c \
      'hostname "$0"; exec "$@"' "$hostname" env -i "${env[@]}" "${argv[@]}" \
      >"$work/$s.out.$i" 2>&1; echo $? >"$work/$s.rc.$i") &
    pids+=($!)
  done
  wait "${pids[@]}"
}

show() {
  local s=$1 i
  for i in 0 1; do echo "----- $s pod $i ($(cat "$work/$s.$i.hostname")): $(tr '\0' ' ' <"$work/$s.$i.argv")"; tail -n 30 "$work/$s.out.$i"; done
}

# job: the indexed Job, the 2-D mesh: (2, 2), a shard group per pod, replicate groups across.
t1=$SECONDS
run_scenario job
for i in 0 1; do
  [ "$(cat "$work/job.rc.$i")" = 0 ] || { show job; fail "job: pod $i exited $(cat "$work/job.rc.$i")"; }
  for r in $((2 * i)) $((2 * i + 1)); do
    grep -q "^\[n$i:r$r\] rank=$r api=[a-z_]* mesh=2x2 coords=($i, $((r % 2))) shard_sum=$((4 * i + 1)) replicate_sum=$((2 * (r % 2) + 2)) OK" "$work/job.out.$i" ||
      { show job; fail "job: pod $i (JOB_COMPLETION_INDEX $i) has no OK line of rank $r as node rank $i"; }
  done
done
echo "job: indexed Job, 2 pods x 2 workers, 2-D PyTorch mesh OK, node rank = completion index ($((SECONDS - t1)) s)"

check_reports() {  # SCENARIO: 4 ranks, node ranks as PET_NODE_RANK, MASTER_ADDR, token
  local s=$1 r f rank world group local_rank master host h pod
  for r in 0 1 2 3; do
    f=$work/$s.rank.$r
    [ -f "$f" ] || { show "$s"; fail "$s: rank $r did not run"; }
    read -r rank world group local_rank master host h <"$f"
    pod=$((r / 2))
    [ "$rank" = "$r" ] || fail "$s: file of rank $r says RANK $rank"
    [ "$world" = 4 ] || fail "$s: rank $r has WORLD_SIZE $world, expected 4"
    [ "$group" = "$pod" ] && [ "$local_rank" = $((r % 2)) ] ||
      fail "$s: rank $r is GROUP_RANK $group LOCAL_RANK $local_rank, expected $pod $((r % 2))"
    [ "$host" = "$(cat "$work/$s.$pod.hostname")" ] ||
      fail "$s: rank $r ran on $host, expected pod $(cat "$work/$s.$pod.hostname") (PET_NODE_RANK $pod)"
    [ "$master" = "${HOSTS_V4[0]}" ] ||
      fail "$s: rank $r has MASTER_ADDR $master, expected pod 0's address ${HOSTS_V4[0]}"
    [ "$h" != "$token_hash" ] || fail "$s: rank $r got the Secret's token (it must stay with meshrun)"
    [ "$h" = "$no_token_hash" ] || fail "$s: rank $r has a MESHRUN_TOKEN of its own"
  done
}
for s in pytorchjob trainjob; do
  t1=$SECONDS
  run_scenario $s
  for i in 0 1; do
    [ "$(cat "$work/$s.rc.$i")" = 0 ] || { show $s; fail "$s: pod $i exited $(cat "$work/$s.rc.$i")"; }
  done
  check_reports $s
  echo "$s: 2 pods x 2 workers, ranks and node ranks as the operator's PET_* say, MASTER_ADDR ${HOSTS_V4[0]} ($((SECONDS - t1)) s)"
done
if grep -qF "$token" "$work"/*.out.*; then fail "the token appears in a pod's output"; fi

echo "PASS: kubernetes ($((SECONDS - t0)) s)"
