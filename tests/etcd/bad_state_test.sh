#!/usr/bin/env bash
# A bad `meshrun server --state` fails at start (issue 24, "Must work" 6, in part): one line on
# stderr naming the fault, exit 2, within a bound, for
#   - a wrong scheme (http://),
#   - an unreachable etcd (a port nothing listens on),
#   - etcds:// without --state_tls_ca,
#   - a reachable etcd spoken to over TLS while it speaks plain gRPC (a TLS mismatch).
# Not covered here: etcd's authentication refusing the user (tests/rendezvous/state/etcd/
# etcd_client_test.cc covers the client's message).
#
# usage: bad_state_test.sh MESHRUN_BINARY      (0 pass, 1 fail, 77 skip: no etcd)
set -uo pipefail
meshrun=$(readlink -f "${1:?usage: bad_state_test.sh MESHRUN_BINARY}")
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/etcd/etcd_cluster.sh
source "$here/etcd_cluster.sh"
etcd_require
work=$(mktemp -d /tmp/meshrun-bad-state-test.XXXXXX)
cleanup() { etcd_down; [[ $work == /tmp/meshrun-bad-state-test.* ]] && rm -rf -- "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# expect NAME PATTERN ARGS...: the server exits 2 within 15 s with one stderr line matching PATTERN.
expect() {
  local name=$1 pattern=$2 rc lines; shift 2
  timeout 15 "$meshrun" server --host 127.0.0.1 --port 0 "$@" >"$work/out" 2>"$work/err"
  rc=$?
  ((rc == 124)) && fail "$name: still running after 15 s"
  ((rc == 2)) || fail "$name: exit $rc (expected 2); stderr: $(cat "$work/err")"
  lines=$(grep -c . "$work/err")
  ((lines == 1)) || fail "$name: $lines lines on stderr (expected 1): $(cat "$work/err")"
  grep -Eq -e "$pattern" "$work/err" || fail "$name: stderr does not match '$pattern': $(cat "$work/err")"
  echo "$name: $(cat "$work/err")"
}

expect "wrong scheme" "--state.*http://" --state http://127.0.0.1:2379
expect "unreachable" "--state=etcd://127.0.0.1:[0-9]+.*(unreachable|refused)" --state "etcd://127.0.0.1:$(free_port)" --state_timeout 2
expect "etcds without a CA" "--state_tls_ca" --state etcds://127.0.0.1:2379
expect "load timeout not positive" "--state_load_timeout=0: must be > 0 seconds" --state etcd://127.0.0.1:2379 --state_load_timeout 0
expect "status timeout not positive" "--state_status_timeout=0: must be > 0 seconds" --state etcd://127.0.0.1:2379 --state_status_timeout 0
expect "renew interval past a third of the TTL" "--state_lease_renew_interval=1: must be at least 0.05 and at most a third of --state_lease_ttl \\(0.667 s\\)" --state etcd://127.0.0.1:2379 --state_lease_renew_interval 1
expect "renew interval zero" "--state_lease_renew_interval=0: must be at least 0.05" --state etcd://127.0.0.1:2379 --state_lease_renew_interval 0
expect "write queue bound not positive" "--state_max_queued_writes=0: must be at least" --state etcd://127.0.0.1:2379 --state_max_queued_writes 0
expect "write size bound too small" "--state_max_write_bytes=10: must be at least 1024 bytes" --state etcd://127.0.0.1:2379 --state_max_write_bytes 10
etcd_up 1 || fail "etcd did not come up"
trap cleanup EXIT

# A TLS client against plain etcd needs a CA file: any readable PEM CA will do for the mismatch.
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$work/ca.key" -out "$work/ca.crt" -days 1 -subj /CN=test-ca \
  >/dev/null 2>&1 || { echo "PASS (the TLS mismatch left out: no openssl)"; exit 0; }
expect "TLS mismatch" "--state=etcds://.*(TLS|tls|handshake|plain)" --state "etcds://$(etcd_endpoints)" \
  --state_tls_ca "$work/ca.crt" --state_timeout 2
echo "PASS: every bad --state failed at start with one line and exit 2"
