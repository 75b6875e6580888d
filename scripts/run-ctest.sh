#!/usr/bin/env bash
# Runs ctest in the current build folder with the given arguments, then says
# why each skipped test skipped (CTest itself prints no output for one).
# Exits with ctest's status.
# usage: (cd BUILD_DIR && bash SOURCE/scripts/run-ctest.sh CTEST_ARGS...)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p Testing
ctest "$@" 2>&1 | tee Testing/ctest-output.txt
rc=${PIPESTATUS[0]}
python3 "$here/skip-reasons.py" Testing/ctest-output.txt . || true
exit "$rc"
