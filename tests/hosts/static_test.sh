#!/usr/bin/env bash
# torchrun's classic multi-node command (static backend by default: endpoint
# --master_addr:--master_port, node rank from --node_rank) and Kubeflow's
# PET_* variables with a bare `meshrun prog`, across 2 hosts; and a script
# that builds tcp://MASTER_ADDR:<--master_port> itself, as under torchrun 2.x.
# Usage: static_test.sh SOURCE_DIR MESHRUN BUILD_DIR
set -u
SRC=$1 MESHRUN=$2 BUILD=$3
source "$SRC/tests/hosts/netns_hosts.sh"
source "$SRC/tests/hosts/e2e_lib.sh"
hosts_require
hosts_up 2 --debian-hosts || exit 1
P=$(free_port)
for i in 0 1; do
  launch "$i" "classic$i" PYTHON_EXEC=python3 -- --nnodes=2 --nproc_per_node=2 --node_rank="$i" --master_addr=host0 \
    --master_port="$P" "$SRC/tests/hosts/tcp_check.py"
done
for i in 0 1; do expect_rc "classic$i" 0 60 "host$i (classic static form)"; done
expect_in classic1 "rank=2 host=host1 master=${HOSTS_V4[0]}"
expect_in classic1 "rank=3 reached master"

# Kubeflow's torch runtime: PET_* variables, node 1 started first.
P=$(free_port)
for i in 1 0; do
  launch "$i" "pet$i" PET_NNODES=2 PET_NPROC_PER_NODE=2 PET_NODE_RANK="$i" PET_MASTER_ADDR=host0 PET_MASTER_PORT="$P" \
    PYTHON_EXEC=python3 -- "$SRC/tests/hosts/tcp_check.py"
  sleep 0.3
done
for i in 0 1; do expect_rc "pet$i" 0 60 "host$i (PET_* variables, bare command)"; done
expect_in pet1 "rank=3 host=host1 master=${HOSTS_V4[0]}"

# An old tutorial's script that builds tcp://MASTER_ADDR:<--master_port>
# itself: as under torchrun 2.x, --master_port is node rank 0's agent store.
py=$(torch_python)
if [ -z "$py" ]; then
  skip_part "tcp://MASTER_ADDR:<--master_port> from PyTorch" "no python3 with torch (install python3-torch)"
else
  P=$(free_port)
  for i in 1 0; do
    launch "$i" "tcp$i" PYTHON_EXEC="$py" -- --nnodes=2 --nproc_per_node=2 --node_rank="$i" --master_addr=host0 \
      --master_port="$P" "$SRC/tests/hosts/tcp_init.py" "$P"
  done
  for i in 0 1; do expect_rc "tcp$i" 0 90 "host$i (tcp://MASTER_ADDR:--master_port, PyTorch's Gloo)"; done
  for r in 0 1 2 3; do expect_in "tcp$((r / 2))" "tcp_init rank=$r sum=10 master_port=$P"; done
fi
expect_no_processes
finish
