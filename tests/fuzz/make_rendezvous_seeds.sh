#!/usr/bin/env bash
# Writes the seed corpus of the `rendezvous` fuzz target (corpus/rendezvous/):
# scripts of requests, each record [method][length, 2 bytes LE][request bytes],
# the requests encoded by protoc from text. Method numbers: fuzz_rendezvous.cc.
set -euo pipefail
cd "$(dirname "$0")"
out=corpus/rendezvous
mkdir -p "$out"
enc() {  # enc METHOD MESSAGE TEXT: one record on stdout
  local tmp; tmp=$(mktemp)
  printf '%s' "$3" | protoc --proto_path=../../proto --encode="meshrun.v1.$2" ../../proto/rendezvous.proto >"$tmp"
  local n; n=$(stat -c %s "$tmp")
  printf "\\x$(printf %02x "$1")\\x$(printf %02x $((n & 255)))\\x$(printf %02x $((n >> 8)))"
  cat "$tmp"; rm -f "$tmp"
}
R='run { run_id: "job" token: "fuzz-token" }'
CFG='config { min_nodes: 2 max_nodes: 2 last_call_timeout_ms: 100000 max_restarts: 1 exit_barrier_timeout_ms: 100000 }'
join() { enc 0 JoinRequest "$R node { node_id: \"$1\" hostname: \"h$1\" nproc: 4 node_rank_hint: -1 } $CFG last_round: -1"; }
watch() { enc 2 WatchRequest "$R node_id: \"$1\" known_round: -1"; }
{ watch a; watch b; join a; join b; enc 1 HeartbeatRequest "$R node_id: \"a\""
  enc 3 ReportFailureRequest "$R failure { node_id: \"a\" rank: 1 exit_code: 3 message: \"boom\" round: 0 }"
  join a; join b
  enc 4 ReportFinishedRequest "$R node_id: \"a\" round: 1 timeout_ms: 100000"
  enc 4 ReportFinishedRequest "$R node_id: \"b\" round: 1 timeout_ms: 100000"
  enc 14 StatusRequest "run { token: \"fuzz-token\" }"; } >"$out/two_nodes_restart"
{ watch a; watch b; join a; join b; enc 15 JoinRequest ""; printf '\x0f\x01\x00\x01'; } >"$out/node_lost"
{ enc 5 KvSetRequest "$R round: 0 key: \"k\" value: \"v\""
  enc 6 KvGetRequest "$R round: 0 key: \"k\""
  enc 6 KvGetRequest "$R round: 0 key: \"missing\" wait_ms: 100000"
  enc 7 KvAddRequest "$R round: 0 key: \"n\" delta: 5"
  enc 7 KvAddRequest "$R round: 0 key: \"n\" delta: -9"
  enc 8 KvCompareSetRequest "$R round: 0 key: \"k\" expected: \"v\" desired: \"w\""
  enc 9 KvCheckRequest "$R round: 0 keys: \"k\" keys: \"n\""
  enc 11 KvMultiGetRequest "$R round: 0 keys: \"k\" keys: \"x\" wait_ms: 100000 set_keys: \"x\" set_values: \"1\""
  enc 12 KvMultiSetRequest "$R round: 0 keys: \"a\" keys: \"b\" values: \"1\" values: \"2\""
  enc 13 KvWaitRequest "$R round: 0 keys: \"c\" wait_ms: 100000"
  enc 5 KvSetRequest "$R round: 0 key: \"c\" value: \"v\""
  enc 10 KvDeleteRequest "$R round: 0 key: \"k\""
  printf '\x0f\x01\x00\x00'; } >"$out/kv"
{ enc 5 KvSetRequest 'run { run_id: "job" token: "wrong" } key: "k"'
  enc 0 JoinRequest "$R node { node_id: \"a\" nproc: 0 } $CFG"; } >"$out/refused"
