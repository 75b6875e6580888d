# shellcheck shell=bash
# rdzv_server.sh: a `meshrun server` on loopback for shell tests. Source after wait_for.sh.
#
#   start_rdzv_server MESHRUN WORK   # the server at a free port of 127.0.0.1, its log in
#                                    # WORK/server.log, its pid appended to the caller's `pids`
#                                    # array (the caller's cleanup kills it); sets
#                                    # endpoint=127.0.0.1:PORT. 1 when it does not listen
#                                    # within 20 s.
start_rdzv_server() {
  "$1" server --host 127.0.0.1 --port 0 --port_file "$2/port" >"$2/server.log" 2>&1 &
  pids+=($!)
  local listening="[[ -s $2/port ]]"
  wait_for 20 eval "$listening" || return 1
  endpoint=127.0.0.1:$(cat "$2/port")
}
