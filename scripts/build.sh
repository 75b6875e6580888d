#!/usr/bin/env bash
# Installs what is missing, then configures and builds meshrun into build/.
#   usage: scripts/build.sh [--main]
#     --main   only what the main job runs (scripts/main-job.sh): the build's
#              packages (install-deps.sh --build) and the targets meshrun and
#              two_d_setup. A build/ made this way links Debian's shared
#              libraries (MESHRUN_PORTABLE=OFF: nothing is fetched or built
#              from Debian's sources), has no debug info and no tests; the next plain
#              build.sh makes it portable and adds the rest (compiling
#              everything again). An existing build/ is used as it is.
#     (none)   every package and every target, the tests included, in a
#              portable build (what scripts/package.sh packs)
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  --main)
    bash scripts/install-deps.sh --build
    if [[ ! -f build/CMakeCache.txt ]]; then
      # -O2 without debug info: a fifth less compile time than RelWithDebInfo
      # (docs/performance.md); the test build keeps its debug info.
      cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" \
        -DCMAKE_C_FLAGS_RELEASE="-O2 -DNDEBUG" -DMESHRUN_BUILD_TESTS=OFF -DMESHRUN_PORTABLE=OFF >/dev/null
    fi
    cmake --build build -j2 --target meshrun two_d_setup
    ;;
  "")
    bash scripts/install-deps.sh
    cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMESHRUN_BUILD_TESTS=ON -DMESHRUN_PORTABLE=ON >/dev/null
    cmake --build build -j2
    ;;
  *) echo "build.sh: unknown argument '$1': allowed --main, or none" >&2; exit 2 ;;
esac
