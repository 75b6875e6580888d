#!/usr/bin/env bash
# What a leading replica's clients see while etcd has no quorum (issue 30, "Measure"): reads
# of loaded state (KvGet) and Status, timed one at a time against the leader, first with
# etcd healthy (5 s), then for 10 s after two of etcd's three members are killed (the
# leader's own member left), then again once they are back. A benchmark, not a test: it
# prints the numbers (docs/performance.md, "While etcd has no quorum").
#
# usage: bench/quorum_loss/quorum_loss.sh [BUILD_DIR]   (default: build)
# Loopback; a real 3-member etcd with fsync (tests/etcd/etcd_cluster.sh); 3 replicas of
# meshrun server --state, default lease (2 s) and --state_timeout (3 s).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(readlink -f "${1:-$root/build}")
meshrun=$build/launcher/meshrun store_keys=$build/tests/store_keys
# shellcheck source=tests/etcd/etcd_cluster.sh
source "$root/tests/etcd/etcd_cluster.sh"
# shellcheck source=tests/support/wait_for.sh
source "$root/tests/support/wait_for.sh"
etcd_require
work=$(mktemp -d /tmp/meshrun-quorum-bench.XXXXXX)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  etcd_down
  rm -rf -- "$work"
}
trap cleanup EXIT
etcd_up 3 --fsync || exit 1
trap cleanup EXIT
for i in 0 1 2; do
  members=${ETCD_CLIENT[i]}
  for j in 0 1 2; do ((j != i)) && members+=",${ETCD_CLIENT[j]}"; done
  "$meshrun" server --host 127.0.0.1 --port 0 --port_file "$work/port$i" --state "etcd://$members/bench" >"$work/server$i.log" 2>&1 &
  pids+=($!)
done
leader_of() { grep -l "meshrun server: leading" "$work"/server*.log 2>/dev/null | head -n 1; }
has_leader() { [[ -n $(leader_of) ]]; }
wait_for 30 has_leader || { echo "no replica led within 30 s"; exit 1; }
leader=$(leader_of); leader=${leader##*server}; leader=${leader%.log}
ep=127.0.0.1:$(cat "$work/port$leader")
"$store_keys" "@$ep" bench 0 set probe/key value >/dev/null || { echo "cannot set the key"; exit 1; }
# status_times N: N `meshrun status` of the run against the leader, 0.5 s apart: "ms,ms,..."
status_times() {
  local n t0 out=
  for ((n = 0; n < $1; n++)); do
    t0=$(now_ms)
    "$meshrun" status --rdzv_endpoint="$ep" --rdzv_id=bench --timeout 20 >/dev/null 2>&1
    out+="${out:+,}$(($(now_ms) - t0))"
    sleep 0.5
  done
  echo "$out"
}
phase() {
  local name=$1 seconds=$2
  "$store_keys" "@$ep" bench 0 getbench probe/key "$seconds" >"$work/get.$name" 2>&1 &
  local get=$!
  local st
  st=$(status_times $((seconds * 2 - 1)))
  wait "$get"
  echo "$name: $(cat "$work/get.$name"); meshrun status (process start included) ms: $st"
}
phase healthy 5
for i in 0 1 2; do ((i != leader)) && etcd_kill "$i"; done
phase "quorum lost" 10
for i in 0 1 2; do ((i != leader)) && etcd_start "$i"; done
etcd_wait_healthy 30 || { echo "etcd did not recover"; exit 1; }
back() { "$store_keys" "@$ep" bench 0 get probe/key >/dev/null 2>&1; }
wait_for 30 back || { echo "the leader did not serve again within 30 s"; exit 1; }
phase "quorum back" 5
