#!/usr/bin/env bash
# A static hwloc for the portable meshrun (cmake/MeshrunPortable.cmake):
# Debian's libhwloc.a needs libudev, which Debian ships as a shared library
# only. This builds the Debian source of the installed libhwloc-dev
# (cmake/debian-source.sh) as a static, position-independent library without
# the optional parts that need other libraries (udev, libxml2, PCI, GPUs;
# meshrun's --numa_binding uses the CPU and NUMA topology only).
#   usage: cmake/debian-static-hwloc.sh OUT_DIR CC [LAUNCHER]
# Writes OUT_DIR/libhwloc.a; does nothing when OUT_DIR/stamp names the
# installed version already.
set -euo pipefail
[[ $# -ge 2 ]] || { echo "usage: $0 OUT_DIR CC [LAUNCHER]" >&2; exit 2; }
out="$1" cc="$2" launcher="${3:-}"
v="$(dpkg-query -W -f='${source:Package}=${source:Version}' libhwloc-dev 2>/dev/null)" ||
  { echo "debian-static-hwloc: libhwloc-dev is not installed (scripts/install-deps.sh installs it)" >&2; exit 1; }
stamp="$v $(sha256sum "$0" | cut -c1-16)"
if [[ -f "$out/stamp" && "$(cat "$out/stamp")" == "$stamp" ]]; then exit 0; fi
rm -rf "$out"
mkdir -p "$out/src"
bash "$(dirname "$0")/debian-source.sh" "$out/src" "$v"
dir="$out/src/$(dpkg-query -W -f='${source:Package}-${source:Upstream-Version}' libhwloc-dev)"
[[ -x "$dir/configure" ]] || { echo "debian-static-hwloc: no configure in $dir" >&2; exit 1; }
(
  cd "$dir"
  CC="${launcher:+$launcher }$cc" CFLAGS="$(dpkg-buildflags --get CFLAGS) -fPIC" \
    ./configure --enable-static --disable-shared --with-pic --disable-plugins --disable-libudev --disable-libxml2 \
      --disable-pci --disable-opencl --disable-cuda --disable-nvml --disable-rsmi --disable-levelzero --disable-gl \
      --disable-cairo --disable-io --disable-doxygen --disable-readme > "$out/configure.log" 2>&1 ||
    { tail -30 "$out/configure.log" >&2; echo "debian-static-hwloc: configure failed ($out/configure.log)" >&2; exit 1; }
  make -j2 -C hwloc libhwloc.la > "$out/make.log" 2>&1 ||
    { tail -30 "$out/make.log" >&2; echo "debian-static-hwloc: make failed ($out/make.log)" >&2; exit 1; }
)
cp "$dir/hwloc/.libs/libhwloc.a" "$out/libhwloc.a"
if nm "$out/libhwloc.a" | grep -qE ' U (udev_|xml)'; then
  echo "debian-static-hwloc: $out/libhwloc.a still needs udev or libxml2" >&2; exit 1
fi
rm -rf "$out/src"
echo "$stamp" > "$out/stamp"
