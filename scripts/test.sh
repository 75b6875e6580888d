#!/usr/bin/env bash
# Builds meshrun and runs the whole test suite (unit and end-to-end tests on
# loopback). Tests that need a GPU skip themselves on machines without one.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd build
# The tests labelled "scale" (minutes each, at full scale), "jepsen" (the
# Jepsen-style checker, and replicas that lie on purpose), "bench" and "long"
# (one that must run alone for about a minute) run in CI apart:
# scripts/scale-test.sh.
bash ../scripts/run-ctest.sh --output-on-failure -j2 --timeout 300 -LE 'scale|jepsen|bench|long'
