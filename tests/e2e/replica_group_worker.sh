#!/bin/sh
# A worker of replica_groups_test.sh: appends one line per start to $OUT/starts
# ("group groups rank world_size local_rank master_addr master_port restart_count run_id
# lighthouse pid"), then runs until $OUT/release exists (at most 120 s). The worker of rank 0
# of group $FAIL_GROUP exits 3 at its first start (restart count 0), as a crashed worker would.
echo "$REPLICA_GROUP_ID $NUM_REPLICA_GROUPS $RANK $WORLD_SIZE $LOCAL_RANK $MASTER_ADDR $MASTER_PORT" \
  "$TORCHELASTIC_RESTART_COUNT $TORCHELASTIC_RUN_ID ${TORCHFT_LIGHTHOUSE:--} $$" >> "$OUT/starts"
if [ "$REPLICA_GROUP_ID" = "${FAIL_GROUP:--1}" ] && [ "$RANK" = 0 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  exit 3
fi
i=0
while [ ! -e "$OUT/release" ] && [ "$i" -lt 1200 ]; do
  sleep 0.1
  i=$((i + 1))
done
[ -e "$OUT/release" ]
