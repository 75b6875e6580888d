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
  await_round0 "$1"
}

# await_round0 NAME: every host runs its 2 workers of round 0 (each host's own
# namespace is counted, so no stray process elsewhere can stand in for a
# host that has not joined yet), within 10 s; else the test fails here.
await_round0() {
  local i p n _
  for _ in $(seq 100); do
    for i in 0 1 2; do
      n=0
      for p in $(host_pids "$i"); do
        [ "$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)" = "sleep 10 " ] && n=$((n + 1))
      done
      [ "$n" -ge 2 ] || break
    done
    [ "$i" = 2 ] && [ "$n" -ge 2 ] && return 0
    sleep 0.1
  done
  fail "job $1: round 0 does not run 2 workers on each of the 3 hosts after 10 s"
  show "${1}0"; show "${1}1"; show "${1}2"
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

# 5. Two hosts killed at once in a 1:3 job: the survivor names both and
#    finishes alone (the re-form does not wait for the second).
start_job2() {
  local P i
  P=$(free_port)
  for i in 0 1 2; do
    launch "$i" "$1$i" -- --nnodes="$2" --nproc_per_node=2 --rdzv_endpoint="host0:$P" --rdzv_id="$1" \
      --rdzv_conf=keep_alive_interval=0.5,keep_alive_max_attempt=3,last_call_timeout=1,join_timeout=20 "$HOSTS_DIR/w.sh"
  done
  await_round0 "$1"
}
start_job2 two 1:3
t0=$(now_ms); host_kill 1 & host_kill 2 & wait %1 %2 2>/dev/null
expect_within two0 0 "$t0" 8000 "two hosts killed at once: host0 finishes alone"
await two1 5; await two2 5
expect_in two0 "was lost: its agent disconnected; re-forming (round 1)"
# (Each is named once: in the re-form it was lost from, or "too" while the
# round re-forms; which one depends on how far apart the two kills land.)
if grep -q "node host1 (node rank [0-9].*was lost" "$HOSTS_DIR/two0" &&
   grep -q "node host2 (node rank [0-9].*was lost" "$HOSTS_DIR/two0"; then
  ok "both lost hosts are named"
else
  fail "not both lost hosts are named"; show two0; show two1; show two2
fi

# 6. A join timeout: 2 of 3 nodes come; every node reports the same count.
P=$(free_port)
for i in 0 1; do
  launch "$i" "jt$i" -- --nnodes=3 --nproc_per_node=1 --rdzv_endpoint="host0:$P" --rdzv_id=jt \
    --rdzv_conf=join_timeout=$((2 + i)) /bin/true
done
for i in 0 1; do expect_rc "jt$i" 1 20 "join timeout on host$i"; done
for i in 0 1; do expect_in "jt$i" "waiting for nodes to join run 'jt' at host0:$P: 2 of 3 nodes joined"; done

# 7. A node started before the endpoint's host says what it waits for, and
#    the job passes once the host comes.
P=$(free_port)
launch 1 late1 -- --nnodes=2 --nproc_per_node=1 --rdzv_endpoint="host0:$P" --rdzv_id=late --rdzv_conf=read_timeout=30 /bin/true
sleep 6.5
launch 0 late0 -- --nnodes=2 --nproc_per_node=1 --rdzv_endpoint="host0:$P" --rdzv_id=late /bin/true
for i in 0 1; do expect_rc "late$i" 0 30 "late endpoint host: host$i"; done
expect_in late1 "waiting for the rendezvous server at host0:$P"
expect_no_processes
finish
