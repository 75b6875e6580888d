#!/usr/bin/env bash
# torchrun's agent store from PyTorch's side, with a real PyTorch:
#  1. tcpstore_ops.py, every TCPStore operation from PyTorch's own client,
#     run against PyTorch's own TCPStore server and against meshrun's agent
#     store: the same lines, every request type included (queues, the key
#     count and list).
#  2. agent_store_pg.py on 3 workers: init_process_group("gloo", env://)
#     through the agent store; no worker listens on MASTER_PORT.
#  3. agent_store_isolation.py: libmesh's keys are invisible through the
#     agent store; its keys are "torch/<key>" in meshrun's store.
# usage: agent_store_torch_test.sh MESHRUN PYTHON|torch2 STORE_KEYS   (0 pass, 1 fail, 77 skip)
#   torch2: the venv scripts/torch2-venv.sh makes ($MESHRUN_TORCH2_VENV, else
#   ~/.cache/meshrun-tests/torch-2.15.0)
set -uo pipefail
meshrun=$1 py=$2 store_keys=$3
[ "$py" = torch2 ] && py=${MESHRUN_TORCH2_VENV:-$HOME/.cache/meshrun-tests/torch-2.15.0}/bin/python
here="$(cd "$(dirname "$0")" && pwd)"
skip() { echo "skip: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
[ -x "$py" ] || skip "no $py (for PyTorch 2.x: bash scripts/torch2-venv.sh)"
"$py" -c 'import torch.distributed' 2>/dev/null || skip "$py has no torch.distributed"
version=$("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
timeout 120 "$py" "$here/tcpstore_ops.py" own >"$work/own" 2>"$work/own.err" || fail "against PyTorch's server: $(tail -n 3 "$work/own.err")"
timeout 120 "$meshrun" --standalone --nproc_per_node=1 --no_python "$py" "$here/tcpstore_ops.py" agent \
  >"$work/agent.raw" 2>"$work/agent.err" || fail "under meshrun: $(tail -n 5 "$work/agent.err")"
sed 's/^\[n0:r0\] //' "$work/agent.raw" >"$work/agent"
grep -qx done "$work/own" || fail "the run against PyTorch's server did not finish: $(tail -n 3 "$work/own")"
grep -qx done "$work/agent" || fail "the run under meshrun did not finish: $(tail -n 3 "$work/agent")"
if ! diff "$work/own" "$work/agent" >"$work/diff"; then
  echo "PyTorch $version: PyTorch's own server (<) and meshrun's agent store (>) answer differently:"
  cat "$work/diff"
  exit 1
fi
echo "PyTorch $version: $(grep -c ' -> ' "$work/agent") operations answered as PyTorch's own server answers them"

timeout 120 "$meshrun" --standalone --nproc_per_node=3 --no_python "$py" "$here/agent_store_pg.py" \
  >"$work/pg" 2>"$work/pg.err" || fail "init_process_group through the agent store: $(tail -n 5 "$work/pg.err"; tail -n 5 "$work/pg")"
n=$(grep -Ec '^\[n0:r[0-2]\] ok [0-2] 6$' "$work/pg")
[ "$n" = 3 ] || fail "expected 3 workers reporting 'ok RANK 6', got $n: $(cat "$work/pg")"
echo "PyTorch $version: init_process_group(env://) on 3 workers went through the agent store; no worker listens on MASTER_PORT"

timeout 120 "$meshrun" --standalone --nproc_per_node=1 --no_python "$py" "$here/agent_store_isolation.py" "$store_keys" \
  >"$work/iso" 2>"$work/iso.err" || fail "isolation: $(tail -n 5 "$work/iso.err"; tail -n 3 "$work/iso")"
grep -q '^\[n0:r0\] isolated$' "$work/iso" || fail "isolation: $(cat "$work/iso")"
echo "PyTorch $version: the agent store's clients see none of libmesh's keys; theirs are torch/<key> in meshrun's store"
