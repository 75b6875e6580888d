#!/usr/bin/env bash
# The tests at full scale (CTest label "scale"; issue 30) and the Jepsen-style
# test's runs against replicas that lie on purpose (label "lies": the checker
# must catch each lie), apart from the README's suite (scripts/test.sh, 10
# minutes): run by CI after it, on the same build. Today: a failover with
# 786,432 store keys on a real etcd (about 45 s) and two lies (about 25 s
# each), the rendezvous benchmark at small N (label "bench", about 150 s), and
# label "long": tests that take about a minute or must run alone (the torchft
# DDP job through the leading replica's kill on etcd, about 50 s; ft_hsdp with
# a hung worker, about 30 s).
# Builds first when there is no build yet.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -f build/CTestTestfile.cmake ]] || bash scripts/build.sh
cd build
bash ../scripts/run-ctest.sh --output-on-failure --timeout 300 -L 'scale|jepsen|bench|long'
