#!/usr/bin/env bash
# Failures on real hosts, with the behaviour and messages the user guide
# states (docs/user-guide.md, "Liveness" and "Elastic membership"):
#   a host's link cut during a job, a host killed whole (kill -9 of every
#   process of its namespace), the server's host killed whole, and the
#   server host's meshrun stopped with SIGTERM. No process may be left.
# Usage: failures_test.sh SOURCE_DIR MESHRUN BUILD_DIR
set -u
SRC=$1 MESHRUN=$2 BUILD=$3
source "$SRC/tests/hosts/netns_hosts.sh"
source "$SRC/tests/hosts/e2e_lib.sh"
hosts_require
hosts_up 3 || exit 1
# Round 0 runs long enough for every loss to be noticed while it runs; a
# re-formed round finishes soon.
printf '#!/bin/sh\nif [ "$MESHRUN_ROUND" = 0 ]; then exec sleep 10; else exec sleep 1; fi\n' >"$HOSTS_DIR/w.sh"
chmod +x "$HOSTS_DIR/w.sh"
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# start_job NAME: an elastic 2:3 job on the 3 hosts, keep-alive 0.5 s x 3.
start_job() {
  local P i
  P=$(free_port)
  for i in 0 1 2; do
    launch "$i" "$1$i" -- --nnodes=2:3 --nproc_per_node=2 --rdzv_endpoint="host0:$P" --rdzv_id="$1" \
      --rdzv_conf=keep_alive_interval=0.5,keep_alive_max_attempt=3,last_call_timeout=1,join_timeout=20 "$HOSTS_DIR/w.sh"
  done
  # Running once every worker of round 0 is up (6 sleeps), bounded.
  for _ in $(seq 100); do [ "$(pgrep -fc "^sleep 10$")" -ge 6 ] && break; sleep 0.1; done
}

# expect_within NAME WANT_RC START_MS MAX_MS what
expect_within() {
  await "$1" 30
  local took=$(($(now_ms) - $3))
  if [ "$RC" = "$2" ] && [ "$took" -le "$4" ]; then ok "$5: exit $RC after ${took} ms (bound $4 ms)"
  else fail "$5: exit $RC after ${took} ms, want $2 within $4 ms"; show "$1"; fi
}

# 1. Link cut: the silent node is lost after keep_alive_interval x
#    keep_alive_max_attempt (1.5 s); the others re-form without it and
#    finish; the cut node loses the server (keepalive pings) and exits 1.
start_job cut
t0=$(now_ms); host_link 2 down
expect_within cut0 0 "$t0" 12000 "link cut: host0 re-forms and finishes"
expect_within cut1 0 "$t0" 12000 "link cut: host1 re-forms and finishes"
expect_within cut2 1 "$t0" 15000 "link cut: host2 loses the server"
expect_in cut0 "node host2 (node rank 2) was lost: no keep-alive for"
expect_in cut1 "re-forming (round 1)"
expect_in cut2 "lost the rendezvous server at host0:"
host_link 2 up

# 2. A host killed whole: its stream closes, the others re-form at once.
start_job kill
t0=$(now_ms); host_kill 2
expect_within kill0 0 "$t0" 8000 "host killed: host0 re-forms and finishes"
expect_within kill1 0 "$t0" 8000 "host killed: host1 re-forms and finishes"
await kill2 5
expect_in kill0 "node host2 (node rank 2) was lost: its agent disconnected; re-forming (round 1)"

# 3. The server's host killed whole: the others stop their workers and exit 1.
start_job server
t0=$(now_ms); host_kill 0
expect_within server1 1 "$t0" 8000 "server host killed: host1 stops"
expect_within server2 1 "$t0" 8000 "server host killed: host2 stops"
await server0 5
expect_in server1 "lost the rendezvous server at host0:"
expect_in server1 "the connection closed (the server's process or its host went away)"
expect_not_in server1 "re-forming"

# 4. The server host's meshrun gets SIGTERM: it shuts its server down first,
#    so the others say why and announce no re-form.
start_job term
t0=$(now_ms)
for pid in $(host_pids 0); do
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = meshrun ] && kill -TERM "$pid"
done
expect_within term0 143 "$t0" 8000 "server host's meshrun on SIGTERM"
expect_within term1 1 "$t0" 8000 "server host's meshrun on SIGTERM: host1 stops"
expect_within term2 1 "$t0" 8000 "server host's meshrun on SIGTERM: host2 stops"
expect_in term1 "the rendezvous server is shutting down: its meshrun on host0 received SIGTERM"
expect_not_in term1 "re-forming"
expect_not_in term2 "re-forming"
expect_no_processes
finish
