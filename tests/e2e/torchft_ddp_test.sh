#!/usr/bin/env bash
# Per-step fault tolerance with PyTorch and torchft under `meshrun --replica_groups` (issue 33):
# 3 replica groups x 2 workers (3 agents on loopback, one `meshrun server`), each worker a
# torchft 0.2.0 data-parallel loop over Gloo on CPU (tests/py/torchft_ddp.py: the Manager
# averages each gradient over the groups), 200 steps of 50 ms. At
# group 1's step 50, its rank 0 is killed with SIGKILL.
#   - groups 0 and 2 keep stepping: their workers start once, and their longest stall between
#     two committed steps is printed (and must stay under 30 s);
#   - group 1 alone restarts (restart count 1), heals from a peer (torchft's checkpoint
#     transport) and steps on;
#   - every worker reaches step 200, and the final parameters are equal on all 6 workers (a
#     group that started over instead of healing would differ);
#   - every agent exits 0.
# FORM etcd: the same job on 3 `meshrun server` replicas over a real 3-member etcd
# (tests/etcd/etcd_cluster.sh), and at group 1's step 50 the leading replica is killed (kill -9)
# instead of a worker: no worker of any group restarts, every group steps on through the
# failover (its longest stall printed), all end at step 200 with equal parameters.
# Needs PyTorch 2.x from PyPI (scripts/torch2-venv.sh, cached) and torchft 0.2.0 with its
# pinned dependencies (tests/py/torchft-requirements.txt), installed here into a venv cached
# beside it that sees the PyTorch venv's packages: exit 77 (skipped) without them (and without
# etcd, in FORM etcd).
# usage: torchft_ddp_test.sh MESHRUN SOURCE_DIR [FORM]   (0 pass, 1 fail, 77 skip)
set -uo pipefail
meshrun=$(readlink -f "${1:?usage: torchft_ddp_test.sh MESHRUN SOURCE_DIR}")
src=$(readlink -f "${2:?usage: torchft_ddp_test.sh MESHRUN SOURCE_DIR}")
form=${3:-worker}
# shellcheck source=tests/support/wait_for.sh
source "$src/tests/support/wait_for.sh"
if [[ $form == etcd ]]; then
  # shellcheck source=tests/etcd/etcd_cluster.sh
  source "$src/tests/etcd/etcd_cluster.sh"
  etcd_require
  # shellcheck source=tests/etcd/replicas.sh
  source "$src/tests/etcd/replicas.sh"
fi
# shellcheck source=tests/support/rdzv_server.sh
source "$src/tests/support/rdzv_server.sh"
cache=${MESHRUN_TEST_CACHE:-$HOME/.cache/meshrun-tests}
torch_version=2.15.0
torch_venv=${MESHRUN_TORCH2_VENV:-$cache/torch-$torch_version}
[[ -x $torch_venv/bin/python ]] || { echo "SKIPPED: no PyTorch $torch_version venv at $torch_venv (scripts/torch2-venv.sh makes it)"; exit 77; }
venv=$cache/torchft-train-0.2.0-torch-$torch_version
reqs=$src/tests/py/torchft-requirements.txt
stamp="$(md5sum <"$reqs" | cut -c1-32)"
mkdir -p "$cache"
exec 8>"$venv.lock"
flock -w 600 8 || { echo "FAIL: $venv.lock held for 10 min"; exit 1; }
if [[ $(cat "$venv/.meshrun-stamp" 2>/dev/null) != "$stamp" ]]; then
  rm -rf -- "$venv"
  /usr/bin/python3 -m venv "$venv" || { echo "SKIPPED: python3 -m venv failed"; exit 77; }
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  "$torch_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' >"$site/meshrun-torch.pth"
  if ! timeout 600 "$venv/bin/pip" install -q --no-deps -r "$reqs" >"$cache/torchft-train-pip.log" 2>&1; then
    tail -n 3 "$cache/torchft-train-pip.log"
    rm -rf -- "$venv"
    echo "SKIPPED: pip could not install $reqs (PyPI unreachable?)"
    exit 77
  fi
  echo "$stamp" >"$venv/.meshrun-stamp"
fi
exec 8>&-
python=$venv/bin/python
"$python" -c 'import torch, torchft' 2>/dev/null || { echo "FAIL: torch and torchft do not import in $venv"; exit 1; }

work=$(mktemp -d /tmp/meshrun-torchft-ddp.XXXXXX)
pids=() server_pid=()
cleanup() {
  local p
  for p in "${pids[@]}" "${server_pid[@]}"; do [[ -n $p ]] && kill -KILL "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  [[ $form == etcd ]] && etcd_down
  [[ -z ${TORCHFT_DDP_KEEP:-} && $work == /tmp/meshrun-torchft-ddp.* ]] && rm -rf -- "$work"
}
fail() {
  local f
  echo "FAIL: $*"
  for f in "$work"/*.log; do
    [[ -f $f ]] || continue
    echo "--- ${f##*/}: meshrun's lines, and the last 6 others"
    grep -a "^meshrun\|^\[meshrun" "$f" | tail -n 10
    grep -av "^meshrun\|^\[meshrun" "$f" | tail -n 6 | cut -c1-300
  done
  for f in "$work"/*.steps; do [[ -f $f ]] && echo "--- ${f##*/}: $(wc -l <"$f") steps, last: $(tail -n 1 "$f")"; done
  exit 1
}
trap cleanup EXIT

if [[ $form == etcd ]]; then
  etcd_up 3 || fail "etcd did not come up"
  trap cleanup EXIT  # etcd_up sets its own: ours calls etcd_down too.
  start_replicas "$meshrun" "$work" torchft-ddp --state_lease_ttl 2 || fail "the 3 replicas did not all listen within 20 s"
  endpoint=$endpoints
  led() { leader_now >/dev/null; }
  wait_for 30 led || fail "no replica led within 30 s"
else
  start_rdzv_server "$meshrun" "$work" || fail "the server did not listen within 20 s"
fi
for n in 0 1 2; do
  (env OUT="$work" STEPS=200 STEP_SECONDS=0.05 TIME_LIMIT=240 "$meshrun" --nnodes=3 --replica_groups=3 \
     --nproc_per_node=2 --rdzv_endpoint="$endpoint" --rdzv_id=ddp --max_restarts=2 \
     --rdzv_conf leader_grace=60,lighthouse_min_replicas=1,lighthouse_heartbeat_timeout=2 \
     --no_python sh -c 'echo "$TORCHELASTIC_RESTART_COUNT $$" >> "$OUT/g${REPLICA_GROUP_ID}r$RANK.start"; exec "$0" "$@"' \
     "$python" "$src/tests/py/torchft_ddp.py" >"$work/agent$n.log" 2>&1 &
   echo $! >"$work/agent$n.pid"
   wait $!
   echo $? >"$work/agent$n.rc") &
  pids+=($!)
done
steps_of() { [[ -f $work/$1.steps ]] && wc -l <"$work/$1.steps" || echo 0; }
at_50() { (($(steps_of g1r0) >= 50)); }
wait_for 180 at_50 || fail "group 1 did not reach step 50 within 180 s"
# meshrun status: the job's lighthouse, with each group's step at its last quorum.
status=$("$meshrun" status --rdzv_endpoint="$endpoint" --rdzv_id=ddp 2>&1) || fail "meshrun status: $status"
grep "steps at that quorum: ddp_0" <<<"$status" | grep -q "ddp_2" ||
  fail "meshrun status does not show the groups' steps: $status"
grep "steps at that quorum" <<<"$status"
if [[ $form == etcd ]]; then
  leader=$(leader_now) || fail "no replica leads"
  kill -KILL "${server_pid[leader]}"
  wait "${server_pid[leader]}" 2>/dev/null
  server_pid[leader]=
  echo "the leading replica ($leader) killed with SIGKILL at group 1's step $(steps_of g1r0)"
else
  victim=$(awk '{ print $2 }' "$work/g1r0.start" | tail -n 1)
  kill -KILL "$victim" || fail "could not kill group 1's rank 0 (pid $victim)"
  echo "group 1's rank 0 (pid $victim) killed with SIGKILL at its step $(steps_of g1r0)"
fi
finals() { local f; for f in g0r0 g0r1 g1r0 g1r1 g2r0 g2r1; do [[ -s $work/$f.final ]] || return 1; done; }
wait_for 240 finals || fail "not every worker reached step 200 within 240 s of the kill"
ended() { local n; for n in 0 1 2; do [[ -s $work/agent$n.rc ]] || return 1; done; }
wait_for 60 ended || fail "the agents did not end within 60 s of the last step"
for n in 0 1 2; do [[ $(cat "$work/agent$n.rc") == 0 ]] || fail "agent $n exited $(cat "$work/agent$n.rc")"; done

python3 - "$work" "$form" <<'PY' || fail "the run's record is wrong (above)"
import os, sys
work, form = sys.argv[1], sys.argv[2]
def lines(name):
    return [l.split() for l in open(os.path.join(work, name))]
healthy = "012" if form == "etcd" else "02"
for g in healthy:
    for r in "01":
        starts = lines(f"g{g}r{r}.start")
        if [s[0] for s in starts] != ["0"]:
            sys.exit(f"group {g} rank {r} started {len(starts)} times (restart counts {[s[0] for s in starts]})")
for r in "01" if form != "etcd" else "":
    counts = [s[0] for s in lines(f"g1r{r}.start")]
    if counts != ["0", "1"]:
        sys.exit(f"group 1 rank {r}: restart counts {counts}, not [0, 1]")
finals = {f"g{g}r{r}": lines(f"g{g}r{r}.final")[0] for g in "012" for r in "01"}
if {v[1] for v in finals.values()} != {"200"}:
    sys.exit(f"final steps: { {k: v[1] for k, v in finals.items()} }")
if len({v[0] for v in finals.values()}) != 1:
    sys.exit(f"final parameters differ: { {k: v[0][:12] for k, v in finals.items()} }")
stalls = {}
for g in healthy:
    t = [float(l[1]) for l in lines(f"g{g}r0.steps")]
    stalls[g] = max(b - a for a, b in zip(t, t[1:]))
    if stalls[g] > 30:
        sys.exit(f"group {g} stalled {stalls[g]:.1f} s")
if form == "etcd":
    print(f"no worker restarted through the leader's kill; longest stalls {[f'{v:.2f} s' for v in stalls.values()]}; "
          f"all 6 workers at step 200 with equal parameters")
    sys.exit(0)
# Group 1's restarted workers healed: their first committed step is far past 1.
rest = [l for l in lines("g1r0.steps") if l[2] == "1"]
if not rest or int(rest[0][0]) <= 50:
    sys.exit(f"group 1's restarted rank 0 did not resume past step 50 (first step {rest[0][0] if rest else None})")
print(f"groups 0 and 2 started once; longest stall {stalls['0']:.2f} s and {stalls['2']:.2f} s "
      f"(lighthouse_heartbeat_timeout 2 s); group 1 restarted once and resumed at step "
      f"{rest[0][0]}; all 6 workers at step 200 with equal parameters")
PY
if [[ $form == etcd ]]; then
  echo "PASS: 3 torchft DDP replica groups on 3 replicas over etcd: the leader's kill -9 restarted no group, all ended equal"
else
  echo "PASS: 3 torchft DDP replica groups under meshrun --replica_groups: group 1's crash restarted it alone, it healed from a peer, all ended equal"
fi
