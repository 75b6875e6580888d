#!/usr/bin/env bash
# Builds meshrun and runs the whole test suite (unit and end-to-end tests on
# loopback). Tests that need a GPU skip themselves on machines without one.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd build
# The tests labelled "scale" (minutes each, at full scale) and "lies" (the
# Jepsen-style checker against replicas that lie on purpose) run in CI apart:
# scripts/scale-test.sh.
bash ../scripts/run-ctest.sh --output-on-failure -j2 --timeout 300 -LE 'scale|jepsen|bench'
