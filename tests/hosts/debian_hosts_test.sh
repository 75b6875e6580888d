#!/usr/bin/env bash
# Two common cluster set-ups that broke the address choice: Debian's hosts
# file (each host's own name is 127.0.1.1) with peers on 192.168.x, and a
# first interface on the endpoint's host that nobody reaches (a docker0-like
# 172.17.0.1). libmesh's Gloo and PyTorch's Gloo (tests/py/two_d_mesh.py) must both pass; MASTER_ADDR
# must be the address the other host reaches; an explicit --local_addr that
# resolves to loopback is refused with a clear message.
# Usage: debian_hosts_test.sh SOURCE_DIR MESHRUN BUILD_DIR
set -u
SRC=$1 MESHRUN=$2 BUILD=$3
source "$SRC/tests/hosts/netns_hosts.sh"
source "$SRC/tests/hosts/e2e_lib.sh"
hosts_require
hosts_up 2 --debian-hosts --decoy-iface || exit 1
on_host 0 getent hosts host0 | grep -q '^127.0.1.1' && ok "host0 resolves its own name to 127.0.1.1 (Debian)" \
  || fail "the fixture's Debian hosts file is not in effect"

P=$(free_port); common=(--nnodes=2 --rdzv_endpoint="host0:$P" --rdzv_conf=join_timeout=60)
for i in 0 1; do launch "$i" "tcp$i" PYTHON_EXEC=python3 -- "${common[@]}" --nproc_per_node=2 --rdzv_id=tcp "$SRC/tests/hosts/tcp_check.py"; done
for i in 0 1; do expect_rc "tcp$i" 0 60 "host$i (TCP check)"; done
expect_in tcp1 "rank=2 host=host1 master=${HOSTS_V4[0]} node_addr=${HOSTS_V4[1]} gloo_ifname=eth0"
expect_in tcp0 "rank=0 host=host0 master=${HOSTS_V4[0]} node_addr=${HOSTS_V4[0]} gloo_ifname=eth0"

P=$(free_port); common=(--nnodes=2 --rdzv_endpoint="host0:$P" --rdzv_conf=join_timeout=60)
for i in 0 1; do launch "$i" "mesh$i" -- "${common[@]}" --nproc_per_node=4 --rdzv_id=mesh "$BUILD/examples/two_d_setup"; done
for i in 0 1; do expect_rc "mesh$i" 0 60 "host$i (libmesh two_d_setup 2x4)"; done

py=$(torch_python)
if [ -z "$py" ]; then
  skip_part "the 2-D PyTorch mesh (PyTorch's Gloo)" "no python3 with torch (install python3-torch)"
else
  P=$(free_port); common=(--nnodes=2 --rdzv_endpoint="host0:$P" --rdzv_conf=join_timeout=60)
  for i in 0 1; do launch "$i" "torch$i" PYTHON_EXEC="$py" -- "${common[@]}" --nproc_per_node=2 --rdzv_id=torch "$SRC/tests/py/two_d_mesh.py"; done
  for i in 0 1; do expect_rc "torch$i" 0 90 "host$i (two_d_mesh.py, PyTorch's Gloo)"; done
  for r in 0 1 2 3; do expect_in "torch$((r / 2))" "rank=$r api="; done
  expect_in torch1 "coords=(1, 1) shard_sum=5 replicate_sum=4 OK"
fi

# --local_addr=host0 is 127.0.1.1 on host0: refused on every node, at once.
P=$(free_port); common=(--nnodes=2 --rdzv_endpoint="host0:$P" --rdzv_conf=join_timeout=60)
launch 0 la0 -- "${common[@]}" --nproc_per_node=1 --rdzv_id=la --local_addr=host0 /bin/true
launch 1 la1 -- "${common[@]}" --nproc_per_node=1 --rdzv_id=la /bin/true
for i in 0 1; do expect_rc "la$i" 1 20 "host$i (--local_addr=host0 on host0)"; done
expect_in la1 "its advertised address host0 is the loopback address 127.0.1.1"
expect_in la1 "(a node's advertised address is its --local_addr)"
expect_no_processes
finish
