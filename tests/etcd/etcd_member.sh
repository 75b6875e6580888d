#!/usr/bin/env bash
# etcd_member.sh: runs one etcd member for the tests and benchmarks, in the
# foreground (exec: its pid is etcd's, so `kill -9` of it kills etcd). The one
# place that knows the flags of a test member: tests/support/etcd_cluster.cc
# (C++ tests), tests/etcd/etcd_cluster.sh (shell tests, namespace hosts) and
# bench/etcd/run.sh start members through it.
#
#   etcd_member.sh --name NAME --data-dir DIR --client HOST:PORT --peer HOST:PORT
#                  --cluster NAME=http://HOST:PORT,... [--token T] [--fast] [--no-fsync]
#                  [--tls DIR [--client-cert-auth]] [--die-with-parent] [--pid-file FILE]
#                  [-- ETCD_FLAGS...]
#
#   --fast             --heartbeat-interval=50 --election-timeout=500: quicker elections;
#                      etcd's lease floor becomes 1 s (2 s with its defaults)
#   --no-fsync         --unsafe-no-fsync: for tests only (never for operators: a crash
#                      of the host can lose acknowledged writes)
#   --tls DIR          clients speak TLS: DIR/host.crt, DIR/host.key, and DIR/ca.crt
#                      with --client-cert-auth (the tests' certificates,
#                      tests/support/certs.h); peers stay plain
#   --die-with-parent  SIGKILL when the process that started it dies (setpriv
#                      --pdeathsig), so a crashed test leaves no member behind
#   --pid-file FILE    writes etcd's pid (this process's, before the exec) to FILE
#   -- ETCD_FLAGS...   more flags for etcd itself (e.g. --auth-token-ttl 1)
# An existing data dir is reused (etcd then ignores the --initial-cluster flags), so
# the same command restarts a killed member.
set -euo pipefail
name= dir= client= peer= cluster= token=meshrun-test fast=0 nofsync=0 tls= cca=0 pdeath=0 pidfile=
while (($#)); do
  case $1 in
    --name) name=$2; shift ;;
    --data-dir) dir=$2; shift ;;
    --client) client=$2; shift ;;
    --peer) peer=$2; shift ;;
    --cluster) cluster=$2; shift ;;
    --token) token=$2; shift ;;
    --fast) fast=1 ;;
    --no-fsync) nofsync=1 ;;
    --tls) tls=$2; shift ;;
    --client-cert-auth) cca=1 ;;
    --die-with-parent) pdeath=1 ;;
    --pid-file) pidfile=$2; shift ;;
    --) shift; break ;;
    *) echo "etcd_member.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
for v in name dir client peer cluster; do
  [[ -n ${!v} ]] || { echo "etcd_member.sh: --${v/dir/data-dir} is required" >&2; exit 2; }
done
ETCD=${ETCD_BINARY:-etcd}
scheme=http
args=()
if [[ -n $tls ]]; then
  scheme=https
  args+=(--cert-file "$tls/host.crt" --key-file "$tls/host.key")
  ((cca)) && args+=(--client-cert-auth --trusted-ca-file "$tls/ca.crt")
fi
((fast)) && args+=(--heartbeat-interval 50 --election-timeout 500)
((nofsync)) && args+=(--unsafe-no-fsync)
cmd=("$ETCD" --name "$name" --data-dir "$dir"
  --listen-client-urls "$scheme://$client" --advertise-client-urls "$scheme://$client"
  --listen-peer-urls "http://$peer" --initial-advertise-peer-urls "http://$peer"
  --initial-cluster "$cluster" --initial-cluster-state new --initial-cluster-token "$token"
  --log-level warn --logger zap "${args[@]}" "$@")
[[ -n $pidfile ]] && echo $$ >"$pidfile"
if ((pdeath)); then exec setpriv --pdeathsig KILL -- "${cmd[@]}"; fi
exec "${cmd[@]}"
