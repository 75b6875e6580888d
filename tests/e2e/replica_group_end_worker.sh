#!/bin/sh
# A worker of replica_groups_end_test.sh: appends "group rank pid" to $OUT/starts, then
#   in group $FINISH_GROUP exits 0 at once (its group finishes first);
#   in group $FAIL_GROUP exits 3 at once (with --max_restarts=0 its group fails);
#   in group $CRASH_GROUP exits 3 once $OUT/crash exists;
#   else runs until $OUT/release exists (exit 0), at most 120 s (exit 1).
echo "$REPLICA_GROUP_ID $RANK $$" >> "$OUT/starts"
[ "$REPLICA_GROUP_ID" = "${FINISH_GROUP:--1}" ] && exit 0
[ "$REPLICA_GROUP_ID" = "${FAIL_GROUP:--1}" ] && exit 3
i=0
while [ "$i" -lt 1200 ]; do
  [ -e "$OUT/release" ] && exit 0
  [ "$REPLICA_GROUP_ID" = "${CRASH_GROUP:--1}" ] && [ -e "$OUT/crash" ] && exit 3
  sleep 0.1
  i=$((i + 1))
done
exit 1
