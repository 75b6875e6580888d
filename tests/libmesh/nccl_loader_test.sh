#!/usr/bin/env bash
# libmesh's NCCL backend finds NCCL and the CUDA driver at run time
# (libmesh/nccl/libraries.h), without a GPU here: each case runs the main
# job's worker with --device cuda and checks the one line it fails with.
#   system: NCCL from ld.so's cache (this machine's CUDA 13 toolkit), no driver;
#           then the toolkit's stub driver (libcuda.so.1), which the backend asks
#           for a device: it answers CUDA_ERROR_STUB_LIBRARY.
#   none:   no NCCL and no driver anywhere (ld.so's cache hidden): one line
#           naming every place it looked.
#   cu12:   NCCL and the CUDA 12 runtime only as a PyTorch cu12 image has them
#           (pip's nvidia-nccl-cu12 and nvidia-cuda-runtime-cu12 wheels in a
#           venv whose bin/ is on PATH; no LD_LIBRARY_PATH, ld.so's cache
#           hidden): NCCL is found in the venv, and the stub driver is asked.
# usage: nccl_loader_test.sh system|cu12 MESHRUN TWO_D_SETUP STUB_LIBCUDA [CACHE_DIR]
#   (0 pass, 1 fail, 77 skip; CACHE_DIR keeps the venv, keyed by the pinned versions)
set -uo pipefail
mode=${1:?usage: nccl_loader_test.sh system|cu12 MESHRUN TWO_D_SETUP STUB_LIBCUDA [CACHE_DIR]}
meshrun=$(readlink -f "${2:?}")
worker=$(readlink -f "${3:?}")
stub=${4:?}
cache=${5:-$HOME/.cache/meshrun-tests}
here=$(cd "$(dirname "$0")" && pwd)

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIPPED: $*"; exit 77; }

T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# The stub driver under the name the backend opens.
mkdir -p "$T/stub" "$T/home"
[[ -f $stub ]] || skip "no stub libcuda.so at $stub (CUDA toolkit)"
ln -s "$stub" "$T/stub/libcuda.so.1"

# run_cuda NAME [ENV...]: the worker with --device cuda, one rank, in a clean
# environment plus ENV; its output in $T/NAME.out. Fails if it exits 0.
run_cuda() {
  local name=$1; shift
  env -i HOME="$T/home" PATH=/usr/bin:/bin "$@" \
    timeout 60 "$meshrun" --standalone --nproc_per_node=1 "$worker" --device cuda --shape 1,1 > "$T/$name.out" 2>&1
  local rc=$?
  ((rc != 0)) || { cat "$T/$name.out"; fail "$name: --device cuda exited 0 without a GPU"; }
  ((rc != 124)) || { cat "$T/$name.out"; fail "$name: --device cuda did not end within 60 s"; }
  echo "--- $name (exit $rc): $(grep -m1 "device type 'cuda'" "$T/$name.out")"
}
# expect NAME TEXT...: one line of NAME's output names the failure
# ("device type 'cuda'") and holds every TEXT (fixed strings).
expect() {
  local name=$1 lines; shift
  lines=$(grep -F "device type 'cuda'" "$T/$name.out")
  for text in "$@"; do lines=$(grep -F -- "$text" <<< "$lines"); done
  [[ -n $lines ]] || { cat "$T/$name.out"; fail "$name: no one line with: $*"; }
}
# HIDE_CACHE: a command prefix that runs with ld.so's cache empty (a private
# mount namespace), so NCCL in /usr/local/cuda*/lib is not found; /lib and
# /usr/lib still are.
HIDE_CACHE=(unshare --mount --propagation private /bin/sh -c 'mount --bind /dev/null /etc/ld.so.cache && exec "$@"' sh)

case $mode in
  system)
    system_nccl=$(/sbin/ldconfig -p | awk '$1 == "libnccl.so.2" {print $NF; exit}')
    [[ -n $system_nccl ]] || skip "no libnccl.so.2 in ld.so's cache"
    [[ $(id -u) == 0 ]] || skip "needs root (a mount namespace hides ld.so's cache)"
    run_cuda system-no-driver
    expect system-no-driver "the CUDA driver (libcuda.so.1) was not found on the library path" "was found: $system_nccl"
    run_cuda system-stub LD_LIBRARY_PATH="$T/stub"
    expect system-stub "the CUDA driver ($T/stub/libcuda.so.1) answered CUDA_ERROR_STUB_LIBRARY" \
      "when asked for a device" "from $system_nccl"
    run_cuda none "${HIDE_CACHE[@]}"
    expect none "NCCL (libnccl.so.2) was not found on the library path" \
      "nor as pip's NCCL wheel in /usr/lib/python3/dist-packages/nvidia/nccl/lib" \
      "set MESHRUN_NCCL_LIBRARY" "; and the CUDA driver (libcuda.so.1) was not found"
    run_cuda explicit MESHRUN_NCCL_LIBRARY="$T/no-such-libnccl.so.2"
    expect explicit "MESHRUN_NCCL_LIBRARY=$T/no-such-libnccl.so.2 could not be loaded"
    ;;
  cu12)
    [[ $(id -u) == 0 ]] || skip "needs root (a mount namespace hides ld.so's cache)"
    reqs="$here/cu12-requirements.txt"
    key=$(sha256sum "$reqs" | cut -c1-12)
    venv="$cache/cu12-venv-$key"
    if [[ ! -x $venv/bin/python3 || ! -f $venv/.complete ]]; then
      rm -rf "$venv" && mkdir -p "$cache"
      python3 -m venv "$venv" || skip "python3 -m venv failed (python3-venv)"
      timeout 900 "$venv/bin/pip" install -q --no-deps -r "$reqs" ||
        { rm -rf "$venv"; skip "pip could not install $(tr '\n' ' ' < "$reqs")(PyPI unreachable?)"; }
      touch "$venv/.complete"
    fi
    site=$("$venv/bin/python3" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    nccl="$site/nvidia/nccl/lib/libnccl.so.2"
    [[ -f $nccl && -f $site/nvidia/cuda_runtime/lib/libcudart.so.12 ]] || fail "the venv lacks $nccl or libcudart.so.12"
    run_cuda cu12-stub PATH="$venv/bin:/usr/bin:/bin" LD_LIBRARY_PATH="$T/stub" "${HIDE_CACHE[@]}"
    expect cu12-stub "answered CUDA_ERROR_STUB_LIBRARY" "when asked for a device" "NCCL 2.27.3 from $nccl"
    run_cuda cu12-venv VIRTUAL_ENV="$venv" "${HIDE_CACHE[@]}"
    expect cu12-venv "the CUDA driver (libcuda.so.1) was not found" "(NCCL 2.27.3 was found: $nccl)"
    ;;
  *) fail "unknown mode '$mode' (system or cu12)" ;;
esac
echo "PASS: nccl loader ($mode)"
