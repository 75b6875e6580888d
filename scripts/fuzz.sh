#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/) with clang, ASan and UBSan into
# build-fuzz/ (only the libraries they need) and runs each for a bounded time
# from its seed corpus (tests/fuzz/corpus/<target>/). Fails when any target
# crashes, leaks, hangs or runs out of memory; the input that did it is left in
# build-fuzz/crashes/<target>/ (fix the bug, then keep the input in
# tests/fuzz/regressions/<target>/, which the normal test suite replays).
#   FUZZ_SECONDS   seconds per target (default 25)
#   FUZZ_TARGETS   the targets to run (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
SECONDS_EACH="${FUZZ_SECONDS:-25}"
TARGETS="${FUZZ_TARGETS:-rendezvous endpoint rdzv_conf error_file mesh_cmd command_line etcd_url tcpstore lighthouse}"

start=$(date +%s)
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DMESHRUN_FUZZ=ON -DMESHRUN_BUILD_TESTS=OFF -DMESHRUN_WITH_NCCL=OFF >/dev/null
cmake --build build-fuzz -j2 --target fuzz_targets
echo "fuzz: build took $(( $(date +%s) - start )) s"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
failed=()
for t in $TARGETS; do
  work="build-fuzz/corpus/$t"        # grows while fuzzing; seeds stay untouched
  crashes="build-fuzz/crashes/$t"
  mkdir -p "$work" "$crashes"
  log="build-fuzz/fuzz-$t.log"
  if build-fuzz/tests/fuzz/fuzz_"$t" "$work" "tests/fuzz/corpus/$t" \
       -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -timeout=10 -max_len=4096 \
       -artifact_prefix="$crashes/" -print_final_stats=1 >"$log" 2>&1; then
    echo "fuzz: $t: ok ($(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$') runs)"
  else
    echo "fuzz: $t: FAILED; the input is in $crashes/; the end of $log:"
    tail -40 "$log"
    failed+=("$t")
  fi
done
echo "fuzz: took $(( $(date +%s) - start )) s in all"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]}"
  exit 1
fi
