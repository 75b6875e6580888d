# shellcheck shell=bash disable=SC2034  # (globals are for callers)
# etcd_cluster.sh: a real etcd cluster for shell tests, either N members on loopback (free
# ports) or one member per network-namespace host (tests/hosts/netns_hosts.sh), each member
# started by tests/etcd/etcd_member.sh with a fresh data dir.
#
#   source "$SRC/tests/etcd/etcd_cluster.sh"
#   etcd_require                  # no etcd / etcdctl: one "SKIP: ..." line and exit 77
#   etcd_up 3                     # loopback, free ports; returns once every member is healthy
#   etcd_up 3 --hosts             # member i on namespace host i (hosts_up 3 first), at
#                                 # ${HOSTS_V4[i]}:2379 (peers :2380)
#         [--fsync]               # keep fsync (default: --unsafe-no-fsync, tests only)
#         [--slow]                # etcd's default timing (default: --heartbeat-interval=50
#                                 # --election-timeout=500, leases of 1 s)
#         [--tls DIR [--client-cert-auth]]   # clients speak TLS (tests/support/certs.h's files)
#   etcd_endpoints                # "host:port,host:port,..."
#   etcd_url [PREFIX]             # "etcd://host:port,...PREFIX" (etcds:// with --tls)
#   etcd_kill I                   # SIGKILL member I; returns once it is gone
#   etcd_start I                  # starts member I again on its data dir (does not wait)
#   etcd_wait_healthy TIMEOUT_S [I...]  # members I... (default: every running one) healthy
#                                 # (etcdctl endpoint health: a leader and a committed read);
#                                 # 1 on timeout
#   etcdctl_on I ARGS...          # etcdctl against member I (run on its host with --hosts)
#   etcd_down                     # kills every member, removes the data; idempotent
#
# TEARDOWN: etcd_up installs `trap etcd_down EXIT` (with --hosts: `trap 'etcd_down; hosts_down'
# EXIT`, keeping netns_hosts.sh's teardown). A caller that sets its own EXIT trap afterwards
# MUST call etcd_down (and hosts_down) from it. Members also die with this shell
# (etcd_member.sh --die-with-parent), and with their host (host_kill, hosts_down).
# Every wait is bounded; etcd_up returns 1 (with the members' log tails on stderr) when the
# cluster is not healthy within 30 s, 2 on bad arguments.
#
# Globals set by etcd_up: ETCD_N, ETCD_MODE (loopback|hosts), ETCD_CLIENT[i] and ETCD_PEER[i]
# (host:port), ETCD_PID[i] (etcd's pid; empty when not running), ETCD_DIR (scratch: data dirs,
# logs, pid files).

ETCD_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

_etcd_log() { echo "etcd_cluster: $*" >&2; }

etcd_require() {
  local tool
  for tool in etcd etcdctl setpriv; do
    if ! command -v "$tool" >/dev/null 2>&1; then
      echo "SKIP: '$tool' not found (Debian's etcd-server, etcd-client: bash scripts/install-deps.sh)"
      exit 77
    fi
  done
}

# N distinct TCP ports free on 127.0.0.1 now, one per line: all N sockets are bound at once, so
# no port is given twice (a port is still free only when picked, not when etcd binds it).
_etcd_free_ports() {
  local py=/usr/bin/python3
  [[ -x $py ]] || py=python3
  "$py" -c '
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print("\n".join(str(s.getsockname()[1]) for s in socks))' "$1"
}

_etcd_ctl_flags() {
  _ETCD_CTL=(--command-timeout=2s --dial-timeout=1s)
  if [[ -n ${_ETCD_TLS:-} ]]; then
    _ETCD_CTL+=(--cacert "$_ETCD_TLS/ca.crt" --cert "$_ETCD_TLS/host.crt" --key "$_ETCD_TLS/host.key")
  fi
}

etcd_endpoints() {
  local IFS=,
  echo "${ETCD_CLIENT[*]}"
}

etcd_url() {
  local scheme=etcd
  [[ -n ${_ETCD_TLS:-} ]] && scheme=etcds
  echo "$scheme://$(etcd_endpoints)${1:-/meshrun}"
}

etcdctl_on() {
  local -; set +e
  local i=$1; shift
  _etcd_ctl_flags
  if [[ $ETCD_MODE == hosts ]]; then
    ETCDCTL_API=3 on_host "$i" etcdctl --endpoints "${ETCD_CLIENT[i]}" "${_ETCD_CTL[@]}" "$@"
  else
    ETCDCTL_API=3 etcdctl --endpoints "${ETCD_CLIENT[i]}" "${_ETCD_CTL[@]}" "$@"
  fi
}

etcd_start() {
  local -; set +e
  local i=$1 cluster j
  [[ -n ${ETCD_CLIENT[$i]:-} ]] || { _etcd_log "etcd_start: no member $i"; return 2; }
  if [[ -n ${ETCD_PID[$i]:-} ]] && kill -0 "${ETCD_PID[i]}" 2>/dev/null; then return 0; fi
  cluster=
  for ((j = 0; j < ETCD_N; j++)); do cluster+="${cluster:+,}e$j=http://${ETCD_PEER[j]}"; done
  local args=(--name "e$i" --data-dir "$ETCD_DIR/e$i" --client "${ETCD_CLIENT[i]}" --peer "${ETCD_PEER[i]}"
    --cluster "$cluster" --token "meshrun-$ETCD_TOKEN" --pid-file "$ETCD_DIR/e$i.pid" --die-with-parent
    "${_ETCD_FLAGS[@]}")
  rm -f "$ETCD_DIR/e$i.pid"
  if [[ $ETCD_MODE == hosts ]]; then
    on_host "$i" bash "$ETCD_LIB_DIR/etcd_member.sh" "${args[@]}" >>"$ETCD_DIR/e$i.log" 2>&1 &
  else
    bash "$ETCD_LIB_DIR/etcd_member.sh" "${args[@]}" >>"$ETCD_DIR/e$i.log" 2>&1 &
  fi
  # The pid file comes before etcd's exec: within a second, bounded.
  local deadline=$((${EPOCHREALTIME/./} + 5000000))
  until [[ -s $ETCD_DIR/e$i.pid ]]; do
    ((${EPOCHREALTIME/./} >= deadline)) && { _etcd_log "member $i wrote no pid file"; return 1; }
    sleep 0.02
  done
  ETCD_PID[i]=$(cat "$ETCD_DIR/e$i.pid")
  return 0
}

etcd_kill() {
  local -; set +e
  local i=$1 pid=${ETCD_PID[$1]:-} deadline
  [[ -n $pid ]] || return 0
  kill -KILL "$pid" 2>/dev/null
  deadline=$((${EPOCHREALTIME/./} + 5000000))
  while kill -0 "$pid" 2>/dev/null && [[ $(ps -o stat= -p "$pid" 2>/dev/null) != Z* ]]; do
    ((${EPOCHREALTIME/./} >= deadline)) && { _etcd_log "member $i (pid $pid) outlived SIGKILL"; return 1; }
    sleep 0.02
  done
  ETCD_PID[i]=
  return 0
}

etcd_wait_healthy() {
  local -; set +e
  local timeout_s=$1 deadline i ok; shift
  local which=("$@")
  if ((${#which[@]} == 0)); then
    for ((i = 0; i < ETCD_N; i++)); do [[ -n ${ETCD_PID[i]:-} ]] && which+=("$i"); done
  fi
  deadline=$((${EPOCHREALTIME/./} + timeout_s * 1000000))
  while :; do
    ok=1
    for i in "${which[@]}"; do
      if ! etcdctl_on "$i" endpoint health >/dev/null 2>&1; then ok=0; break; fi
    done
    ((ok)) && return 0
    ((${EPOCHREALTIME/./} >= deadline)) && return 1
    sleep 0.1
  done
}

etcd_up() {
  local -; set +e
  local n=${1:-} arg i tls= cca=0 fsync=0 slow=0
  shift || true
  ETCD_MODE=loopback
  while (($#)); do
    case $1 in
      --hosts) ETCD_MODE=hosts ;;
      --fsync) fsync=1 ;;
      --slow) slow=1 ;;
      --tls) tls=$2; shift ;;
      --client-cert-auth) cca=1 ;;
      *) _etcd_log "etcd_up: unknown option '$1'"; return 2 ;;
    esac
    shift
  done
  if ! [[ $n =~ ^[1-9]$ ]]; then _etcd_log "etcd_up: N must be 1..9, got '$n'"; return 2; fi
  if [[ $ETCD_MODE == hosts ]] && ((${HOSTS_N:-0} < n)); then
    _etcd_log "etcd_up --hosts: $n members need $n hosts (hosts_up $n first)"; return 2
  fi
  if [[ -n ${_ETCD_UP:-} ]]; then _etcd_log "etcd_up: already up (etcd_down first)"; return 2; fi
  if [[ $ETCD_MODE == hosts ]]; then trap 'etcd_down; hosts_down' EXIT; else trap etcd_down EXIT; fi
  _ETCD_UP=1
  ETCD_N=$n
  ETCD_DIR=$(mktemp -d /tmp/meshrun-etcd.XXXXXX) || return 1
  chmod 0755 "$ETCD_DIR"
  ETCD_TOKEN="$$-$RANDOM"
  _ETCD_TLS=$tls
  _ETCD_FLAGS=()
  ((slow)) || _ETCD_FLAGS+=(--fast)
  ((fsync)) || _ETCD_FLAGS+=(--no-fsync)
  [[ -n $tls ]] && _ETCD_FLAGS+=(--tls "$tls")
  ((cca)) && _ETCD_FLAGS+=(--client-cert-auth)
  # Loopback ports are free when picked, not when bound (another test may take one meanwhile):
  # a member that exits at start sends every member down, and the next try picks new ports
  # (3 tries, all within the 30 s).
  local try deadline=$((${EPOCHREALTIME/./} + 30000000)) left
  for ((try = 1; try <= 3; try++)); do
    ETCD_CLIENT=() ETCD_PEER=() ETCD_PID=()
    local ports=()
    [[ $ETCD_MODE == hosts ]] || mapfile -t ports < <(_etcd_free_ports $((2 * n)))
    for ((i = 0; i < n; i++)); do
      if [[ $ETCD_MODE == hosts ]]; then
        ETCD_CLIENT[i]="${HOSTS_V4[i]}:2379"
        ETCD_PEER[i]="${HOSTS_V4[i]}:2380"
      else
        ETCD_CLIENT[i]="127.0.0.1:${ports[2 * i]}"
        ETCD_PEER[i]="127.0.0.1:${ports[2 * i + 1]}"
      fi
      rm -rf -- "${ETCD_DIR:?}/e$i"
    done
    for ((i = 0; i < n; i++)); do etcd_start "$i" || return 1; done
    left=$(((deadline - ${EPOCHREALTIME/./}) / 1000000))
    ((left > 0)) && _etcd_wait_healthy_or_exit "$left" && return 0
    for ((i = 0; i < n; i++)); do _etcd_log "--- e$i (try $try):"; tail -5 "$ETCD_DIR/e$i.log" >&2; done
    [[ $ETCD_MODE == loopback ]] && _etcd_any_exited || break
    _etcd_log "etcd_up: a member exited at start (a port taken meanwhile?); new ports"
    for ((i = 0; i < n; i++)); do etcd_kill "$i"; done
  done
  _etcd_log "etcd_up: the cluster is not healthy within 30 s"
  return 1
}

# 0 when a started member is no longer running.
_etcd_any_exited() {
  local i
  for ((i = 0; i < ETCD_N; i++)); do
    [[ -n ${ETCD_PID[i]:-} ]] || continue
    if ! kill -0 "${ETCD_PID[i]}" 2>/dev/null || [[ $(ps -o stat= -p "${ETCD_PID[i]}" 2>/dev/null) == Z* ]]; then
      return 0
    fi
  done
  return 1
}

# etcd_wait_healthy for every member, giving up at once when one has exited.
_etcd_wait_healthy_or_exit() {
  local deadline=$((${EPOCHREALTIME/./} + $1 * 1000000))
  while :; do
    etcd_wait_healthy 1 && return 0
    _etcd_any_exited && return 1
    ((${EPOCHREALTIME/./} >= deadline)) && return 1
  done
}

etcd_down() {
  local - i
  set +e +u
  [[ -n ${_ETCD_UP:-} ]] || return 0
  for ((i = 0; i < ${ETCD_N:-0}; i++)); do etcd_kill "$i"; done
  wait 2>/dev/null  # Reaps the members' background jobs.
  [[ -n ${ETCD_DIR:-} && $ETCD_DIR == /tmp/meshrun-etcd.* ]] && rm -rf -- "$ETCD_DIR"
  _ETCD_UP=
  return 0
}
