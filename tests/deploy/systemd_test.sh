#!/usr/bin/env bash
# deploy/systemd/meshrun-server.service: a valid, hardened unit whose ExecStart works.
#
#   1. The unit has what the deployment needs (hardening, its own user, LimitNOFILE, restart,
#      the token from /etc/meshrun/server.env, the TLS certificate and key through
#      LoadCredential=, the health and metrics ports) and server.env.example the token.
#   2. systemd-analyze verify prints nothing for it (the binary path pointed at the build);
#      a copy with a misspelled directive makes it complain (the check can fail);
#      systemd-analyze security --offline rates its exposure at most 3.0 ("OK").
#   3. ExecStart, as written (only the binary and the ports replaced: the built meshrun, port 0
#      and --port_file), runs as an unprivileged user without new privileges, with the
#      environment file's variables and the credentials systemd would load (certificates
#      made here, in a $CREDENTIALS_DIRECTORY): it serves TLS, a meshrun with the file's token
#      and the CA runs a job through it, wrong and missing tokens are refused, the plaintext
#      health port answers SERVING (as a Kubernetes gRPC probe asks), the metrics port
#      answers, SIGTERM stops it with 0.
#
# usage: systemd_test.sh SOURCE_DIR MESHRUN_BINARY HEALTH_PROBE   (0 pass, 1 fail, 77 skip)
set -uo pipefail

src=$(cd "${1:?usage: systemd_test.sh SOURCE_DIR MESHRUN_BINARY}" && pwd)
meshrun=$(readlink -f "${2:?usage: systemd_test.sh SOURCE_DIR MESHRUN_BINARY HEALTH_PROBE}")
probe=$(readlink -f "${3:?usage: systemd_test.sh SOURCE_DIR MESHRUN_BINARY HEALTH_PROBE}")
t0=$SECONDS
unit=$src/deploy/systemd/meshrun-server.service
envex=$src/deploy/systemd/server.env.example

skip() { echo "skip: $*"; exit 77; }
fail() { echo "FAIL: $*"; [ -f "${work:-/nonexistent}/server.log" ] && tail -n 20 "$work/server.log"; exit 1; }

[ -x "$meshrun" ] || fail "no meshrun binary at $meshrun"
py=$(command -v python3) || skip "no python3"
command -v openssl >/dev/null || skip "no openssl CLI (certificates for the TLS run)"
work=$(mktemp -d /tmp/meshrun-systemd-test.XXXXXX)
chmod 755 "$work"
server_pid=
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -KILL "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# ---- 1. what the unit must say (last assignment of a key wins, as in systemd).
"$py" - "$unit" "$envex" >"$work/static.log" 2>&1 <<'EOF'
import re, shlex, sys
unit, envex = sys.argv[1], sys.argv[2]
sections, cur, bad = {}, None, []
for line in open(unit):
    line = line.strip()
    if not line or line[0] in "#;":
        continue
    m = re.fullmatch(r"\[(.+)\]", line)
    if m:
        cur = sections.setdefault(m.group(1), {})
        continue
    k, _, v = line.partition("=")
    cur[k.strip()] = v.strip()
svc = sections.get("Service", {})
want = {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
        "PrivateTmp": "yes", "LimitNOFILE": "1048576", "Restart": "on-failure",
        "EnvironmentFile": "/etc/meshrun/server.env"}
for k, v in want.items():
    if svc.get(k) != v:
        bad.append(f"[Service] {k}={svc.get(k)!r}, expected {v!r}")
if svc.get("DynamicUser") != "yes" and svc.get("User", "root") in ("root", "0", ""):
    bad.append("[Service] needs DynamicUser=yes or a non-root User=")
argv = shlex.split(svc.get("ExecStart", ""))
if argv[1:2] != ["server"] or "--host" not in argv or "--port" not in argv:
    bad.append(f"ExecStart must run `meshrun server --host ... --port ...`: {argv}")
elif argv[argv.index("--host") + 1] != "::" or argv[argv.index("--port") + 1] != "29400":
    bad.append(f"ExecStart must listen on :: port 29400: {argv}")
for flag, value in (("--tls_cert", "${CREDENTIALS_DIRECTORY}/tls.crt"), ("--tls_key", "${CREDENTIALS_DIRECTORY}/tls.key"),
                    ("--health_port", "29401"), ("--metrics_port", "29402")):
    if flag not in argv or argv[argv.index(flag) + 1] != value:
        bad.append(f"ExecStart must give {flag} {value}: {argv}")
creds = [l.split("=", 1)[1].strip() for l in open(unit) if l.startswith("LoadCredential=")]
for want in ("tls.crt:/etc/meshrun/tls/server.crt", "tls.key:/etc/meshrun/tls/server.key"):
    if want not in creds:
        bad.append(f"[Service] LoadCredential={want} missing")
if sections.get("Install", {}).get("WantedBy") != "multi-user.target":
    bad.append("[Install] WantedBy=multi-user.target missing")
text = open(envex).read()
if not re.search(r"^MESHRUN_TOKEN=\S+", text, re.M):
    bad.append("server.env.example has no MESHRUN_TOKEN= line")
if re.search(r"planned|not read by meshrun", text):
    bad.append("server.env.example still calls TLS planned")
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
EOF
[ $? = 0 ] || { cat "$work/static.log"; fail "the unit lacks required settings"; }
echo "unit: hardening, own user, LimitNOFILE=1048576, Restart=on-failure, EnvironmentFile, TLS through LoadCredential, health and metrics ports"

# ---- 2. systemd-analyze verify / security.
verified=0
if command -v systemd-analyze >/dev/null 2>&1; then
  mkdir -p "$work/units"
  # Only the binary's path changes (verify checks that ExecStart's program exists).
  sed "s#^ExecStart=[^ ]*meshrun #ExecStart=$meshrun #" "$unit" >"$work/units/meshrun-server.service"
  grep -q "^ExecStart=$meshrun server " "$work/units/meshrun-server.service" ||
    fail "could not point ExecStart at $meshrun"
  if ! systemd-analyze verify "$work/units/meshrun-server.service" >"$work/verify.log" 2>&1 ||
     [ -s "$work/verify.log" ]; then
    cat "$work/verify.log"; fail "systemd-analyze verify complains"
  fi
  mkdir -p "$work/bad"
  sed 's/^NoNewPrivileges=/NoNewPrivilege=/' "$work/units/meshrun-server.service" >"$work/bad/meshrun-server.service"
  systemd-analyze verify "$work/bad/meshrun-server.service" >"$work/verify-bad.log" 2>&1
  [ -s "$work/verify-bad.log" ] || fail "systemd-analyze verify did not notice a misspelled directive"
  verified=1
  echo "systemd-analyze verify: clean (and a misspelled directive is reported)"
  if systemd-analyze security --help 2>/dev/null | grep -q -- '--offline'; then
    systemd-analyze security --offline=yes --threshold=30 "$work/units/meshrun-server.service" \
      >"$work/security.log" 2>&1 ||
      { tail -n 3 "$work/security.log"; fail "systemd-analyze security: exposure above 3.0"; }
    echo "systemd-analyze security: $(grep -o 'Overall exposure level.*' "$work/security.log")"
  else
    echo "note: systemd-analyze security --offline not available; exposure not rated"
  fi
fi

# ---- 3. ExecStart runs: unprivileged, no new privileges, the environment file's variables.
token=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
sed "s/^MESHRUN_TOKEN=.*/MESHRUN_TOKEN=$token/" "$envex" >"$work/server.env"
# The credentials systemd would load: a CA and the server's certificate for 127.0.0.1.
creds=$work/credentials
mkdir -p "$creds"
ossl() { openssl "$@" >>"$work/openssl.log" 2>&1 || fail "openssl $*: $(tail -n 2 "$work/openssl.log")"; }
ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$work/ca.key" -out "$work/ca.crt" \
  -days 2 -subj /CN=meshrun-test-ca
ossl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$creds/tls.key" -out "$work/server.csr" \
  -subj /CN=server
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$work/server.ext"
ossl x509 -req -in "$work/server.csr" -CA "$work/ca.crt" -CAkey "$work/ca.key" -CAcreateserial -days 2 \
  -extfile "$work/server.ext" -out "$creds/tls.crt"
chmod 0400 "$creds"/*
chown -R 65534:65534 "$creds" 2>/dev/null
mapfile -t argv < <("$py" - "$unit" "$meshrun" "$work/run/port" "$creds" <<'EOF'
import shlex, sys
unit, meshrun, port_file, creds = sys.argv[1:5]
line = [l.strip() for l in open(unit) if l.strip().startswith("ExecStart=")][-1]
argv = [a.replace("${CREDENTIALS_DIRECTORY}", creds) for a in shlex.split(line.partition("=")[2])]
argv[0] = meshrun
for flag in ("--port", "--health_port", "--metrics_port"):
    argv[argv.index(flag) + 1] = "0"      # free ports instead of 29400..29402
argv += ["--port_file", port_file]
print("\n".join(argv))
EOF
)
[ "${#argv[@]}" -ge 5 ] || fail "could not read ExecStart"
# EnvironmentFile= semantics for the simple KEY=VALUE lines used here.
mapfile -t envs < <(grep -E '^[A-Za-z_][A-Za-z0-9_]*=' "$work/server.env")
mkdir -p "$work/run" && chown 65534:65534 "$work/run" 2>/dev/null || chmod 777 "$work/run"
runner=()
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null 2>&1; then
  runner=(setpriv --reuid=65534 --regid=65534 --clear-groups --no-new-privs)
fi
limit=()
if command -v prlimit >/dev/null 2>&1 && prlimit --nofile=1048576:1048576 true 2>/dev/null; then
  limit=(prlimit --nofile=1048576:1048576)
fi
env -i PATH=/usr/bin:/bin "${envs[@]}" "${limit[@]}" "${runner[@]}" "${argv[@]}" >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do [ -s "$work/run/port" ] && break; kill -0 $server_pid 2>/dev/null || break; sleep 0.1; done
[ -s "$work/run/port" ] || fail "the server did not write its port (ExecStart: ${argv[*]})"
port=$(cat "$work/run/port")
grep -q "listening on :: port $port (token required) (TLS)" "$work/server.log" ||
  fail "the server does not say it listens on :: port $port with a token and TLS"
uid=$(awk '/^Uid:/ {print $2}' /proc/$server_pid/status)
nnp=$(awk '/^NoNewPrivs:/ {print $2}' /proc/$server_pid/status)
if [ ${#runner[@]} -gt 0 ]; then
  [ "$uid" = 65534 ] && [ "$nnp" = 1 ] || fail "server runs as uid $uid with NoNewPrivs=$nnp"
fi
if [ ${#limit[@]} -gt 0 ]; then
  grep -q '^Max open files *1048576 *1048576' /proc/$server_pid/limits || fail "LimitNOFILE did not apply"
  nofile="1048576 open files"
else
  nofile="open-files limit not raisable here"
fi
echo "ExecStart: listening on :: port $port as uid $uid, NoNewPrivs $nnp, $nofile"

job() {  # TOKEN_OR_UNSET ID: a one-node job through the daemon
  local tok=$1 id=$2
  if [ "$tok" = unset ]; then
    timeout 30 env -u MESHRUN_TOKEN MESHRUN_TLS_CA="$work/ca.crt" "$meshrun" --nnodes=1 --rdzv_endpoint="127.0.0.1:$port" \
      --rdzv_id="$id" --rdzv_conf=is_host=0 --no_python sh -c 'echo "rank $RANK of $WORLD_SIZE"'
  else
    timeout 30 env MESHRUN_TOKEN="$tok" MESHRUN_TLS_CA="$work/ca.crt" "$meshrun" --nnodes=1 --rdzv_endpoint="127.0.0.1:$port" \
      --rdzv_id="$id" --rdzv_conf=is_host=0 --no_python sh -c 'echo "rank $RANK of $WORLD_SIZE"'
  fi
}
out=$(job "$token" ok 2>&1); rc=$?
[ $rc = 0 ] && grep -q 'rank 0 of 1' <<<"$out" || { echo "$out"; fail "a job with the file's token failed (exit $rc)"; }
out=$(job wrong-token wrong 2>&1); rc=$?
[ $rc = 1 ] && grep -q 'wrong token' <<<"$out" || { echo "$out"; fail "a wrong token was not refused (exit $rc)"; }
out=$(job unset none 2>&1); rc=$?
[ $rc = 1 ] && grep -q 'requires a token' <<<"$out" || { echo "$out"; fail "a missing token was not refused (exit $rc)"; }
echo "token and TLS: the file's token and the CA run a job; wrong and missing tokens are refused"

# The plaintext health port answers a probe that speaks no TLS; the TLS port does not.
hport=$(grep -o 'gRPC health checks, plaintext, on .*' "$work/server.log" | grep -o '[0-9]*$')
[ -n "$hport" ] || fail "the server does not print its health port"
hout=$("$probe" "127.0.0.1:$hport" meshrun.v1.Rendezvous 2>&1) || fail "health port: $hout"
[ "$hout" = SERVING ] || fail "health port answered '$hout'"
"$probe" "127.0.0.1:$port" >/dev/null 2>&1 && fail "a plaintext probe got an answer from the TLS port"
mport=$(grep -o 'metrics on http://[^ ]*' "$work/server.log" | sed 's#.*:\([0-9]*\)/metrics#\1#')
[ -n "$mport" ] || fail "the server does not print its metrics URL"
scrape() {  # TOKEN: prints the HTTP status of a scrape over TLS
  "$py" - "$mport" "$work/ca.crt" "$1" <<'PYEOF2'
import ssl, sys, urllib.error, urllib.request
port, ca, token = sys.argv[1:4]
req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
if token:
    req.add_header("Authorization", f"Bearer {token}")
try:
    body = urllib.request.urlopen(req, timeout=5).read().decode()
    print(200 if "meshrun_" in body else "no meshrun metrics")
except urllib.error.HTTPError as e:
    print(e.code)
PYEOF2
}
[ "$(scrape "$token")" = 200 ] || fail "a scrape with the token did not get the metrics: $(scrape "$token")"
[ "$(scrape "")" = 401 ] || fail "a scrape without the token was not refused 401: $(scrape "")"
[ "$(scrape wrong)" = 401 ] || fail "a scrape with a wrong token was not refused 401"
echo "probes: the plaintext health port answers SERVING (the TLS port does not answer plaintext); metrics with the bearer token, 401 without"

kill -TERM $server_pid
for _ in $(seq 1 150); do kill -0 $server_pid 2>/dev/null || break; sleep 0.1; done  # TimeoutStopSec=15
kill -0 $server_pid 2>/dev/null && fail "the server did not stop within 15 s of SIGTERM"
wait $server_pid; rc=$?
server_pid=
[ $rc = 0 ] || fail "the server exited $rc on SIGTERM (Restart=on-failure would restart it)"
grep -qF "$token" "$work/server.log" && fail "the server printed the token"
echo "SIGTERM: exit 0"

if [ $verified = 0 ]; then
  skip "systemd-analyze not found (package systemd), the unit was not verified; other checks passed ($((SECONDS - t0)) s)"
fi
echo "PASS: systemd ($((SECONDS - t0)) s)"
