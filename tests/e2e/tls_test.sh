#!/usr/bin/env bash
# End-to-end tests of a rendezvous safe to expose (issue #13): TLS and mutual
# TLS between real meshruns with certificates made here by the openssl CLI;
# each TLS mis-configuration fails within seconds with its own one line; the
# token file; the warning of a server open to anyone.
#
# usage: tls_test.sh MESHRUN STORE_PROBE TWO_D_SETUP
set -uo pipefail
MESHRUN=$1
STORE_PROBE=$2
TWO_D=$3
command -v openssl >/dev/null || { echo "SKIP: no openssl CLI"; exit 77; }

T=$(mktemp -d /tmp/meshrun-tls.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
unset MESHRUN_TOKEN MESHRUN_TOKEN_FILE MESHRUN_TLS_CERT MESHRUN_TLS_KEY MESHRUN_TLS_CA

FAILS=0
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
pass() { echo "ok: $*"; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# --- certificates ------------------------------------------------------------
ossl() { openssl "$@" >>"$T/openssl.log" 2>&1 || { echo "openssl $* failed:"; cat "$T/openssl.log"; exit 1; }; }
make_ca() {  # name
  ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$T/$1.key" -out "$T/$1.crt" \
    -days 2 -subj "/CN=$1" -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
}
make_cert() {  # name ca san days
  ossl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$T/$1.key" -out "$T/$1.csr" -subj "/CN=$1"
  printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n' \
    "$3" >"$T/$1.ext"
  ossl x509 -req -in "$T/$1.csr" -CA "$T/$2.crt" -CAkey "$T/$2.key" -CAcreateserial -days "$4" -extfile "$T/$1.ext" \
    -out "$T/$1.crt"
}
make_ca ca
make_ca otherca
make_cert host ca "DNS:localhost,IP:127.0.0.1" 2
make_cert wronghost ca "DNS:elsewhere.example,IP:10.9.9.9" 2
make_cert stranger otherca "DNS:localhost,IP:127.0.0.1" 2
make_cert expired ca "DNS:localhost,IP:127.0.0.1" -1

# --- helpers -----------------------------------------------------------------
# Starts `meshrun server` on a free port with extra args; sets SERVER_PORT.
start_server() {
  local log=$1; shift
  rm -f "$T/port"
  "$MESHRUN" server --host 127.0.0.1 --port 0 --port_file "$T/port" "$@" >"$log" 2>&1 &
  PIDS+=($!)
  SERVER_PID=$!
  for _ in $(seq 100); do [[ -s $T/port ]] && break; sleep 0.05; done
  SERVER_PORT=$(cat "$T/port" 2>/dev/null)
  [[ -n $SERVER_PORT ]] || { echo "server did not start:"; cat "$log"; exit 1; }
}
stop_server() { kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null; }

# Runs a one-node job against localhost:$1 with env/args; records its time
# and output in ELAPSED and OUT. Expected to fail fast.
join_once() {
  local port=$1; shift
  local start end
  start=$(date +%s.%N)
  OUT=$(env "$@" "$MESHRUN" --nnodes=1 --nproc_per_node=1 --rdzv_endpoint="localhost:$port" --rdzv_id=bad \
        --rdzv_conf=is_host=0,read_timeout=30,join_timeout=30 "$STORE_PROBE" 2>&1)
  RC=$?
  end=$(date +%s.%N)
  ELAPSED=$(python3 -c "print(round($end - $start, 2))")
}

# expect_fast NAME PATTERN: the last join_once failed within 10 s with one
# meshrun error line matching PATTERN.
expect_fast() {
  local name=$1 pattern=$2
  local line
  line=$(grep '^meshrun: error:' <<<"$OUT")
  if [[ $RC -eq 0 ]]; then
    fail "$name: succeeded"
  elif [[ $(grep -c '^meshrun: error:' <<<"$OUT") -ne 1 ]]; then
    fail "$name: not one error line: $OUT"
  elif grep -qE '^[EWI][0-9]{4} |Handshake failed' <<<"$OUT"; then
    fail "$name: gRPC's own log line before meshrun's: $OUT"
  elif ! grep -qE "$pattern" <<<"$line"; then
    fail "$name: '$line' does not match /$pattern/"
  elif python3 -c "import sys; sys.exit(0 if $ELAPSED < 10 else 1)"; then
    pass "$name (${ELAPSED}s): $line"
  else
    fail "$name: took ${ELAPSED}s: $line"
  fi
}

# status_ok NAME PORT [ENV...] -- [FLAGS...]: `meshrun status` against
# localhost:PORT answers (exit 0, a line for the server's runs).
# status_fails NAME PATTERN PORT [ENV...] -- [FLAGS...]: it fails within 10 s
# with one line, matching PATTERN, and no gRPC log line of its own.
run_status() {
  local port=$1; shift
  local envs=() start
  while [[ $# -gt 0 && $1 != -- ]]; do envs+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  start=$(date +%s.%N)
  OUT=$(env "${envs[@]}" "$MESHRUN" status --rdzv_endpoint="localhost:$port" --timeout 10 "$@" 2>&1)
  RC=$?
  ELAPSED=$(python3 -c "print(round($(date +%s.%N) - $start, 2))")
}
status_ok() {
  local name=$1; shift
  run_status "$@"
  if [[ $RC -eq 0 ]] && grep -qE "^(run '|no runs on the server)" <<<"$OUT"; then pass "status: $name"
  else fail "status: $name: rc=$RC $OUT"; fi
}
status_fails() {
  local name=$1 pattern=$2; shift 2
  run_status "$@"
  if [[ $RC -eq 1 && $(wc -l <<<"$OUT") -eq 1 ]] && grep -qE "^meshrun status: error: .*$pattern" <<<"$OUT" &&
     python3 -c "import sys; sys.exit(0 if $ELAPSED < 10 else 1)"; then
    pass "status: $name (${ELAPSED}s): $OUT"
  else fail "status: $name: rc=$RC in ${ELAPSED}s: $OUT"; fi
}

# A 2-node job: two meshruns on localhost:$port, 4 workers each running the
# tutorial's 2-D setup over Gloo through the store. Extra env in "$@".
two_node_job() {
  local name=$1 port=$2; shift 2
  local i
  for i in 0 1; do
    env "$@" "$MESHRUN" --nnodes=2 --nproc_per_node=4 --rdzv_endpoint="localhost:$port" --rdzv_id="$name" \
      --rdzv_conf=join_timeout=60 "$TWO_D" --device cpu >"$T/$name.$i.out" 2>"$T/$name.$i.err" &
    PIDS+=($!)
    eval "JOB$i=$!"
  done
  local rc0=0 rc1=0
  wait "$JOB0" || rc0=$?
  wait "$JOB1" || rc1=$?
  local sums
  sums=$(cat "$T/$name".*.out | grep -c '_sum=')
  if [[ $rc0 -eq 0 && $rc1 -eq 0 && $sums -eq 16 ]]; then
    pass "$name: 2 nodes x 4 workers, 16 checked allreduces"
  else
    fail "$name: exit codes $rc0 $rc1, $sums allreduce lines"
    tail -n 5 "$T/$name".*.err
  fi
}

# --- (a) 2-node jobs over TLS and mutual TLS -----------------------------------
# TLS (server-only certificate): a `meshrun server` daemon with cert and key;
# the two meshruns have only the CA (their workers' store traffic too).
start_server "$T/server_tls.log" --tls_cert "$T/host.crt" --tls_key "$T/host.key"
grep -q '(TLS)' "$T/server_tls.log" || fail "server does not say TLS: $(cat "$T/server_tls.log")"
two_node_job tls "$SERVER_PORT" MESHRUN_TLS_CA="$T/ca.crt"
# A worker started by hand against the server (not through an agent's store
# proxy) brings its own TLS settings.
OUT=$(env MESHRUN_STORE_ENDPOINT="localhost:$SERVER_PORT" MESHRUN_RUN_ID=byhand MESHRUN_ROUND=0 \
      MESHRUN_TLS_CA="$T/ca.crt" timeout 30 "$STORE_PROBE" 2>&1)
if grep -q 'set=OK get=OK' <<<"$OUT"; then pass "a worker by hand with host:port and MESHRUN_TLS_CA uses the store"
else fail "worker by hand over TLS: $OUT"; fi
OUT=$(env MESHRUN_STORE_ENDPOINT="localhost:$SERVER_PORT" MESHRUN_RUN_ID=byhand MESHRUN_ROUND=0 \
      timeout 30 "$STORE_PROBE" 2>&1)
if grep -q 'connect=UNAVAILABLE' <<<"$OUT"; then pass "a worker by hand without MESHRUN_TLS_CA is refused: $OUT"
else fail "worker by hand, plain against TLS: $OUT"; fi
# Mis-configurations against this TLS server.
join_once "$SERVER_PORT"
expect_fast "plain client, TLS server" "speaks TLS and this node does not \(set MESHRUN_TLS_CA"
join_once "$SERVER_PORT" MESHRUN_TLS_CA="$T/otherca.crt"
expect_fast "wrong CA" "certificate failed verification \(unable to get local issuer certificate\): it is not signed by the CA in MESHRUN_TLS_CA=.*otherca.crt"
# meshrun status speaks TLS as the agent does (flags or MESHRUN_TLS_CA).
status_ok "TLS server, --tls_ca" "$SERVER_PORT" -- --tls_ca "$T/ca.crt"
status_ok "TLS server, MESHRUN_TLS_CA" "$SERVER_PORT" MESHRUN_TLS_CA="$T/ca.crt"
status_fails "plain client, TLS server" "speaks TLS and this node does not \(set MESHRUN_TLS_CA" "$SERVER_PORT"
status_fails "wrong CA" "not signed by the CA in MESHRUN_TLS_CA=.*otherca.crt" "$SERVER_PORT" -- --tls_ca "$T/otherca.crt"
stop_server

start_server "$T/server_wronghost.log" --tls_cert "$T/wronghost.crt" --tls_key "$T/wronghost.key"
join_once "$SERVER_PORT" MESHRUN_TLS_CA="$T/ca.crt"
expect_fast "wrong-host certificate" "certificate failed verification \(hostname mismatch\): it is not for 'localhost'"
stop_server

# A server whose certificate expired while it runs (meshrun refuses to start
# with one, so openssl's own TLS server plays it).
EXP_PORT=$(free_port)
openssl s_server -quiet -accept "127.0.0.1:$EXP_PORT" -cert "$T/expired.crt" -key "$T/expired.key" -alpn h2 \
  </dev/null >"$T/s_server.log" 2>&1 &
PIDS+=($!)
S_SERVER=$!
for _ in $(seq 100); do (echo >"/dev/tcp/127.0.0.1/$EXP_PORT") 2>/dev/null && break; sleep 0.05; done
join_once "$EXP_PORT" MESHRUN_TLS_CA="$T/ca.crt"
expect_fast "expired server certificate" "certificate failed verification \(certificate has expired\)"
kill "$S_SERVER" 2>/dev/null

# Mutual TLS: two meshruns, each with the host's certificate, key and the CA;
# the first hosts the server (which then requires client certificates).
MPORT=$(free_port)
two_node_job mtls "$MPORT" MESHRUN_TLS_CERT="$T/host.crt" MESHRUN_TLS_KEY="$T/host.key" MESHRUN_TLS_CA="$T/ca.crt"

# The same set-up through --rdzv_conf keys instead of the environment.
start_server "$T/server_mtls.log" --tls_cert "$T/host.crt" --tls_key "$T/host.key" --tls_ca "$T/ca.crt"
grep -q '(mutual TLS)' "$T/server_mtls.log" || fail "server does not say mutual TLS"
OUT=$("$MESHRUN" --nnodes=1 --nproc_per_node=2 --rdzv_endpoint="localhost:$SERVER_PORT" --rdzv_id=conf \
      --rdzv_conf="is_host=0,tls_cert=$T/host.crt,tls_key=$T/host.key,tls_ca=$T/ca.crt" "$STORE_PROBE" 2>&1)
if [[ $? -eq 0 && $(grep -c 'set=OK get=OK' <<<"$OUT") -eq 2 ]]; then pass "rdzv_conf tls_* keys, store from workers"
else fail "rdzv_conf tls_* keys: $OUT"; fi
join_once "$SERVER_PORT" MESHRUN_TLS_CA="$T/ca.crt"
expect_fast "missing client certificate (mutual TLS)" "requires a client certificate \(mutual TLS.*set MESHRUN_TLS_CERT and MESHRUN_TLS_KEY"
join_once "$SERVER_PORT" MESHRUN_TLS_CERT="$T/stranger.crt" MESHRUN_TLS_KEY="$T/stranger.key" MESHRUN_TLS_CA="$T/ca.crt"
expect_fast "client certificate of another CA (mutual TLS)" "refused this node's certificate MESHRUN_TLS_CERT=.*stranger.crt"
status_ok "mutual TLS server, --tls_ca/--tls_cert/--tls_key" "$SERVER_PORT" -- --tls_ca "$T/ca.crt" \
  --tls_cert "$T/host.crt" --tls_key "$T/host.key"
status_ok "mutual TLS server, MESHRUN_TLS_*" "$SERVER_PORT" MESHRUN_TLS_CA="$T/ca.crt" MESHRUN_TLS_CERT="$T/host.crt" \
  MESHRUN_TLS_KEY="$T/host.key"
status_fails "mutual TLS server, no client certificate" "requires a client certificate" "$SERVER_PORT" -- \
  --tls_ca "$T/ca.crt"
stop_server

# A TLS client against a plain server.
start_server "$T/server_plain.log"
join_once "$SERVER_PORT" MESHRUN_TLS_CA="$T/ca.crt"
expect_fast "TLS client, plain server" "does not speak TLS .*start it with MESHRUN_TLS_CERT and MESHRUN_TLS_KEY, or unset MESHRUN_TLS_CA"
stop_server

# A meshrun that would host the server with only a CA.
HPORT=$(free_port)
start=$(date +%s.%N)
OUT=$(MESHRUN_TLS_CA="$T/ca.crt" "$MESHRUN" --nnodes=2 --nproc_per_node=1 --rdzv_endpoint="localhost:$HPORT" \
      --rdzv_id=caonly "$STORE_PROBE" 2>&1); RC=$?
ELAPSED=$(python3 -c "print(round($(date +%s.%N) - $start, 2))")
expect_fast "hosting with only a CA" "hosts the rendezvous server on port $HPORT, but a TLS CA \(MESHRUN_TLS_CA, --tls_ca or rdzv_conf tls_ca\) is set without a certificate and key"

# Bad files, at start, naming the file.
echo "not a certificate" >"$T/garbage.pem"
join_once 1 MESHRUN_TLS_CA="$T/garbage.pem"
expect_fast "invalid CA PEM" "MESHRUN_TLS_CA=.*garbage.pem: not a PEM certificate"
join_once 1 MESHRUN_TLS_CA="$T/missing.pem"
expect_fast "unreadable CA file" "MESHRUN_TLS_CA=.*missing.pem: cannot read \(No such file or directory\)"
join_once 1 MESHRUN_TLS_CERT="$T/host.crt" MESHRUN_TLS_KEY="$T/garbage.pem" MESHRUN_TLS_CA="$T/ca.crt"
expect_fast "invalid key PEM" "MESHRUN_TLS_KEY=.*garbage.pem: not a PEM private key"
join_once 1 MESHRUN_TLS_CERT="$T/host.crt" MESHRUN_TLS_KEY="$T/wronghost.key" MESHRUN_TLS_CA="$T/ca.crt"
expect_fast "key of another certificate" "MESHRUN_TLS_KEY=.*wronghost.key is not the key of the certificate"
join_once 1 MESHRUN_TLS_CERT="$T/expired.crt" MESHRUN_TLS_KEY="$T/expired.key" MESHRUN_TLS_CA="$T/ca.crt"
expect_fast "own certificate expired" "MESHRUN_TLS_CERT=.*expired.crt: the certificate expired on"
OUT=$("$MESHRUN" server --port 0 --tls_cert "$T/expired.crt" --tls_key "$T/expired.key" 2>&1); RC=$?
if [[ $RC -ne 0 ]] && grep -q "^meshrun server: error: MESHRUN_TLS_CERT=.*expired.crt: the certificate expired on" <<<"$OUT"; then
  pass "server with an expired certificate: $OUT"
else fail "server with an expired certificate: rc=$RC $OUT"; fi

# --- (c) the token file ----------------------------------------------------------
SECRET="tok-$RANDOM-$RANDOM-secret-value"
printf '%s\n' "$SECRET" >"$T/token"
chmod 600 "$T/token"
start_server "$T/server_token.log" --token_file "$T/token"
OUT=$("$MESHRUN" --nnodes=1 --nproc_per_node=2 --rdzv_endpoint="localhost:$SERVER_PORT" --rdzv_id=tok \
      --rdzv_conf="is_host=0,token_file=$T/token" "$STORE_PROBE" 2>&1)
if [[ $? -eq 0 && $(grep -c 'set=OK get=OK' <<<"$OUT") -eq 2 ]]; then pass "token_file: workers use the store"
else fail "token_file: $OUT"; fi
echo "$OUT" >"$T/out.token_good"
OUT=$(MESHRUN_TOKEN_FILE="$T/token" "$MESHRUN" --nnodes=1 --nproc_per_node=1 --rdzv_endpoint="localhost:$SERVER_PORT" \
      --rdzv_id=tok2 --rdzv_conf=is_host=0 sh -c 'cat /proc/$$/cmdline | tr "\0" " "; echo; env | grep ^MESHRUN_TOKEN' 2>&1)
echo "$OUT" >"$T/out.token_env"
if ! grep -qE '\] MESHRUN_TOKEN(_FILE)?=' <<<"$OUT" && grep -q 'cmdline' <<<"$OUT"; then
  pass "MESHRUN_TOKEN_FILE: workers get neither the file nor the value (the token stays with the agent)"
else fail "MESHRUN_TOKEN_FILE worker environment: $OUT"; fi
join_once "$SERVER_PORT" MESHRUN_TOKEN="wrong"
expect_fast "wrong token" "wrong token"
status_ok "token server, --token_file" "$SERVER_PORT" -- --token_file "$T/token"
status_ok "token server, MESHRUN_TOKEN_FILE" "$SERVER_PORT" MESHRUN_TOKEN_FILE="$T/token"
status_fails "token server, no token" "requires a token" "$SERVER_PORT"
echo "$OUT" >"$T/out.token_wrong"
"$MESHRUN" --help-env >"$T/out.help_env" 2>&1
stop_server
chmod 644 "$T/token"
join_once 1 MESHRUN_TOKEN_FILE="$T/token"
expect_fast "token file mode 0644" "token file .*/token has mode 0644: group or others may access it; allowed: 0600"
OUT=$("$MESHRUN" server --port 0 --token_file "$T/token" 2>&1); RC=$?
if [[ $RC -ne 0 ]] && grep -q "^meshrun server: error: token file .*/token has mode 0644" <<<"$OUT"; then pass "server refuses a 0644 token file"
else fail "server with a 0644 token file: $OUT"; fi
: >"$T/empty"; chmod 600 "$T/empty"
join_once 1 MESHRUN_TOKEN_FILE="$T/empty"
expect_fast "empty token file" "token file .*/empty is empty"
cat "$T"/*.log "$T"/*.out "$T"/*.err >>"$T/out.all" 2>/dev/null
if grep -rqF "$SECRET" "$T"/out.* "$T"/server_*.log "$T"/*.out "$T"/*.err; then
  fail "the token appears in an output: $(grep -rlF "$SECRET" "$T"/out.* "$T"/*.log)"
else pass "the token appears in no output (meshrun, server, workers, --help-env)"; fi

# --- (e) meshrun status against a closed port: refused at once ------------------
CLOSED=$(free_port)
status_fails "closed port" "rendezvous server at localhost:$CLOSED is unreachable: .*Connection refused" "$CLOSED"
if python3 -c "import sys; sys.exit(0 if $ELAPSED < 1 else 1)"; then pass "status: closed port within 1 s (${ELAPSED}s)"
else fail "status: closed port took ${ELAPSED}s"; fi

# --- (d) the warning of an open server -------------------------------------------
warn_of() {  # env...: starts meshrun server --host 0.0.0.0, prints its stderr
  rm -f "$T/port"
  env "$@" "$MESHRUN" server --host 0.0.0.0 --port 0 --port_file "$T/port" >"$T/warn.out" 2>"$T/warn.err" &
  local pid=$!
  for _ in $(seq 100); do [[ -s $T/port ]] && break; sleep 0.05; done
  kill "$pid"; wait "$pid" 2>/dev/null
  cat "$T/warn.err"
}
W=$(warn_of)
if [[ $(grep -c 'warning: the rendezvous server listens on 0.0.0.0 without a token or TLS: anyone who reaches its port can join runs' <<<"$W") -eq 1 ]] &&
   grep -q 'MESHRUN_TOKEN' <<<"$W" && grep -q 'MESHRUN_TLS_CERT' <<<"$W"; then
  pass "open server warns once"
else fail "open server warning: $W"; fi
W=$(warn_of MESHRUN_TOKEN=t0ken)
if grep -q 'warning' <<<"$W"; then fail "warning despite a token: $W"; else pass "no warning with a token"; fi
W=$(warn_of MESHRUN_TLS_CERT="$T/host.crt" MESHRUN_TLS_KEY="$T/host.key")
if grep -q 'warning' <<<"$W"; then fail "warning despite TLS: $W"; else pass "no warning with TLS"; fi
OUT=$("$MESHRUN" --standalone --nproc_per_node=1 true 2>&1)
if grep -q 'warning' <<<"$OUT"; then fail "--standalone warns: $OUT"; else pass "--standalone: no warning"; fi

echo "$FAILS failure(s)"
[[ $FAILS -eq 0 ]]
