# shellcheck shell=bash disable=SC2016,SC2034  # (single quotes on purpose; globals are for callers)
# netns_hosts.sh: N fake hosts on this machine, built of Linux network namespaces.
#
# Source it from a bash test script (root only):
#
#   source "$SRC/tests/hosts/netns_hosts.sh"
#   hosts_require                      # not root / no ip, unshare / no netns: "SKIP: ..." and exit 77
#   hosts_up 3 [--debian-hosts] [--decoy-iface]
#   on_host 1 ping -c1 -W2 host2       # foreground; append & to background it
#   hosts_wait_tcp 0 "${HOSTS_V4[1]}" 29500 10
#   host_link 1 down; host_link 1 up   # cut / restore host 1's cable
#   host_kill 2                        # SIGKILL everything running on host 2
#   host_pids 2                        # pids in host 2's namespace
#   hosts_down                         # idempotent; also runs on EXIT
#
# TEARDOWN: hosts_up installs `trap hosts_down EXIT` and makes SIGINT, SIGTERM and SIGHUP exit
# through it (exit status 130, 143, 129). A caller that sets its own EXIT trap afterwards
# replaces ours and MUST call hosts_down from it, e.g. `trap 'my_cleanup; hosts_down' EXIT`.
# Bash runs a trap only after the foreground command ends, so bound long foreground commands
# with `timeout`. A run that was SIGKILLed leaves its namespaces behind; the next hosts_up
# reclaims them (its lease's owner pid is dead). hosts_up returns 1 (setup failed) or 2 (bad
# arguments) with a message on stderr; check it (`hosts_up 3 || exit 1`) unless under set -e.
# Bash reports background `on_host ... &` jobs that host_kill/hosts_down kill ("Killed ...")
# on stderr: that is expected. /etc/netns itself is left in place (empty), as ip leaves it.
#
# Layout, for lease k (0..63, first free one; /run/meshrun-hosts/<k>, owner pid inside):
#   host i   namespace mr<k>h<i>, hostname host<i> (on_host), interface eth0 (HOSTS_IF[i])
#            with 192.168.(64+k).(10+i)/24 and fd6d:72:<k>::<10+i>/64 (nodad), lo up
#            (HOSTS_V6 holds the canonical text: fd6d:72::10 for k=0, fd6d:72:5::10 for k=5)
#   switch   namespace mr<k>sw with bridge br0 and one veth end h<i> per host
#   /etc/netns/mr<k>h<i>/hosts   (ip netns exec bind-mounts it over /etc/hosts)
#   --debian-hosts  a host's own file maps its own name to 127.0.1.1 (as Debian/Ubuntu do)
#   --decoy-iface   host 0 also gets decoy0 (172.17.0.1/16, up, listed before eth0, like
#                   docker0: nobody else reaches it). A dummy interface where the kernel has
#                   them, else a veth whose other end sits alone in the switch namespace.
# The root namespace's network is never touched; no resolv.conf is written (inside a host
# there is no route to the real name server, so DNS look-ups fail at once).
#
# Globals set by hosts_up: HOSTS_N, HOSTS_NS[i], HOSTS_NAME[i], HOSTS_V4[i], HOSTS_V6[i],
# HOSTS_IF[i], HOSTS_DIR (scratch dir, 0755, deleted at teardown), HOSTS_SUBNET (192.168.x),
# HOSTS_LEASE (k), HOSTS_SW_NS (switch namespace).

HOSTS_LEASE_ROOT=/run/meshrun-hosts
HOSTS_MAX_LEASES=64
HOSTS_MAX_N=8

_hosts_log() { echo "netns_hosts: $*" >&2; }

# "pid starttime" of a process (starttime guards against pid reuse); empty when it is gone.
_hosts_proc_id() {
  local -; set +e
  local pid=$1 stat rest
  stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
  rest=${stat##*) }                       # fields after "(comm) "
  # shellcheck disable=SC2086
  set -- $rest
  echo "$pid ${20}"                       # field 22 (starttime) is the 20th after comm
}

# Namespaces (in /run/netns) that belong to lease k.
_hosts_lease_namespaces() {
  local -; set +e
  local k=$1
  ip netns list 2>/dev/null | awk -v k="$k" '
    { n = $1; if (n ~ ("^mr" k "(h[0-9]+|sw)$")) print n }'
}

# Kill everything in the given namespaces: SIGTERM, up to term_wait_s, then SIGKILL (bounded).
# Prints the number of processes that needed SIGKILL, then (if any) of those that outlived it.
_hosts_kill_namespaces() {
  local -; set +e
  local term_wait_s=$1; shift
  local ns pids=() p deadline killed=0 left=0
  _hosts_collect() {
    pids=()
    local ns p
    for ns in "$@"; do
      for p in $(ip netns pids "$ns" 2>/dev/null); do pids+=("$p"); done
    done
  }
  _hosts_collect "$@"
  if ((${#pids[@]} > 0 && term_wait_s > 0)); then
    kill -TERM "${pids[@]}" 2>/dev/null
    deadline=$((${EPOCHREALTIME/./} + term_wait_s * 1000000))
    while :; do
      _hosts_collect "$@"
      ((${#pids[@]} == 0)) && break
      ((${EPOCHREALTIME/./} >= deadline)) && break
      sleep 0.05
    done
  fi
  if ((${#pids[@]} > 0)); then
    killed=${#pids[@]}
    # A host dies at once: stop every process first, so none sees another
    # die (an agent reaping its SIGKILLed worker would report a failure no
    # real host loss lets it send), then kill them deepest first: a parent
    # that died before its stopped children would orphan their process
    # group, and the kernel then wakes them with SIGHUP and SIGCONT (a
    # meshrun would shut down gracefully, as no dying host lets it).
    for p in 1 2 3; do
      kill -STOP "${pids[@]}" 2>/dev/null
      _hosts_collect "$@"
    done
    local depth q n stat ordered
    ordered=$(for p in "${pids[@]}"; do
      depth=0 q=$p
      for n in $(seq 64); do
        stat=$(cat "/proc/$q/stat" 2>/dev/null) || break
        stat=${stat##*) }
        q=$(cut -d' ' -f2 <<<"$stat")
        [[ -z $q || $q -le 1 ]] && break
        depth=$((depth + 1))
      done
      echo "$depth $p"
    done | sort -rn | cut -d' ' -f2)
    for p in $ordered; do kill -KILL "$p" 2>/dev/null; done
    deadline=$((${EPOCHREALTIME/./} + 5000000))
    while ((${#pids[@]} > 0)); do
      kill -KILL "${pids[@]}" 2>/dev/null
      sleep 0.05
      _hosts_collect "$@"
      ((${EPOCHREALTIME/./} >= deadline)) && break
    done
    left=${#pids[@]}
  fi
  echo "$killed $left"
}

# Remove everything lease k may own: processes, namespaces, /etc/netns dirs, scratch dir.
# The lease dir itself is left to the caller. Prints "killed left" like _hosts_kill_namespaces.
_hosts_wipe_lease() {
  local -; set +e
  local k=$1 term_wait_s=$2 dir=$3 nss=() ns res
  mapfile -t nss < <(_hosts_lease_namespaces "$k")
  res=$(_hosts_kill_namespaces "$term_wait_s" "${nss[@]}")
  for ns in "${nss[@]}"; do ip netns delete "$ns" 2>/dev/null; done
  for ns in /etc/netns/mr"$k"h* /etc/netns/mr"$k"sw; do
    [[ -e $ns && ${ns##*/} =~ ^mr${k}(h[0-9]+|sw)$ ]] && rm -rf -- "$ns"
  done
  if [[ -n $dir && $dir == /tmp/meshrun-hosts.* && -d $dir ]]; then rm -rf -- "$dir"; fi
  echo "$res"
}

# hosts_require: exit 77 with one "SKIP: <reason>" line unless namespaces can be made here.
hosts_require() {
  local -; set +e
  local tool probe
  if ((EUID != 0)); then echo "SKIP: not root (network namespaces need root)"; exit 77; fi
  for tool in ip unshare awk flock; do
    if ! command -v "$tool" >/dev/null 2>&1; then echo "SKIP: '$tool' not found"; exit 77; fi
  done
  # Probe namespaces of earlier runs that were killed mid-way.
  for probe in $(ip netns list 2>/dev/null | awk '$1 ~ /^mrprobe[0-9]+$/ {print $1}'); do
    [[ -d /proc/${probe#mrprobe} ]] || ip netns delete "$probe" >/dev/null 2>&1
  done
  # A probe can fail while another test's ip(8) sets up /run/netns (its first mount): try
  # it up to 3 times, so that only a machine without namespaces skips, and name ip's error.
  local try why
  for try in 1 2 3; do
    why=$(_hosts_probe "mrprobe$BASHPID") && return 0
    ((try < 3)) && sleep 0.2
  done
  echo "SKIP: $why"; exit 77
}

# _hosts_probe NAME: makes and deletes one namespace with a veth pair, a bridge and a UTS
# namespace inside; on failure prints why (with ip's own error) and returns 1.
_hosts_probe() {
  local probe=$1 err
  ip netns delete "$probe" >/dev/null 2>&1
  if ! err=$(ip netns add "$probe" 2>&1); then
    echo "cannot create a network namespace (ip netns add: ${err//$'\n'/ })"; return 1
  fi
  if ! err=$(ip -n "$probe" link add mrpa type veth peer name mrpb 2>&1) ||
     ! err=$(ip -n "$probe" link add mrbr type bridge 2>&1); then
    ip netns delete "$probe" >/dev/null 2>&1
    echo "cannot create veth/bridge interfaces in a network namespace (ip: ${err//$'\n'/ })"; return 1
  fi
  if ! err=$(ip netns exec "$probe" unshare --uts true 2>&1); then
    ip netns delete "$probe" >/dev/null 2>&1
    echo "'ip netns exec' + 'unshare --uts' do not work here (${err//$'\n'/ })"; return 1
  fi
  ip netns delete "$probe" >/dev/null 2>&1
  return 0
}

# Take the first free lease (under a lock; stale leases are reclaimed). Sets HOSTS_LEASE.
_hosts_take_lease() {
  local -; set +e
  local k lockfd owner pid start dir now_id res me=$BASHPID
  mkdir -p "$HOSTS_LEASE_ROOT" || return 1
  exec {lockfd}>"$HOSTS_LEASE_ROOT/.lock" || return 1
  if ! flock -w 30 "$lockfd"; then
    exec {lockfd}>&-; _hosts_log "timed out waiting for $HOSTS_LEASE_ROOT/.lock"; return 1
  fi
  HOSTS_LEASE=
  for ((k = 0; k < HOSTS_MAX_LEASES; k++)); do
    if [[ -d $HOSTS_LEASE_ROOT/$k ]]; then
      owner=$(cat "$HOSTS_LEASE_ROOT/$k/owner" 2>/dev/null)
      read -r pid start <<<"$owner"
      if [[ -n $pid ]]; then
        now_id=$(_hosts_proc_id "$pid")
        [[ $now_id == "$pid $start" ]] && continue      # owner alive: in use
      fi
      # Stale (owner dead, or died before writing its pid): reclaim it.
      dir=$(cat "$HOSTS_LEASE_ROOT/$k/dir" 2>/dev/null)
      res=$(_hosts_wipe_lease "$k" 0 "$dir")
      _hosts_log "reclaimed stale lease $k (owner ${pid:-unknown} gone; killed ${res%% *} process(es))"
      rm -rf -- "${HOSTS_LEASE_ROOT:?}/$k"
    fi
    if mkdir "$HOSTS_LEASE_ROOT/$k" 2>/dev/null; then
      _HOSTS_OWNER=$(_hosts_proc_id "$me")
      echo "$_HOSTS_OWNER" >"$HOSTS_LEASE_ROOT/$k/owner"
      HOSTS_LEASE=$k
      break
    fi
  done
  exec {lockfd}>&-
  if [[ -z $HOSTS_LEASE ]]; then _hosts_log "all $HOSTS_MAX_LEASES leases are in use"; return 1; fi
  # Nobody owned k: anything named after it is a leftover (e.g. the lease dir was deleted).
  _hosts_wipe_lease "$HOSTS_LEASE" 0 "" >/dev/null
  return 0
}

_hosts_on_signal() { exit "$1"; }

# hosts_up N [--debian-hosts] [--decoy-iface]
hosts_up() {
  local -; set +e  # never abort a caller running with set -e half-way
  local n=${1:-} debian=0 decoy=0 arg i j k ns sw f
  shift || true
  for arg in "$@"; do
    case $arg in
      --debian-hosts) debian=1 ;;
      --decoy-iface) decoy=1 ;;
      *) _hosts_log "hosts_up: unknown option '$arg'"; return 2 ;;
    esac
  done
  if ! [[ $n =~ ^[1-9][0-9]*$ ]] || ((n > HOSTS_MAX_N)); then
    _hosts_log "hosts_up: N must be 1..$HOSTS_MAX_N, got '$n'"; return 2
  fi
  if [[ -n ${_HOSTS_UP:-} ]]; then _hosts_log "hosts_up: already up (call hosts_down first)"; return 2; fi

  trap hosts_down EXIT
  trap '_hosts_on_signal 130' INT
  trap '_hosts_on_signal 143' TERM
  trap '_hosts_on_signal 129' HUP

  _hosts_take_lease || return 1
  _HOSTS_UP=1
  k=$HOSTS_LEASE
  HOSTS_N=$n
  HOSTS_SUBNET="192.168.$((64 + k))"
  HOSTS_SW_NS="mr${k}sw"
  HOSTS_NS=() HOSTS_NAME=() HOSTS_V4=() HOSTS_V6=() HOSTS_IF=()
  HOSTS_DIR=$(mktemp -d "/tmp/meshrun-hosts.$k.XXXXXX") || { _hosts_log "mktemp failed"; return 1; }
  chmod 0755 "$HOSTS_DIR"
  echo "$HOSTS_DIR" >"$HOSTS_LEASE_ROOT/$k/dir"
  for ((i = 0; i < n; i++)); do
    HOSTS_NS[i]="mr${k}h$i"
    HOSTS_NAME[i]="host$i"
    HOSTS_V4[i]="$HOSTS_SUBNET.$((10 + i))"
    HOSTS_V6[i]="fd6d:72:$k::$((10 + i))"
    ((k == 0)) && HOSTS_V6[i]="fd6d:72::$((10 + i))"   # the canonical text (as inet_ntop writes it)
    HOSTS_IF[i]=eth0
  done

  _hosts_ip() { ip "$@" || { _hosts_log "hosts_up: 'ip $*' failed"; return 1; }; }
  sw=$HOSTS_SW_NS
  _hosts_ip netns add "$sw" || return 1
  _hosts_ip -n "$sw" link set lo up || return 1
  _hosts_ip -n "$sw" link add br0 type bridge stp_state 0 forward_delay 0 || return 1
  _hosts_ip -n "$sw" link set br0 up || return 1
  for ((i = 0; i < n; i++)); do
    ns=${HOSTS_NS[i]}
    _hosts_ip netns add "$ns" || return 1
    _hosts_ip -n "$ns" link set lo up || return 1
    if ((decoy && i == 0)); then
      if ! ip -n "$ns" link add decoy0 type dummy 2>/dev/null; then
        _hosts_ip -n "$sw" link add d0 type veth peer name decoy0 netns "$ns" || return 1
        _hosts_ip -n "$sw" link set d0 up || return 1
      fi
      _hosts_ip -n "$ns" addr add 172.17.0.1/16 dev decoy0 || return 1
      _hosts_ip -n "$ns" link set decoy0 up || return 1
    fi
    _hosts_ip -n "$sw" link add "h$i" type veth peer name eth0 netns "$ns" || return 1
    _hosts_ip -n "$sw" link set "h$i" master br0 || return 1
    _hosts_ip -n "$sw" link set "h$i" up || return 1
    _hosts_ip -n "$ns" addr add "${HOSTS_V4[i]}/24" dev eth0 || return 1
    _hosts_ip -n "$ns" addr add "${HOSTS_V6[i]}/64" dev eth0 nodad || return 1
    _hosts_ip -n "$ns" link set eth0 up || return 1
  done

  for ((i = 0; i < n; i++)); do
    ns=${HOSTS_NS[i]}
    mkdir -p "/etc/netns/$ns" || return 1
    f="/etc/netns/$ns/hosts"
    {
      echo "# written by meshrun tests/hosts/netns_hosts.sh (lease $k, ${HOSTS_NAME[i]})"
      echo "127.0.0.1 localhost"
      echo "::1 localhost ip6-localhost ip6-loopback"
      ((debian)) && echo "127.0.1.1 ${HOSTS_NAME[i]}"
      for ((j = 0; j < n; j++)); do
        ((debian && j == i)) && continue
        echo "${HOSTS_V4[j]} ${HOSTS_NAME[j]}"
        echo "${HOSTS_V6[j]} ${HOSTS_NAME[j]}"
      done
    } >"$f" || return 1
    chmod 0644 "$f"
  done
  return 0
}

# on_host I CMD [ARGS...]: run CMD on host I (its namespace, hostname hostI) in the foreground.
on_host() {
  local -; set +e
  local i=$1; shift
  local ns=${HOSTS_NS[$i]:?on_host: no host $i}
  ip netns exec "$ns" unshare --uts sh -c \
    'hostname "$0" 2>/dev/null || echo "$0" >/proc/sys/kernel/hostname; exec "$@"' "host$i" "$@"
}

# host_link I down|up: cut / restore host I's cable (its veth end in the switch namespace).
host_link() {
  local -; set +e
  local i=$1 state=$2
  [[ $state == up || $state == down ]] || { _hosts_log "host_link: up or down, not '$state'"; return 2; }
  [[ -n ${HOSTS_NS[$i]:-} ]] || { _hosts_log "host_link: no host $i"; return 2; }
  ip -n "$HOSTS_SW_NS" link set "h$i" "$state"
}

# host_pids I: the pids running in host I's namespace, one a line.
host_pids() {
  local -; set +e
  local ns=${HOSTS_NS[$1]:?host_pids: no host $1}
  ip netns pids "$ns" 2>/dev/null
}

# host_kill I: SIGKILL everything in host I's namespace until nothing is left (~5 s at most).
host_kill() {
  local -; set +e
  local ns=${HOSTS_NS[$1]:?host_kill: no host $1} res
  res=$(_hosts_kill_namespaces 0 "$ns")
  if [[ ${res#* } != 0 ]]; then
    _hosts_log "host_kill $1: ${res#* } process(es) still alive after SIGKILL"; return 1
  fi
  return 0
}

# hosts_down: tear everything of this run down. Idempotent; safe in traps.
hosts_down() {
  local - res killed left k prev_int prev_term prev_hup
  set +e +u
  [[ -n ${_HOSTS_UP:-} ]] || return 0
  prev_int=$(trap -p INT) prev_term=$(trap -p TERM) prev_hup=$(trap -p HUP)
  trap '' INT TERM HUP                    # finish the teardown even on a second Ctrl-C
  k=$HOSTS_LEASE
  if [[ -n $k ]]; then
    res=$(_hosts_wipe_lease "$k" 3 "${HOSTS_DIR:-}")
    read -r killed left <<<"$res"
    if ((killed > 0)); then
      _hosts_log "hosts_down: $killed process(es) survived SIGTERM for 3 s and were SIGKILLed"
    fi
    if ((left > 0)); then
      _hosts_log "hosts_down: $left process(es) survived even SIGKILL"
    fi
    if [[ -n $(_hosts_lease_namespaces "$k") ]]; then
      _hosts_log "hosts_down: namespaces left behind: $(_hosts_lease_namespaces "$k" | tr '\n' ' ')"
    fi
    # Release the lease only if it is still ours.
    if [[ $(cat "$HOSTS_LEASE_ROOT/$k/owner" 2>/dev/null) == "${_HOSTS_OWNER:-}" ]]; then
      rm -rf -- "${HOSTS_LEASE_ROOT:?}/$k"
    fi
  fi
  _HOSTS_UP=
  HOSTS_LEASE=
  eval "${prev_int:-trap - INT}"; eval "${prev_term:-trap - TERM}"; eval "${prev_hup:-trap - HUP}"
  return 0
}

# hosts_wait_tcp I ADDR PORT TIMEOUT_S: wait until host I can connect to ADDR:PORT; 1 on timeout.
hosts_wait_tcp() {
  local -; set +e
  local i=$1 addr=$2 port=$3 timeout_s=$4 deadline
  local ns=${HOSTS_NS[$i]:?hosts_wait_tcp: no host $i}
  deadline=$((${EPOCHREALTIME/./} + timeout_s * 1000000))
  while :; do
    if timeout 2 ip netns exec "$ns" bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$addr" "$port" 2>/dev/null; then
      return 0
    fi
    ((${EPOCHREALTIME/./} >= deadline)) && return 1
    sleep 0.1
  done
}
