# shellcheck shell=bash disable=SC2034  # (globals are for callers)
# replicas.sh: 3 `meshrun server` replicas on loopback over the etcd cluster of
# tests/etcd/etcd_cluster.sh, for shell tests. Source after etcd_cluster.sh and wait_for.sh.
#
#   etcd_up 3
#   start_replicas MESHRUN WORK PREFIX [SERVER FLAGS...]
#       # replica i at a free port of 127.0.0.1, its etcd list starting with member i, state
#       # under etcd key PREFIX, log WORK/server$i.log, pid in server_pid[i] (the caller's
#       # cleanup kills them); sets endpoints="127.0.0.1:P0,127.0.0.1:P1,127.0.0.1:P2".
#       # 1 when they do not all listen within 20 s.
#   leader_now   # the index (0..2) of the replica that leads now (meshrun status); 1 if none
start_replicas() {
  local i j members
  REPLICAS_MESHRUN=$1 REPLICAS_WORK=$2
  local prefix=$3
  shift 3
  for i in 0 1 2; do
    members=${ETCD_CLIENT[i]}
    for j in 0 1 2; do ((j != i)) && members+=",${ETCD_CLIENT[j]}"; done
    "$REPLICAS_MESHRUN" server --host 127.0.0.1 --port 0 --port_file "$REPLICAS_WORK/port$i" \
      --state "etcd://$members/$prefix" "$@" >>"$REPLICAS_WORK/server$i.log" 2>&1 &
    server_pid[i]=$!
  done
  _replicas_listening() { [[ -s $REPLICAS_WORK/port0 && -s $REPLICAS_WORK/port1 && -s $REPLICAS_WORK/port2 ]]; }
  wait_for 20 _replicas_listening || return 1
  endpoints=
  for i in 0 1 2; do endpoints+="${endpoints:+,}127.0.0.1:$(cat "$REPLICAS_WORK/port$i")"; done
}

leader_now() {
  local line i
  line=$("$REPLICAS_MESHRUN" status --rdzv_endpoint="$endpoints" --timeout 2 2>/dev/null | grep -m1 "^replicas")
  for i in 0 1 2; do
    [[ $line == *": 127.0.0.1:$(cat "$REPLICAS_WORK/port$i") (leader)"* ]] && { echo "$i"; return 0; }
  done
  return 1
}
