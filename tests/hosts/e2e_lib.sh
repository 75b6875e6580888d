# shellcheck shell=bash
# e2e_lib.sh: helpers for the end-to-end tests that run meshrun on namespace
# hosts (tests/hosts/*_test.sh). Source after netns_hosts.sh:
#
#   SRC=<source dir> MESHRUN=<meshrun binary> BUILD=<build dir>
#   source "$SRC/tests/hosts/netns_hosts.sh"; source "$SRC/tests/hosts/e2e_lib.sh"
#   hosts_require; hosts_up 3 || exit 1
#   launch 0 out0 --nnodes=3 ... prog     # meshrun on host 0, output to $HOSTS_DIR/out0
#   await out0 60                         # RC=its exit code (124 after 60 s: then it is killed)
#   expect_in out0 "text"                 # FAIL unless the output has the text
#   expect_no_processes                   # FAIL if any host still runs a process
#   skip_part "what" "why"                # a part that cannot run here: named in the summary
#   finish                                # prints the summary line; exits 1 when anything
#                                         # failed, else 77 (CTest: skipped) when a part was
#                                         # skipped, else 0

FAILS=0
PASSES=0
SKIPPED_PARTS=()
declare -A E2E_PID

ok()   { PASSES=$((PASSES + 1)); echo "ok: $*"; }
fail() { FAILS=$((FAILS + 1)); echo "FAIL: $*"; }

# A free TCP port on 127.0.0.1 of the root namespace; namespaces have their
# own port spaces, so any port works there: this only varies it per run.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# launch HOST NAME [ENV=VAL ...] -- ARGS...: meshrun ARGS on HOST in the
# background, stdout+stderr to $HOSTS_DIR/NAME, bounded by 120 s.
launch() {
  local host=$1 name=$2; shift 2
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  on_host "$host" env "${envs[@]}" timeout -s KILL 120 "$MESHRUN" "$@" >"$HOSTS_DIR/$name" 2>&1 &
  E2E_PID[$name]=$!
}

# await NAME TIMEOUT_S: waits for launch NAME; sets RC to its exit code
# (124 when it ran past TIMEOUT_S; it is then killed). No subshell: `wait`
# needs the launching shell.
await() {
  local name=$1 limit=$2 pid=${E2E_PID[$1]} waited=0
  while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt $((limit * 10)) ]; do sleep 0.1; waited=$((waited + 1)); done
  if kill -0 "$pid" 2>/dev/null; then
    pkill -KILL -P "$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    RC=124
    return
  fi
  wait "$pid"
  RC=$?
}

# expect_rc NAME WANT TIMEOUT_S [what]
expect_rc() {
  await "$1" "$3"
  if [ "$RC" = "$2" ]; then ok "${4:-$1} exits $2"; else fail "${4:-$1} exits $RC, want $2"; show "$1"; fi
}

show() { echo "---- $1:"; sed 's/^/    /' "$HOSTS_DIR/$1" | tail -25; }

expect_in() {
  if grep -qF -- "$2" "$HOSTS_DIR/$1"; then ok "$1 says: $2"; else fail "$1 lacks: $2"; show "$1"; fi
}

expect_not_in() {
  if grep -qF -- "$2" "$HOSTS_DIR/$1"; then fail "$1 says: $2"; show "$1"; else ok "$1 does not say: $2"; fi
}

# Every host's namespace is empty (processes are counted for 5 s at most).
expect_no_processes() {
  local i n left=""
  for ((i = 0; i < HOSTS_N; i++)); do
    for _ in $(seq 50); do n=$(host_pids "$i" | wc -l); [ "$n" -eq 0 ] && break; sleep 0.1; done
    [ "$n" -eq 0 ] || left+=" host$i:$n"
  done
  if [ -z "$left" ]; then ok "no process left on any host"; else fail "processes left:$left"; fi
}

# The Python interpreter that has torch (Debian's python3-torch), or empty.
torch_python() {
  local py
  for py in "${TORCH_PYTHON:-}" /usr/bin/python3 python3; do
    [ -n "$py" ] && "$py" -c 'import torch' 2>/dev/null && { echo "$py"; return; }
  done
}

# api_of PYTHON: how tests/py/two_d_mesh.py builds its groups under PYTHON: device_mesh where
# PyTorch has init_device_mesh (2.2 and later), else new_group.
api_of() {
  if "$1" -c 'from torch.distributed.device_mesh import init_device_mesh' 2>/dev/null; then echo device_mesh
  else echo new_group; fi
}

# skip_part WHAT WHY: a part of the test that cannot run here (a missing tool). It is not a
# pass: finish lists it, and the test then shows as skipped in CTest, not as passed.
skip_part() {
  SKIPPED_PARTS+=("$1: $2")
  echo "skip: $1: $2"
}

finish() {
  local p
  if [ ${#SKIPPED_PARTS[@]} -gt 0 ]; then
    echo "$PASSES passed, $FAILS failed, ${#SKIPPED_PARTS[@]} skipped"
    for p in "${SKIPPED_PARTS[@]}"; do echo "  not run: $p"; done
  else
    echo "$PASSES passed, $FAILS failed"
  fi
  [ "$FAILS" -eq 0 ] || exit 1
  [ ${#SKIPPED_PARTS[@]} -eq 0 ] || exit 77
  exit 0
}
