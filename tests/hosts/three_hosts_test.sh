#!/usr/bin/env bash
# 3 hosts x 4 workers, endpoint by name: ranks by node order, every rank
# reaches MASTER_ADDR (a TCP check from every host), a 2-D PyTorch mesh
# (tests/py/two_d_mesh.py, PyTorch's Gloo) and the libmesh examples.
# Usage: three_hosts_test.sh SOURCE_DIR MESHRUN BUILD_DIR
set -u
SRC=$1 MESHRUN=$2 BUILD=$3
source "$SRC/tests/hosts/netns_hosts.sh"
source "$SRC/tests/hosts/e2e_lib.sh"
hosts_require
hosts_up 3 || exit 1
P=$(free_port)
common=(--nnodes=3 --rdzv_endpoint="host0:$P" --rdzv_conf=join_timeout=60)

# 1. Ranks and reachability of MASTER_ADDR from every host.
for i in 0 1 2; do
  launch "$i" "tcp$i" PYTHON_EXEC=python3 -- "${common[@]}" --nproc_per_node=4 --rdzv_id=tcp "$SRC/tests/hosts/tcp_check.py"
done
for i in 0 1 2; do expect_rc "tcp$i" 0 60 "host$i (TCP check)"; done
for i in 0 1 2; do
  for lr in 0 1 2 3; do expect_in "tcp$i" "rank=$((4 * i + lr)) host=host$i master=${HOSTS_V4[0]} node_addr=${HOSTS_V4[$i]} gloo_ifname=eth0"; done
done
expect_in tcp2 "rank=11 reached master"

# The same over IPv6, endpoint by address.
P=$(free_port)
for i in 0 1 2; do
  launch "$i" "v6$i" PYTHON_EXEC=python3 -- --nnodes=3 --rdzv_endpoint="[${HOSTS_V6[0]}]:$P" --rdzv_conf=join_timeout=60 \
    --nproc_per_node=1 --rdzv_id=v6 "$SRC/tests/hosts/tcp_check.py"
done
for i in 0 1 2; do expect_rc "v6$i" 0 60 "host$i (IPv6 endpoint)"; done
expect_in v62 "rank=2 host=host2 master=${HOSTS_V6[0]} node_addr=${HOSTS_V6[2]}"

# 2. The libmesh examples on a (3, 4) mesh and a (3, 2, 2) one (hsdp's batch of
#    32 does not split over 12 ranks; debian_hosts_test.sh runs two_d_setup too).
P=$(free_port); common=(--nnodes=3 --rdzv_endpoint="host0:$P" --rdzv_conf=join_timeout=60)
for i in 0 1 2; do launch "$i" "mesh$i" -- "${common[@]}" --nproc_per_node=4 --rdzv_id=mesh "$BUILD/examples/two_d_setup" --shape 3,4; done
for i in 0 1 2; do expect_rc "mesh$i" 0 60 "host$i (two_d_setup 3x4)"; done
P=$(free_port); common=(--nnodes=3 --rdzv_endpoint="host0:$P" --rdzv_conf=join_timeout=60)
for i in 0 1 2; do launch "$i" "slice$i" -- "${common[@]}" --nproc_per_node=4 --rdzv_id=slice "$BUILD/examples/three_d_slicing" --shape 3,2,2; done
for i in 0 1 2; do expect_rc "slice$i" 0 60 "host$i (three_d_slicing 3x2x2)"; done

# 3. A 2-D PyTorch mesh with PyTorch's own Gloo, 3 hosts x 2 workers: a (3, 2) mesh, one shard
#    group per host, replicate groups across the three.
py=$(torch_python)
if [ -z "$py" ]; then
  skip_part "the 2-D PyTorch mesh (PyTorch's Gloo)" "no python3 with torch (install python3-torch)"
else
  P=$(free_port); common=(--nnodes=3 --rdzv_endpoint="host0:$P" --rdzv_conf=join_timeout=60)
  for i in 0 1 2; do launch "$i" "torch$i" PYTHON_EXEC="$py" -- "${common[@]}" --nproc_per_node=2 --rdzv_id=torch "$SRC/tests/py/two_d_mesh.py" --rows=3; done
  for i in 0 1 2; do expect_rc "torch$i" 0 90 "host$i (two_d_mesh.py --rows=3)"; done
  for r in 0 1 2 3 4 5; do
    expect_in "torch$((r / 2))" "rank=$r api=$(api_of "$py") mesh=3x2 coords=($((r / 2)), $((r % 2))) shard_sum=$((4 * (r / 2) + 1)) replicate_sum=$((3 * (r % 2) + 6)) OK"
  done
fi
expect_no_processes
finish
