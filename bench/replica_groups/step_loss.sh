#!/usr/bin/env bash
# Step-seconds lost to one worker failure (issue 33): a job of R = 4 replicas (1 worker each,
# CPU, Gloo), STEPS steps of STEP_SECONDS, one worker killed with SIGKILL after step KILL_AT, in
# five forms side by side, in one run:
#   replica groups  meshrun --nnodes=4 --replica_groups=4 (4 agents, one `meshrun server`),
#                   torchft 0.2.0's Manager (tests/py/torchft_ddp.py): the failed group restarts
#                   alone and heals from a peer;
#   libmesh         the same with examples/ft_hsdp (C++, libmesh's fault-tolerance manager; a
#                   linear model, not the same as the Python forms', so only its lost time and
#                   stall compare);
#   meshrun         meshrun --standalone --nproc_per_node=4 --max_restarts=1, plain DDP
#                   (bench/replica_groups/ddp_checkpoint.py, a checkpoint every CKPT_EVERY steps):
#                   every worker restarts and redoes the steps since the checkpoint;
#   torchrun        PyTorch 2.x's torchrun, same flags and program; and again with
#                   TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (the workaround of pytorch/pytorch#135712:
#                   without it, torchrun's restarted workers may read the previous attempt's
#                   Gloo addresses). A run that fails or hangs (300 s) is reported as such.
# Each form runs once without the failure (its step time) and once with it. Reported per form:
# the job's delay (its wall time with the failure minus without), the workers' lost time
# (R x wall time with the failure, minus the distinct steps each worker committed x the step
# time without failure: idle, restarting and redone steps), and the longest stall of a worker
# that did not fail.
#
# usage: step_loss.sh MESHRUN SOURCE_DIR [FT_HSDP]   (FT_HSDP: default MESHRUN's build's
#        examples/ft_hsdp)
#   STEPS=300 STEP_SECONDS=0.05 KILL_AT=110 CKPT_EVERY=25 by default.
# Needs the venvs tests/e2e/torchft_ddp_test.sh uses (PyTorch 2.x, torchft 0.2.0; run that test
# once to make them).
set -uo pipefail
meshrun=$(readlink -f "${1:?usage: step_loss.sh MESHRUN SOURCE_DIR}")
src=$(readlink -f "${2:?usage: step_loss.sh MESHRUN SOURCE_DIR}")
ft_hsdp=$(readlink -f "${3:-$(dirname "$meshrun")/../examples/ft_hsdp}")
source "$src/tests/support/wait_for.sh"
cache=${MESHRUN_TEST_CACHE:-$HOME/.cache/meshrun-tests}
torch_venv=${MESHRUN_TORCH2_VENV:-$cache/torch-2.15.0}
ft_python=$cache/torchft-train-0.2.0-torch-2.15.0/bin/python
[[ -x $ft_python && -x $torch_venv/bin/torchrun ]] ||
  { echo "needs $ft_python and $torch_venv/bin/torchrun: run tests/e2e/torchft_ddp_test.sh once"; exit 2; }
export STEPS=${STEPS:-300} STEP_SECONDS=${STEP_SECONDS:-0.05} CKPT_EVERY=${CKPT_EVERY:-25}
kill_at=${KILL_AT:-110}
root=$(mktemp -d /tmp/meshrun-step-loss.XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done; rm -rf -- "$root"' EXIT

# replica_groups DIR [KILL_AT [libmesh]]: one run of the replica-group form (torchft, or
# examples/ft_hsdp); waits for its 4 agents.
replica_groups() {
  local dir=$1 n program
  mkdir -p "$dir"
  "$meshrun" server --host 127.0.0.1 --port 0 --port_file "$dir/port" >"$dir/server.log" 2>&1 &
  local server=$!
  pids+=($server)
  listening() { [[ -s $dir/port ]]; }
  wait_for 20 listening || { echo "the server did not listen"; exit 1; }
  local agents=()
  program=("$ft_python" "$src/tests/py/torchft_ddp.py")
  [[ ${3:-} == libmesh ]] && program=("$ft_hsdp" --steps="$STEPS" --step_ms="$(python3 -c "print(round($STEP_SECONDS * 1000))")"
                                      --kill_at_step="${2:--1}")
  for n in 0 1 2 3; do
    env OUT="$dir" KILL_AT="${2:--1}" TIME_LIMIT=600 "$meshrun" --nnodes=4 --replica_groups=4 --nproc_per_node=1 \
      --rdzv_endpoint="127.0.0.1:$(cat "$dir/port")" --rdzv_id=bench --max_restarts=1 \
      --rdzv_conf lighthouse_min_replicas=1,lighthouse_heartbeat_timeout=2 \
      --no_python "${program[@]}" >"$dir/agent$n.log" 2>&1 &
    agents+=($!)
    pids+=($!)
  done
  for n in "${agents[@]}"; do wait "$n" || { echo "an agent failed: $dir"; tail -n 5 "$dir"/agent*.log; exit 1; }; done
  kill "$server"
  wait "$server" 2>/dev/null
}
# world FORM DIR [KILL_AT]: one run of a restart-the-world form (meshrun, torchrun,
# torchrun-unshared).
world() {
  local form=$1 dir=$2 launcher extra=()
  mkdir -p "$dir"
  if [[ $form == meshrun ]]; then launcher=("$meshrun" --no_python "$torch_venv/bin/python"); else launcher=("$torch_venv/bin/torchrun"); fi
  # pytorch/pytorch#135712: torchrun 2.x shares its rendezvous TCPStore with the workers, and
  # restarted workers may read the previous attempt's keys; its workaround:
  [[ $form == torchrun-unshared ]] && extra=(TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1)
  # Bounded: a restart that hangs is reported, not waited for.
  if ! env "${extra[@]}" OUT="$dir" KILL_AT="${3:--1}" timeout -s KILL 300 "${launcher[@]:0:1}" --standalone \
      --nproc_per_node=4 --max_restarts=1 "${launcher[@]:1}" "$src/bench/replica_groups/ddp_checkpoint.py" \
      >"$dir/launcher.log" 2>&1; then
    pkill -KILL -f "$src/bench/replica_groups/ddp_checkpoint.py"
    # Why: Gloo's mesh of the restarted workers, else no answer at all (the first attempt's
    # errors, after the kill, are expected).
    grep -h -m 1 -o -E "Gloo connectFullMesh failed.{0,100}" "$dir/launcher.log" >"$dir/failed" ||
      echo "no answer within 300 s (the restarted workers hung)" >"$dir/failed"
    echo "$form $(basename "$dir"): failed: $(cat "$dir/failed")" >&2
  fi
}

for form in replica_groups libmesh meshrun torchrun torchrun-unshared; do
  for run in base fail; do
    k=-1
    [[ $run == fail ]] && k=$kill_at
    start=$(now_ms)
    if [[ $form == replica_groups ]]; then replica_groups "$root/$form-$run" "$k"
    elif [[ $form == libmesh ]]; then
      replica_groups "$root/$form-$run" "$k" libmesh
      # ft_hsdp prints its steps: "step N ... time T" after "ft_hsdp: group G rank R pid P restart C".
      for n in 0 1 2 3; do
        awk '/ft_hsdp: group/ { restart = $NF; next }
             / step [0-9]+ quorum [0-9]+ replicas [0-9]+ time / { print $3, $NF, restart }' \
          "$root/$form-$run/agent$n.log" >"$root/$form-$run/agent$n.steps"
      done
    else world "$form" "$root/$form-$run" "$k"; fi
    echo "$form $run: $(( $(now_ms) - start )) ms" >&2
  done
done

python3 - "$root" "$STEPS" <<'PY'
import glob, os, sys
root, steps = sys.argv[1], int(sys.argv[2])
def load(d):
    """Per worker: [(step, time, restart)]."""
    w = {}
    for f in glob.glob(os.path.join(d, "*.steps")):
        w[os.path.basename(f)[:-6]] = [(int(l.split()[0]), float(l.split()[1]), l.split()[2]) for l in open(f)]
    return w
def wall(w):
    return max(r[1] for v in w.values() for r in v) - min(r[1] for v in w.values() for r in v)
print(f"| form | step time, no failure (ms) | job delay (s) | workers' lost time (s) | longest stall of a worker that did not fail (s) |")
print("| --- | ---: | ---: | ---: | ---: |")
names = {"replica_groups": "meshrun --replica_groups=4 (torchft)",
         "libmesh": "meshrun --replica_groups=4 (libmesh, examples/ft_hsdp)", "meshrun": "meshrun, restart the world",
         "torchrun": "torchrun 2.x, restart the world",
         "torchrun-unshared": "torchrun 2.x, restart the world, TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"}
for form in ("replica_groups", "libmesh", "meshrun", "torchrun", "torchrun-unshared"):
    failed = [r for r in ("base", "fail") if os.path.exists(os.path.join(root, f"{form}-{r}", "failed"))]
    if failed:
        why = open(os.path.join(root, f"{form}-{failed[0]}", "failed")).read().strip()
        print(f"| {names[form]} | the run {'without' if failed[0] == 'base' else 'with'} the failure failed: {why} | | | |")
        continue
    base, fail = load(os.path.join(root, form + "-base")), load(os.path.join(root, form + "-fail"))
    t_step = wall(base) / (steps - 1)
    delay = wall(fail) - wall(base)
    useful = sum(len({r[0] for r in v}) for v in fail.values())
    lost = len(fail) * wall(fail) - useful * t_step
    stalls = []
    for name, v in fail.items():
        if any(r[2] != "0" for r in v):
            continue  # A worker that failed and restarted.
        t = [r[1] for r in v]
        stalls.append(max(b - a for a, b in zip(t, t[1:])))
    stall = f"{max(stalls):.2f}" if stalls else "- (every worker restarted)"
    print(f"| {names[form]} | {t_step * 1e3:.1f} | {delay:.2f} | {lost:.2f} | {stall} |")
PY
