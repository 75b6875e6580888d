#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh runs into one folder (default .gpubundle/),
# for a GPU machine that cannot install Debian's packages (no network, other
# distribution): the built programs and every shared library they load except
# the C library, the CUDA driver and NCCL (218 MB; the GPU machine's own
# libnccl.so.2 is used). Debug info is stripped. Build first (scripts/build.sh).
# Then, there: GPU_BUNDLE=.gpubundle bash scripts/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
dest="${1:-.gpubundle}"
progs=(build/tests/gpu_tests build/launcher/meshrun build/launcher/meshrun-worker-shim build/examples/two_d_setup build/examples/hsdp
       build/examples/three_d_slicing)
# The mesh-init benchmark's worker travels too when built (bench/mesh_init).
[[ -x build/bench/mesh_init_bench ]] && progs+=(build/bench/mesh_init_bench)
for p in "${progs[@]}"; do [[ -x "$p" ]] || { echo "gpu-bundle: $p is not built; run scripts/build.sh" >&2; exit 1; }; done
rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/lib"
for p in "${progs[@]}"; do strip --strip-debug -o "$dest/bin/$(basename "$p")" "$p"; done
# The C library and loader stay the machine's own; so do the driver and NCCL.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libcuda\.so|libnccl\.so)'
ldd "${progs[@]}" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u | while read -r name path; do
  if [[ "$name" =~ $skip ]]; then continue; fi
  strip --strip-debug -o "$dest/lib/$name" "$path"
done

# bundle/meshrun: meshrun with the bundle's libraries (and NCCL_LIB_DIR's
# NCCL) for it and its workers only, so that other programs on the machine
# (a PyTorch compared against it) keep their own libraries.
cat > "$dest/meshrun" <<'WRAP'
#!/bin/sh
d="$(dirname "$(readlink -f "$0")")"
LD_LIBRARY_PATH="$d/lib${NCCL_LIB_DIR:+:$NCCL_LIB_DIR}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$d/bin/meshrun" "$@"
WRAP
chmod +x "$dest/meshrun"
du -sh "$dest"
