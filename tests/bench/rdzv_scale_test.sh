#!/usr/bin/env bash
# bench/rdzv_scale at a small N: its phases complete against a real
# `meshrun server`, the CSV has a row per run (meshrun and torchrun's c10d),
# the plot script draws it, and the hook for the workers' phase refuses
# plainly until the store proxy exists.
# Usage: rdzv_scale_test.sh RDZV_SCALE_BINARY SOURCE_DIR
set -u
BIN=$1 SRC=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
ok() { echo "ok: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# The torchrun side needs Debian's PyTorch; without it only meshrun runs.
C10D=8
/usr/bin/python3 -c "import torch" 2>/dev/null || C10D=""
timeout 240 "$BIN" --agents 64,128 --runs 1 --c10d_agents "$C10D" --c10d_timeout 60 --csv "$T/r.csv" \
  --table "$T/r.md" --work_dir "$T/logs" --settle 2.5 --steady_wait 0.5 >"$T/out" 2>"$T/err"
rc=$?
if [ $rc = 0 ]; then ok "64 and 128 agents: exit 0"; else fail "exit $rc"; cat "$T/err"; fi
for n in 64 128; do
  if grep -q "^meshrun,$n,1,1," "$T/r.csv"; then ok "N=$n complete in the CSV"; else fail "no complete row for N=$n"; fi
done
if [ -n "$C10D" ]; then
  if grep -q "^torchrun_c10d,8,1," "$T/r.csv"; then ok "a c10d row"; else fail "no c10d row"; cat "$T/r.csv"; fi
fi
grep -q "first Join -> all assignments" "$T/r.md" && ok "the table is written" || fail "no table"
# Each simulated agent had a connection of its own: the server's sockets at
# the end of the join phase are N plus its listeners.
socks=$(awk -F, 'NR==1{for(i=1;i<=NF;i++) if ($i=="sockets_joined") c=i} $2==128 && $1=="meshrun"{print $c}' "$T/r.csv")
if [ -n "$socks" ] && [ "$socks" -ge 128 ]; then ok "128 agents, $socks server sockets"; else fail "server sockets: '$socks'"; fi

if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  /usr/bin/python3 "$SRC/bench/rdzv_scale/plot.py" "$T/r.csv" "$T/r.png" >/dev/null && [ -s "$T/r.png" ] &&
    ok "plot drawn" || fail "plot.py failed"
fi

out=$("$BIN" --workers_per_agent 8 2>&1); rc=$?
if [ $rc = 2 ] && echo "$out" | grep -q "needs the store proxy"; then ok "workers phase: refused until the store proxy exists"
else fail "workers phase: exit $rc: $out"; fi
out=$("$BIN" --agents 64,x 2>&1); rc=$?
if [ $rc = 2 ] && echo "$out" | grep -q "'x' is not a positive integer"; then ok "a bad --agents is named"
else fail "bad --agents: exit $rc: $out"; fi
# Nothing it started is left running.
sleep 0.5
if pgrep -f -- "--run_id rdzv-scale-n128-run1-" >/dev/null; then fail "load processes left"; else ok "no load process left"; fi
exit $((fails > 0))
