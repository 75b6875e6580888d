#!/usr/bin/env bash
# shellcheck disable=SC2016,SC2317  # (code in single quotes runs later; functions run via check)
# Smoke test of the network-namespace hosts fixture (tests/hosts/netns_hosts.sh).
# Usage: fixture_test.sh [SOURCE_DIR]. Exit 0: all ok; 77: cannot run here (not root, no
# namespaces); anything else: a failure (see the FAIL lines).
set -uo pipefail

SRC=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
LIB=$SRC/tests/hosts/netns_hosts.sh
# shellcheck source=netns_hosts.sh
source "$LIB"
hosts_require
for tool in ping getent timeout python3; do
  command -v "$tool" >/dev/null 2>&1 || { echo "SKIP: '$tool' not found"; exit 77; }
done

T0=$EPOCHREALTIME
OUT=$(mktemp -d /tmp/meshrun-fixture-test.XXXXXX)
child=
on_outer_signal() {
  [[ -n $child ]] && kill -TERM "$child" 2>/dev/null && wait "$child"
  exit "$1"
}
trap 'rm -rf "$OUT"' EXIT
trap 'on_outer_signal 130' INT
trap 'on_outer_signal 143' TERM

ok() { echo "ok   - $*"; }
fail() { echo "FAIL - $*"; echo "$*" >>"$OUT/failures"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else fail "$what"; fi; }
quiet() { "$@" >/dev/null 2>&1; }
# A process that exists and is not a zombie.
alive() { [[ -e /proc/$1 ]] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }
# wait_until TRIES 'SHELL CODE': wait (TRIES x 0.1 s at most) until the code succeeds; it is
# evaluated afresh each time, so quote it.
wait_until() { local tries=$1; shift; while ((tries-- > 0)); do eval "$*" && return 0; sleep 0.1; done; return 1; }
ns_of_lease() { ip netns list | awk -v k="$1" '$1 ~ ("^mr" k "(h[0-9]+|sw)$") {print $1}'; }
# Hold the fixture's lease lock (the one hosts_up takes its lease under) from before a lease is
# freed until it has been checked: a hosts test running beside this one (ctest -j) would
# otherwise take the freed lease, and its namespace names, in between.
LEASE_LOCK_FD=
lease_lock() {
  exec {LEASE_LOCK_FD}>"$HOSTS_LEASE_ROOT/.lock" && flock -w 30 "$LEASE_LOCK_FD" && return 0
  fail "could not take $HOSTS_LEASE_ROOT/.lock within 30 s"; return 1
}
lease_unlock() { [[ -n $LEASE_LOCK_FD ]] && exec {LEASE_LOCK_FD}>&-; LEASE_LOCK_FD=; }

# A helper process that takes hosts (a separate bash, its own lease; run it with & and $! is
# that bash).
# $1: name, $2: N, then a bash snippet to run after hosts_up.
helper() {
  local name=$1 n=$2 body=$3
  exec bash -c 'set -u; source "$1"; hosts_up "$2" || exit 1
           echo "$HOSTS_LEASE $HOSTS_SUBNET" >"$3/$4.lease"; '"$body" \
    _ "$LIB" "$n" "$OUT" "$name"
}

# ---------------------------------------------------------------------------------------------
# The fixture proper runs in a subshell; everything it leaves behind is checked from outside.
fixture() {
  hosts_up 3 --debian-hosts --decoy-iface || { fail "hosts_up 3 --debian-hosts --decoy-iface"; exit 1; }
  ok "hosts_up 3 --debian-hosts --decoy-iface (lease $HOSTS_LEASE, subnet $HOSTS_SUBNET)"
  echo "$HOSTS_LEASE" >"$OUT/lease"
  echo "$HOSTS_DIR" >"$OUT/dir"

  check "globals set" test "$HOSTS_N" = 3 -a "${HOSTS_NAME[2]}" = host2 -a "${HOSTS_IF[0]}" = eth0 \
    -a "${HOSTS_V4[1]}" = "$HOSTS_SUBNET.11" -a "${HOSTS_NS[1]}" = "mr${HOSTS_LEASE}h1"
  check "HOSTS_DIR is a 0755 directory" test -d "$HOSTS_DIR" -a "$(stat -c %a "$HOSTS_DIR")" = 755

  local i
  for i in 0 1 2; do
    check "hostname on host$i" test "$(on_host "$i" hostname)" = "host$i"
  done
  check "host1 pings host2 by name (IPv4)" quiet on_host 1 ping -4 -c1 -W2 host2
  check "host1 pings host0's IPv6 address ${HOSTS_V6[0]}" quiet on_host 1 ping -6 -c1 -W2 "${HOSTS_V6[0]}"
  local own other
  own=$(on_host 0 getent hosts host0 | awk '{print $1; exit}')
  check "on host0, host0 is 127.0.1.1 (the Debian trap; got '$own')" test "$own" = 127.0.1.1
  other=$(on_host 1 getent ahostsv4 host0 | awk '{print $1; exit}')
  check "from host1, host0 is ${HOSTS_V4[0]} (got '$other')" test "$other" = "${HOSTS_V4[0]}"
  other=$(on_host 1 getent ahostsv6 host0 | awk '{print $1; exit}')
  check "from host1, host0's IPv6 is ${HOSTS_V6[0]} (got '$other')" test "$other" = "${HOSTS_V6[0]}"

  local addrs decoy_line eth_line
  addrs=$(on_host 0 ip -o -4 addr show)
  decoy_line=$(grep -n ' decoy0 .*inet 172\.17\.0\.1/16' <<<"$addrs" | cut -d: -f1)
  eth_line=$(grep -n " eth0 .*inet ${HOSTS_V4[0]}/24" <<<"$addrs" | cut -d: -f1)
  check "host0 lists decoy0 172.17.0.1/16 before eth0" \
    test -n "$decoy_line" -a -n "$eth_line" -a "${decoy_line:-0}" -lt "${eth_line:-0}"
  check "decoy0 is up" bash -c '[[ $(ip -n "$0" -o link show decoy0) == *"<"*UP*">"* ]]' "${HOSTS_NS[0]}"
  check "host1 cannot reach the decoy 172.17.0.1" eval '! on_host 1 ping -c1 -W1 172.17.0.1 >/dev/null 2>&1'

  host_link 1 down
  check "host_link 1 down: host0 cannot ping host1" eval '! on_host 0 ping -4 -c1 -W1 host1 >/dev/null'
  host_link 1 up
  check "host_link 1 up: host0 pings host1 again" \
    wait_until 3 'quiet on_host 0 ping -4 -c1 -W2 host1'

  on_host 2 sleep 1000 &
  local bg=$! spid
  wait_until 30 'test -n "$(host_pids 2)"'
  spid=$(host_pids 2 | head -n1)
  check "sleep 1000 runs on host2 (pid ${spid:-none})" test -n "$spid"
  check "host_kill 2" host_kill 2
  check "host_pids 2 is empty after host_kill" test -z "$(host_pids 2)"
  wait "$bg" 2>/dev/null
  check "the sleep is gone" eval '! alive "${spid:-0}"'

  # (python3 is required above: the listener.)
  on_host 2 python3 -c 'import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 29511)); s.listen(); time.sleep(30)' &
  check "hosts_wait_tcp 0 ${HOSTS_V4[2]} 29511 10 (a listener on host2)" \
    hosts_wait_tcp 0 "${HOSTS_V4[2]}" 29511 10
  local t=$EPOCHREALTIME
  check "hosts_wait_tcp on a closed port returns 1 after its timeout" \
    eval '! hosts_wait_tcp 0 "${HOSTS_V4[1]}" 29512 1'
  check "... within ~1 s" test $(((${EPOCHREALTIME/./} - ${t/./}) / 1000)) -lt 3000
  host_kill 2

  # Two fixtures in parallel processes: different leases (and different from ours). Each
  # exits once both have theirs and this shell holds the lease lock.
  helper par1 1 'for _ in $(seq 300); do [[ -e $3/par.go ]] && break; sleep 0.1; done' &
  local p1=$!
  helper par2 1 'for _ in $(seq 300); do [[ -e $3/par.go ]] && break; sleep 0.1; done' &
  local p2=$!
  wait_until 300 'test -s "$OUT/par1.lease" -a -s "$OUT/par2.lease" || ! alive $p1 || ! alive $p2'
  lease_lock
  touch "$OUT/par.go"
  wait "$p1"; local r1=$?
  wait "$p2"; local r2=$?
  local l1 l2
  l1=$(cat "$OUT/par1.lease" 2>/dev/null) l2=$(cat "$OUT/par2.lease" 2>/dev/null)
  check "two parallel hosts_up succeed (rc $r1, $r2)" test "$r1" = 0 -a "$r2" = 0
  check "they get different subnets ('${l1#* }', '${l2#* }', ours $HOSTS_SUBNET)" \
    test -n "$l1" -a -n "$l2" -a "${l1#* }" != "${l2#* }" -a "${l1#* }" != "$HOSTS_SUBNET" -a "${l2#* }" != "$HOSTS_SUBNET"
  check "their EXIT traps freed their leases" \
    test ! -e "$HOSTS_LEASE_ROOT/${l1%% *}" -a ! -e "$HOSTS_LEASE_ROOT/${l2%% *}" \
    -a -z "$(ns_of_lease "${l1%% *}")" -a -z "$(ns_of_lease "${l2%% *}")"
  lease_unlock

  # SIGTERM to a test shell that waits on a host process: it exits 143 through hosts_down.
  helper term 1 'on_host 0 sleep 1000 & wait' &
  local pt=$! lt
  wait_until 50 'test -s "$OUT/term.lease"'
  lt=$(cat "$OUT/term.lease" 2>/dev/null)
  wait_until 30 'test -n "$(ip netns pids "mr${lt%% *}h0" 2>/dev/null)"'
  lease_lock
  kill -TERM "$pt"
  wait "$pt"; local rt=$?
  check "SIGTERM: the test shell exits 143 (got $rt)" test "$rt" = 143
  check "SIGTERM: its namespaces, processes and lease are gone" \
    test -n "$lt" -a -z "$(ns_of_lease "${lt%% *}")" -a ! -e "$HOSTS_LEASE_ROOT/${lt%% *}"
  lease_unlock

  # Leave processes behind for the teardown: a plain one, and one that ignores SIGTERM.
  on_host 0 sleep 1000 &
  on_host 1 sh -c 'trap "" TERM; sleep 1000' &
  wait_until 30 'test "$(host_pids 1 | wc -l)" -ge 2 -a -n "$(host_pids 0)"'
  { host_pids 0; host_pids 1; } >"$OUT/pids"
  check "processes left for the teardown: $(tr '\n' ' ' <"$OUT/pids")" test "$(wc -l <"$OUT/pids")" -ge 3

  # The last teardown: once the shell outside holds the lease lock (it checks our lease).
  touch "$OUT/down.ready"
  wait_until 600 'test -e "$OUT/down.go"'
  hosts_down 2>"$OUT/down.err"
  cat "$OUT/down.err" >&2
  check "hosts_down reports the process that ignored SIGTERM" grep -q 'SIGKILL' "$OUT/down.err"
  check "hosts_down a second time is a no-op" hosts_down
}

( fixture ) &
child=$!
wait_until 3000 'test -e "$OUT/down.ready" || ! alive $child'
lease_lock
touch "$OUT/down.go"
wait "$child"
rc=$?
child=
[[ $rc == 0 ]] || fail "the fixture subshell exited $rc"

# ---------------------------------------------------------------------------------------------
# From outside: nothing of the fixture's lease is left.
k=$(cat "$OUT/lease" 2>/dev/null)
if [[ -n $k ]]; then
  check "no namespace of lease $k is left" test -z "$(ns_of_lease "$k")"
  check "no /etc/netns/mr${k}* dir is left" bash -c 'shopt -s nullglob; a=(/etc/netns/mr"$0"h[0-9]* /etc/netns/mr"$0"s[w]); ((${#a[@]} == 0))' "$k"
  check "the lease dir is gone" test ! -e "$HOSTS_LEASE_ROOT/$k"
  check "the scratch dir is gone" test ! -e "$(cat "$OUT/dir")"
  left=()
  while read -r p; do alive "$p" && left+=("$p"); done <"$OUT/pids"
  check "no process of the fixture is left (${left[*]:-none})" test "${#left[@]}" = 0
else
  fail "the fixture never reported its lease"
fi
lease_unlock

secs=$(((${EPOCHREALTIME/./} - ${T0/./}) / 1000))
if [[ -s $OUT/failures ]]; then
  echo "FAILED: $(wc -l <"$OUT/failures") check(s) (${secs} ms)"
  exit 1
fi
echo "PASSED (${secs} ms)"
exit 0
