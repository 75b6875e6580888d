#!/usr/bin/env bash
# Builds meshrun with AddressSanitizer and UndefinedBehaviorSanitizer (g++) into
# build-asan/ and runs the whole test suite there. Any ASan/UBSan report fails the
# test that triggered it (UBSan is made fatal). Python (torch) workers are not
# instrumented, which is fine: the launcher, agent and server that run them are.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DCMAKE_C_FLAGS="$SAN" -DCMAKE_CXX_FLAGS="$SAN" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build build-asan -j2
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# Leaks inside system libraries (tests/lsan.supp says which and why).
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan.supp:print_suppressions=0}"
# The install test builds a program against the installed libmesh: it must be
# instrumented too (an uninstrumented main before libasan crashes at start).
export CXXFLAGS="$SAN" LDFLAGS="-fsanitize=address,undefined"
cd build-asan
bash ../scripts/run-ctest.sh --output-on-failure -j2 --timeout 600 -LE 'scale|jepsen|bench|long'  # Full-scale bounds hold in the plain build only.
# meshrun's own OpenSSL code once more, unwinding fully (slow, so only these
# tests): the suite above suppresses libcrypto's leaks, whose fast-unwound
# stacks cannot tell OpenSSL's per-thread state from a leaked X509 of ours.
echo "sanitize: meshrun's OpenSSL code (TLS files, the TLS probe) with full unwinding"
ASAN_OPTIONS="$ASAN_OPTIONS:fast_unwind_on_malloc=0:malloc_context_size=64" \
  LSAN_OPTIONS="suppressions=$PWD/../tests/lsan-openssl.supp:print_suppressions=0" \
  ./tests/unit_tests "[security],[tls]"
