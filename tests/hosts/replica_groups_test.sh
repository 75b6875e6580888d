#!/usr/bin/env bash
# Replica groups on namespace hosts (issue 33): one job of 3 groups of 1 node each
# (--nnodes=3 --replica_groups=3) on host0..host2 (host0's meshrun hosts the server), and a
# standby on host3. host2, group 2's node, is killed whole (kill -9 of every process of its
# namespace): groups 0 and 1 run on with the workers they started (restart count 0, started
# once), the standby takes group 2's place and runs its worker, and once released every
# surviving agent exits 0. No process may be left.
# Usage: replica_groups_test.sh SOURCE_DIR MESHRUN BUILD_DIR
set -u
SRC=$1 MESHRUN=$2 BUILD=$3
source "$SRC/tests/hosts/netns_hosts.sh"
source "$SRC/tests/hosts/e2e_lib.sh"
source "$SRC/tests/support/wait_for.sh"
hosts_require
hosts_up 4 || exit 1
# A worker: "group host restart_count pid" to starts, then runs until release (at most 100 s).
cat >"$HOSTS_DIR/w.sh" <<'SH'
#!/bin/sh
echo "$REPLICA_GROUP_ID $(hostname) $TORCHELASTIC_RESTART_COUNT $$" >>"$DIR/starts"
i=0
while [ ! -e "$DIR/release" ] && [ "$i" -lt 1000 ]; do sleep 0.1; i=$((i + 1)); done
[ -e "$DIR/release" ]
SH
chmod +x "$HOSTS_DIR/w.sh"
P=$(free_port)
# join HOST WHAT TEXT: meshrun on HOST, waiting (20 s at most) until its output says TEXT.
join() {
  launch "$1" "h$1" DIR="$HOSTS_DIR" MESHRUN_LOG_LEVEL=info -- --nnodes=3 --replica_groups=3 --nproc_per_node=1 \
    --rdzv_endpoint="host0:$P" --rdzv_id=job --max_restarts=1 \
    --rdzv_conf=keep_alive_interval=0.5,keep_alive_max_attempt=3,join_timeout=30 "$HOSTS_DIR/w.sh"
  local says="grep -q '$3' $HOSTS_DIR/h$1"
  if wait_for 20 eval "$says"; then ok "host$1: $2"; else fail "host$1: $2 (not within 20 s)"; show "h$1"; fi
}
starts() { [ -f "$HOSTS_DIR/starts" ] && awk -v g="$1" '$1 == g' "$HOSTS_DIR/starts" | wc -l || echo 0; }
join 0 "group 0 (and the server)" "replica group 0 of 3"
join 1 "group 1" "replica group 1 of 3"
join 2 "group 2" "replica group 2 of 3"
join 3 "a standby" "stands by"
running() { (($(starts 0) == 1 && $(starts 1) == 1 && $(starts 2) == 1)); }
wait_for 20 running || { fail "the 3 groups' workers did not start within 20 s"; show h0; }

t0=$(now_ms)
host_kill 2 || fail "host2 could not be killed whole"
taken() { awk '$1 == 2 && $2 == "host3"' "$HOSTS_DIR/starts" | grep -q .; }
if wait_for 30 taken; then ok "the standby on host3 runs group 2's worker $(($(now_ms) - t0)) ms after host2's kill"
else fail "the standby did not run group 2's worker within 30 s of host2's kill"; show h3; fi
await h2 5
touch "$HOSTS_DIR/release"
for h in 0 1 3; do expect_rc "h$h" 0 30 "host$h's meshrun"; done
if (($(starts 0) == 1 && $(starts 1) == 1)) && ! awk '$1 < 2 && $3 != 0' "$HOSTS_DIR/starts" | grep -q .; then
  ok "groups 0 and 1 ran their first workers throughout (started once, restart count 0)"
else
  fail "groups 0 and 1 were disturbed: $(tr '\n' ';' <"$HOSTS_DIR/starts")"
fi
expect_in h3 "replica group 2 of 3"
expect_not_in h0 "re-forming"
expect_not_in h1 "re-forming"
expect_no_processes
finish
