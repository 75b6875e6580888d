#!/usr/bin/env bash
# torchft's own client against meshrun's lighthouse, and against torchft's own lighthouse.
#
# Three workers of one meshrun job each act as a replica group and drive torchft 0.2.0's
# LighthouseClient (its Rust extension, pinned, from PyPI; it loads without PyTorch) at
# TORCHFT_LIGHTHOUSE, which the agent sets: the node's endpoint, which forwards to the run's
# lighthouse in the rendezvous server (tests/e2e/lighthouse_group.py has the phases:
# a quorum of three, the fast quorum keeping its id, a group leaving and the next id, a
# quorum under min_replicas timing out). The same three groups then run against torchft's
# own LighthouseServer with the same settings; the two transcripts must be equal.
#
# usage: lighthouse_torchft_test.sh MESHRUN [CACHE_DIR]   (0 pass, 1 fail, 77 skip)
# Skipped (77) only when this machine lacks Python 3.11 (the wheel is cp311) or PyPI.
set -uo pipefail
meshrun=$(readlink -f "${1:?usage: lighthouse_torchft_test.sh MESHRUN [CACHE_DIR]}")
cache=${2:-${MESHRUN_TEST_CACHE:-$HOME/.cache/meshrun-tests}}
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d /tmp/meshrun-lighthouse-test.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf -- "$work"
}
trap cleanup EXIT

# ---- torchft's extension: from its pinned wheel, kept in the cache.
# shellcheck source=tests/e2e/torchft_extension.sh
source "$here/torchft_extension.sh"
torchft_extension "$cache" "$work"
export TORCHFT_SO
so=$TORCHFT_SO

# The same settings on both lighthouses: min_replicas 2, join_timeout 30 s, quorum_tick
# 100 ms, heartbeat_timeout 1 s.
# ---- 1. meshrun: 3 workers, each a replica group.
mkdir -p "$work/sync-meshrun"
LH_SYNC=$work/sync-meshrun timeout 120 "$meshrun" --standalone --nproc_per_node=3 --rdzv_id=lighthouse \
  --rdzv_conf lighthouse_min_replicas=2,lighthouse_join_timeout=30,lighthouse_quorum_tick=0.1,lighthouse_heartbeat_timeout=1 \
  --tee 1 python3 "$here/lighthouse_group.py" >"$work/meshrun.out" 2>&1
rc=$?
[[ $rc == 0 ]] || { cat "$work/meshrun.out"; fail "the meshrun job exited $rc"; }
grep -o 'group[0-9] [0-9]:.*' "$work/meshrun.out" | sort >"$work/meshrun.transcript"
echo "meshrun's lighthouse:"
sed 's/^/  /' "$work/meshrun.transcript"

# ---- 2. torchft's own LighthouseServer, the same groups started by hand.
mkdir -p "$work/sync-torchft"
python3 - "$so" >"$work/torchft-lighthouse.addr" 2>"$work/torchft-lighthouse.log" <<'PY' &
import importlib.util, sys, time
s = importlib.util.spec_from_file_location("_torchft", sys.argv[1]); ft = importlib.util.module_from_spec(s)
s.loader.exec_module(ft)
server = ft.LighthouseServer(bind="127.0.0.1:0", min_replicas=2, join_timeout_ms=30000, quorum_tick_ms=100,
                             heartbeat_timeout_ms=1000)
print("http://127.0.0.1:" + server.address().rsplit(":", 1)[1], flush=True)
time.sleep(120)
PY
pids+=($!)
for _ in $(seq 200); do [[ -s $work/torchft-lighthouse.addr ]] && break; sleep 0.05; done
addr=$(head -n 1 "$work/torchft-lighthouse.addr")
[[ $addr == http://127.0.0.1:* ]] || fail "torchft's LighthouseServer did not start: $(cat "$work/torchft-lighthouse.log")"
group_pids=()
for r in 0 1 2; do
  RANK=$r LH_SYNC=$work/sync-torchft TORCHFT_LIGHTHOUSE=$addr timeout 120 python3 "$here/lighthouse_group.py" \
    >"$work/torchft.$r.out" 2>&1 &
  group_pids+=($!)
done
for i in 0 1 2; do
  wait "${group_pids[i]}" || { cat "$work/torchft.$i.out"; fail "group $i failed against torchft's lighthouse"; }
done
cat "$work"/torchft.?.out | grep -o 'group[0-9] [0-9]:.*' | sort >"$work/torchft.transcript"
echo "torchft $TORCHFT_VERSION's lighthouse:"
sed 's/^/  /' "$work/torchft.transcript"

# ---- 3. The transcripts agree, and say what the phases expect.
diff "$work/torchft.transcript" "$work/meshrun.transcript" >"$work/diff" ||
  { cat "$work/diff"; fail "meshrun's lighthouse answered otherwise than torchft's"; }
[[ $(grep -c ': quorum 1 \[group0@.*,group1@.*,group2@' "$work/meshrun.transcript") == 6 ]] ||
  fail "phases 1 and 2 did not give one quorum of the three groups, id unchanged"
[[ $(grep -c '3: quorum 2 \[group0@[0-9]*/2/group0:29500/{.rank.: 0},group1@.*\] (after' "$work/meshrun.transcript") == 2 ]] ||
  fail "phase 3 did not give the two remaining groups the next quorum id after group 2's heartbeat timed out"
grep -q 'group0 4: no quorum alone (timed out)' "$work/meshrun.transcript" ||
  fail "a quorum call under min_replicas did not time out at its deadline"
echo "PASS: torchft's client gets from meshrun's lighthouse what torchft's own lighthouse answers (9 answers)"
