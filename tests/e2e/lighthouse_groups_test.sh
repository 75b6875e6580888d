#!/usr/bin/env bash
# One replica group fails; only it restarts, and the other trains on (issue 33), with torchft's
# own client: two meshrun jobs, one per replica group (groupA, groupB), on one `meshrun server`
# on loopback, share one lighthouse (--rdzv_conf lighthouse_run=ft). Each job's worker steps
# through quorums (tests/e2e/lighthouse_steps.py); groupB's worker dies at its step 5, and its
# restarted worker takes 4 s (a model's load) before it asks again.
#
# Checked from the groups' own logs: groupA's worker starts once and keeps stepping while
# groupB is down (quorums of groupA alone, once groupB's heartbeat timed out), groupB's job
# restarts its worker (restart count 1), which rejoins: quorums of both again, with a larger
# id; quorum ids never go back; both jobs exit 0. groupA's longest stall is printed.
#
# FORM replica_groups: the same two groups as one job, `meshrun --nnodes=2 --replica_groups=2`
# (runs ft-group-0 and ft-group-1, whose workers share the job's lighthouse by default),
# instead of two jobs joined by lighthouse_run.
#
# usage: lighthouse_groups_test.sh MESHRUN [CACHE_DIR] [FORM]   (0 pass, 1 fail, 77 skip)
set -uo pipefail
meshrun=$(readlink -f "${1:?usage: lighthouse_groups_test.sh MESHRUN [CACHE_DIR] [FORM]}")
cache=${2:-${MESHRUN_TEST_CACHE:-$HOME/.cache/meshrun-tests}}
[[ $cache == - ]] && cache=${MESHRUN_TEST_CACHE:-$HOME/.cache/meshrun-tests}
form=${3:-jobs}
[[ $form == jobs || $form == replica_groups ]] || { echo "FORM: jobs or replica_groups, not '$form'"; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/support/wait_for.sh
source "$here/../support/wait_for.sh"
# shellcheck source=tests/support/rdzv_server.sh
source "$here/../support/rdzv_server.sh"
# shellcheck source=tests/e2e/torchft_extension.sh
source "$here/torchft_extension.sh"
work=$(mktemp -d /tmp/meshrun-lighthouse-groups.XXXXXX)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  [[ -z ${LIGHTHOUSE_KEEP:-} && $work == /tmp/meshrun-lighthouse-groups.* ]] && rm -rf -- "$work"
}
fail() {
  local f
  echo "FAIL: $*"
  for f in "$work"/*.log "$work"/*.steps; do
    [[ -f $f ]] && { echo "--- ${f##*/} (last 12 lines)"; tail -n 12 "$f"; }
  done
  exit 1
}
trap cleanup EXIT
torchft_extension "$cache" "$work"
export TORCHFT_SO

start_rdzv_server "$meshrun" "$work" || fail "the server did not listen within 20 s"
# job GROUP [ENV...]: one replica group's job (FORM jobs), or one node of the job of two groups
# (FORM replica_groups); its exit code lands in $work/GROUP.rc. GROUP is the torchft replica id.
if [[ $form == jobs ]]; then
  shape=(--nnodes=1)
  conf=lighthouse_run=ft,
else
  shape=(--nnodes=2 --replica_groups=2)
  conf=
fi
job() {
  local g=$1 id=$1
  shift
  [[ $form == replica_groups ]] && id=ft
  (env OUT="$work" GROUP="$g" "$@" "$meshrun" "${shape[@]}" --nproc_per_node=1 --rdzv_endpoint="$endpoint" \
     --rdzv_id="$id" --max_restarts=1 \
     --rdzv_conf "${conf}lighthouse_min_replicas=1,lighthouse_heartbeat_timeout=2" \
     --no_python sh -c 'echo "$TORCHELASTIC_RESTART_COUNT" >> "$OUT/$GROUP.start"; exec python3 '"$here"'/lighthouse_steps.py' \
     >"$work/$g.log" 2>&1
   echo $? >"$work/$g.rc") &
  pids+=($!)
}
job groupA
job groupB FAIL_AT_STEP=5 RESTART_DELAY=4
lines() { [[ -f $work/$1.steps ]] && awk -v r="$2" '$5 == r' "$work/$1.steps" | wc -l || echo 0; }
restarted_and_stepped() { (($(lines groupB 1) >= 5)); }
wait_for 90 restarted_and_stepped || fail "groupB's restarted worker did not step 5 times within 90 s"
# groupA goes on past groupB's return: 5 more quorums of both.
both() { awk '$3 == "groupA,groupB"' "$work/groupA.steps" | wc -l; }
n=$(both)
more() { (($(both) >= n + 5)); }
wait_for 30 more || fail "groupA did not step 5 more times with groupB back within 30 s"
touch "$work/release"
ended() { [[ -s $work/groupA.rc && -s $work/groupB.rc ]]; }
wait_for 60 ended || fail "the jobs did not end within 60 s of the release"
[[ $(cat "$work/groupA.rc") == 0 && $(cat "$work/groupB.rc") == 0 ]] ||
  fail "exit codes: groupA $(cat "$work/groupA.rc"), groupB $(cat "$work/groupB.rc")"
[[ $(tr '\n' ' ' <"$work/groupA.start") == "0 " ]] || fail "groupA's worker started more than once: $(tr '\n' ' ' <"$work/groupA.start")"
[[ $(tr '\n' ' ' <"$work/groupB.start") == "0 1 " ]] || fail "groupB's worker did not restart exactly once: $(tr '\n' ' ' <"$work/groupB.start")"

python3 - "$work/groupA.steps" "$work/groupB.steps" <<'PY' || fail "the quorums' record is wrong (above)"
import sys
a = [l.split() for l in open(sys.argv[1])]
b = [l.split() for l in open(sys.argv[2])]
ids = [int(s[1]) for s in a]
if any(y < x for x, y in zip(ids, ids[1:])):
    sys.exit(f"groupA's quorum ids went back: {ids}")
phases = []  # groupA's runs of quorums with the same members.
for s in a:
    if not phases or phases[-1][0] != s[2]:
        phases.append([s[2], 0])
    phases[-1][1] += 1
members = [p[0] for p in phases]
if "groupA,groupB" not in members:
    sys.exit(f"groupA never stepped with groupB: {phases}")
if "groupA" not in members[members.index("groupA,groupB"):]:
    sys.exit(f"groupA never stepped alone after stepping with groupB: {phases}")
alone = members.index("groupA", members.index("groupA,groupB"))
if "groupA,groupB" not in members[alone:]:
    sys.exit(f"groupB never rejoined groupA's quorums: {phases}")
t = [float(s[5]) for s in a]
stall = max(y - x for x, y in zip(t, t[1:]))
first_b_step = next(s for s in b if s[4] == "1")
first_b = int(first_b_step[1])
# groupA's quorums alone before groupB's return (after the release, the group that stops
# second may step alone once more: the other stopped first).
last_a_alone = max(int(s[1]) for s in a if s[2] == "groupA" and float(s[5]) < float(first_b_step[5]))
if first_b <= last_a_alone:
    sys.exit(f"groupB's first quorum after its restart ({first_b}) is not newer than groupA's alone ({last_a_alone})")
print("groupA's quorums: " + ", ".join(f"{n} x [{m}]" for m, n in phases))
print(f"groupA's longest stall between two steps: {stall:.2f} s (lighthouse_heartbeat_timeout 2 s: groupB is "
      f"left out once its heartbeat times out)")
PY
echo "PASS ($form): groupB's worker died and its group alone restarted it; groupA stepped on (started once) and both ended 0"
