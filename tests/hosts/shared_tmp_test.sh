#!/usr/bin/env bash
# Two hosts (network namespaces) that share /tmp, as containers and
# namespaces often do, each run the tutorial's exact command on the same
# port at the same time: both must host their own server and pass (hosting
# is decided per network namespace, never by a lock file in /tmp).
# Usage: shared_tmp_test.sh SOURCE_DIR MESHRUN BUILD_DIR
set -u
SRC=$1 MESHRUN=$2 BUILD=$3
source "$SRC/tests/hosts/netns_hosts.sh"
source "$SRC/tests/hosts/e2e_lib.sh"
hosts_require
hosts_up 2 || exit 1
printf '#!/bin/sh\necho "rank $RANK of $WORLD_SIZE on $(hostname)"\nsleep 2\n' >"$HOSTS_DIR/w.sh"
chmod +x "$HOSTS_DIR/w.sh"
[ "$(on_host 1 stat -c %i /tmp)" = "$(stat -c %i /tmp)" ] && ok "the hosts share /tmp" || fail "the hosts do not share /tmp"
for i in 0 1; do
  launch "$i" "job$i" -- --nnodes=1 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint=localhost:29400 --rdzv_id="job$i" \
    --rdzv_conf=read_timeout=20 "$HOSTS_DIR/w.sh"
done
for i in 0 1; do expect_rc "job$i" 0 40 "host$i (localhost:29400, shared /tmp)"; done
for i in 0 1; do expect_in "job$i" "rank 1 of 2 on host$i"; done

# Two meshruns in ONE namespace: the second does not host, says who does,
# and joins it.
launch 0 a MESHRUN_LOG_LEVEL=info -- --nnodes=2 --nproc_per_node=1 --rdzv_endpoint=localhost:29401 --rdzv_id=two "$HOSTS_DIR/w.sh"
launch 0 b MESHRUN_LOG_LEVEL=info -- --nnodes=2 --nproc_per_node=1 --rdzv_endpoint=localhost:29401 --rdzv_id=two "$HOSTS_DIR/w.sh"
expect_rc a 0 40 "first meshrun of one namespace"
expect_rc b 0 40 "second meshrun of one namespace"
if grep -q "hosts port 29401 on 127.0.0.1; joining it as a client" "$HOSTS_DIR/a" "$HOSTS_DIR/b"; then
  ok "the meshrun that does not host names the one that does"
else
  fail "no line names the hosting meshrun"; show a; show b
fi

# A port held by another program: the warning and the final error say so.
on_host 1 python3 -c 'import socket,time; s=socket.socket(); s.bind(("127.0.0.1",29402)); s.listen(); time.sleep(30)' &
hosts_wait_tcp 1 127.0.0.1 29402 10 || fail "the squatter did not listen"
launch 1 squat -- --nnodes=1 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=localhost:29402 --rdzv_id=s \
  --rdzv_conf=read_timeout=3 /bin/true
expect_rc squat 1 30 "meshrun against a port another program holds"
expect_in squat "could not host the server on port 29402"
host_kill 1
expect_no_processes
finish
