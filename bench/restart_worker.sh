#!/bin/sh
# Worker of bench/restart_latency, the same program for meshrun and torchrun.
#
# Usage: restart_worker.sh fail SLEEP
#        restart_worker.sh sleep SLEEP WORLD      (log: $RESTART_BENCH_LOG)
#
# On start, appends one line to $RESTART_BENCH_LOG (opened with O_APPEND by
# the shell's >>, written with one write(2)):
#   <date +%s.%N> start RANK TORCHELASTIC_RESTART_COUNT WORLD_SIZE MESHRUN_ROUND pid
# (MESHRUN_ROUND is "-" under torchrun).  Then:
#   fail:  in attempt 0, RANK 1 sleeps 0.5 s (so that every worker has
#          started), creates the marker $RESTART_BENCH_LOG.failed, appends
#          "<date +%s.%N> fail ..." and exits 1; every other worker execs
#          `sleep SLEEP`, so SIGTERM ends it at once.  In a later attempt
#          (the marker exists) every worker exits 0 right after its start
#          line.  The marker, not TORCHELASTIC_RESTART_COUNT, tells the
#          attempts apart: torchrun counts restarts per node, so after a
#          failure on one node the other node's workers restart with 0.
#   sleep: while WORLD_SIZE is WORLD, every worker execs `sleep SLEEP` (the
#          harness then kills a node).  In a round with another WORLD_SIZE
#          every worker exits 0 right after its start line.  (A lost node is
#          a membership change: TORCHELASTIC_RESTART_COUNT does not move,
#          in meshrun as in torchrun, so the world size tells the rounds
#          apart.)
#
# A /bin/sh script rather than Python keeps the start-up cost small (about a
# millisecond plus one fork/exec of date); it is the same for both launchers.

log=${RESTART_BENCH_LOG:?RESTART_BENCH_LOG is not set}
mode=${1:?usage: restart_worker.sh fail|sleep SLEEP}
sleep_s=${2:-30}
info="${RANK:-?} ${TORCHELASTIC_RESTART_COUNT:-?} ${WORLD_SIZE:-?} ${MESHRUN_ROUND:--} $$"

printf '%s start %s\n' "$(date +%s.%N)" "$info" >>"$log"

if [ "$mode" = sleep ]; then
    [ "${WORLD_SIZE:-}" = "${3:?usage: restart_worker.sh sleep SLEEP WORLD}" ] || exit 0
    exec sleep "$sleep_s"
fi
if [ -e "$log.failed" ]; then
    exit 0
fi
if [ "${RANK:-}" = 1 ]; then
    sleep 0.5
    : >"$log.failed"
    printf '%s fail %s\n' "$(date +%s.%N)" "$info" >>"$log"
    exit 1
fi
exec sleep "$sleep_s"
