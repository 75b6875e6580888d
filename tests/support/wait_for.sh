# shellcheck shell=bash
# wait_for.sh: waiting for a state in shell tests, bounded in time.
#
#   source "$SRC/tests/support/wait_for.sh"
#   now_ms                        # the wall clock in milliseconds
#   wait_for SECONDS CMD [ARGS...]  # runs CMD every 50 ms until it succeeds; 1 on timeout
now_ms() { echo $((${EPOCHREALTIME/./} / 1000)); }
wait_for() {
  local limit=$(($(now_ms) + $1 * 1000)); shift
  until "$@"; do
    (($(now_ms) >= limit)) && return 1
    sleep 0.05
  done
}
