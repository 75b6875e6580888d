#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh runs into one folder (default .gpubundle/
# in the repository; a relative DEST is taken from the current folder), for a
# GPU machine that cannot install Debian's packages (no network, another
# distribution): the built programs, every shared library they load except
# the C library, the CUDA driver and NCCL (NCCL alone is 218 MB; the GPU
# machine's own libnccl.so.2 is used), and gpu-check.sh itself. About 30 MB,
# debug info stripped. Build first (scripts/build.sh). The programs need a
# driver for the CUDA version they were built with (CUDA 13 here: driver
# 580 or newer). Then, there: bash .gpubundle/gpu-check.sh
#   usage: scripts/gpu-bundle.sh [DEST]
set -euo pipefail
dest="$(realpath -m "${1:-$(dirname "$0")/../.gpubundle}")"
cd "$(dirname "$0")/.."
# Replace only an earlier bundle, never another folder.
if [[ -e "$dest" && ! -e "$dest/.meshrun-gpu-bundle" ]]; then
  echo "gpu-bundle: $dest exists and is not a bundle made by this script; not replacing it" >&2
  exit 2
fi
progs=(build/tests/gpu_tests build/launcher/meshrun build/launcher/meshrun-worker-shim build/examples/two_d_setup build/examples/hsdp
       build/examples/three_d_slicing)
# The mesh-init benchmark's worker travels too when built (bench/mesh_init).
[[ -x build/bench/mesh_init_bench ]] && progs+=(build/bench/mesh_init_bench)
for p in "${progs[@]}"; do [[ -x "$p" ]] || { echo "gpu-bundle: $p is not built; run scripts/build.sh" >&2; exit 1; }; done
rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/lib"
touch "$dest/.meshrun-gpu-bundle"
cp scripts/gpu-check.sh "$dest/gpu-check.sh"
for p in "${progs[@]}"; do strip --strip-debug -o "$dest/bin/$(basename "$p")" "$p"; done
# The C library and loader stay the machine's own; so do the driver and NCCL.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libcuda\.so|libnccl\.so)'
ldd "${progs[@]}" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u | while read -r name path; do
  if [[ "$name" =~ $skip ]]; then continue; fi
  strip --strip-debug -o "$dest/lib/$name" "$path"
done
# libmesh's NCCL backend, which libmesh loads from its own folder (libmesh/nccl/plugin.h).
if [[ -e build/libmesh/libmeshrun_mesh_nccl.so.0 ]]; then
  strip --strip-debug -o "$dest/lib/libmeshrun_mesh_nccl.so.0" build/libmesh/libmeshrun_mesh_nccl.so.0
fi

# bundle/meshrun: meshrun with the bundle's libraries and the machine's
# NCCL (NCCL_LIB_DIR, else the first folder below holding libnccl.so.2) for
# it and its workers only, so that other programs on the machine (a PyTorch
# compared against it) keep their own libraries.
cat > "$dest/meshrun" <<'WRAP'
#!/bin/sh
d="$(dirname "$(readlink -f "$0")")"
nccl="${NCCL_LIB_DIR:-}"
for dir in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu; do
  [ -z "$nccl" ] && [ -e "$dir/libnccl.so.2" ] && nccl="$dir"
done
LD_LIBRARY_PATH="$d/lib${nccl:+:$nccl}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$d/bin/meshrun" "$@"
WRAP
chmod +x "$dest/meshrun"
du -sh "$dest"
