#!/usr/bin/env bash
# Packs meshrun, from one build and without compiling anything again, into
# dist/ (docs/install.md):
#   meshrun-<version>-linux-x86_64.tar.gz    the portable archive: bin/ lib/ include/
#                                            lib/cmake/meshrun/ share/; glibc only
#   meshrun-<version>-py3-none-manylinux_*.whl   pip install: meshrun in the venv's bin/
#   meshrun_<version>_amd64.deb, meshrun-dev_<version>_amd64.deb   CPack's Debian packages
#   SHA256SUMS, and SHA256SUMS.asc with --sign KEYID (gpg's detached, armored signature)
# The build folder must be a portable build (MESHRUN_PORTABLE=ON, the default
# of scripts/build.sh); build/ is configured and built first when it is not
# there yet, and any build folder is brought up to date (cmake --build).
# Before packing it checks that every program and library needs nothing but
# glibc <= 2.34 (objdump). PyPI tools (auditwheel, wheel; pinned in
# scripts/package-requirements.txt) go into <build>/package-tools/.
#   usage: scripts/package.sh [--build-dir DIR] [--dist DIR] [--only archive,wheel,deb] [--sign KEYID]
#   Check a release: gpg --verify SHA256SUMS.asc SHA256SUMS && sha256sum -c SHA256SUMS
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="$here/build"
dist="$here/dist"
only="archive,wheel,deb"
sign=""
glibc_floor="2.34"

die() { echo "package: $*" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir|--dist|--only|--sign)
      [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value"
      case "$1" in
        --build-dir) build="$(realpath -m "$2")";; --dist) dist="$(realpath -m "$2")";;
        --only) only="$2";; --sign) sign="$2";;
      esac
      shift 2;;
    --sign=*) sign="${1#*=}"; [[ -n "$sign" ]] || die "--sign needs a value"; shift;;
    --build-dir=*) build="$(realpath -m "${1#*=}")"; shift;;
    --dist=*) dist="$(realpath -m "${1#*=}")"; shift;;
    --only=*) only="${1#*=}"; shift;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0;;
    *) die "unknown argument '$1': allowed --build-dir DIR, --dist DIR, --only archive,wheel,deb, --sign KEYID";;
  esac
done
if [[ -n "$sign" ]]; then
  command -v gpg > /dev/null || die "--sign $sign: gpg is not installed (apt-get install gnupg)"
  gpg --batch --list-secret-keys -- "$sign" > /dev/null 2>&1 ||
    die "--sign: no secret key '$sign' in gpg's keyring (gpg --list-secret-keys shows them)"
fi
want_archive=0 want_wheel=0 want_deb=0
IFS=',' read -r -a forms <<< "$only"
[[ ${#forms[@]} -gt 0 ]] || die "--only '' names no form: allowed archive, wheel, deb (comma-separated)"
for f in "${forms[@]}"; do
  case "$f" in
    archive) want_archive=1;; wheel) want_wheel=1;; deb) want_deb=1;;
    *) die "--only: unknown form '$f': allowed archive, wheel, deb (comma-separated)";;
  esac
done

# The one build.
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  [[ "$build" == "$here/build" ]] || die "--build-dir '$build' is not a configured build folder (no CMakeCache.txt)"
  bash "$here/scripts/build.sh"
else
  grep -q '^MESHRUN_PORTABLE:BOOL=OFF$' "$build/CMakeCache.txt" &&
    die "$build is not a portable build (MESHRUN_PORTABLE=OFF): configure it with -DMESHRUN_PORTABLE=ON, or use another --build-dir"
  cmake --build "$build" -j2 > "$build/package-build.log" 2>&1 ||
    { tail -30 "$build/package-build.log"; die "bringing $build up to date failed (log: $build/package-build.log)"; }
fi
grep -q '^MESHRUN_PORTABLE:BOOL=ON$' "$build/CMakeCache.txt" ||
  die "$build is not a portable build (MESHRUN_PORTABLE is not ON): configure it with -DMESHRUN_PORTABLE=ON"
version="$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")"
[[ -n "$version" ]] || die "no CMAKE_PROJECT_VERSION in $build/CMakeCache.txt"
name="meshrun-$version-linux-x86_64"
# Reproducible time stamps: the last commit's, else now.
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git -C "$here" log -1 --format=%ct 2>/dev/null || date +%s)}"

mkdir -p "$dist"
stage="$dist/.stage"
rm -rf "$stage"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"

# What the archive holds, installed by component and stripped of debug info.
root="$stage/$name"
for component in meshrun meshrun-dev meshrun-absl meshrun-nccl meshrun-share; do
  cmake --install "$build" --prefix "$root" --component "$component" > /dev/null
done
[[ -f "$root/share/man/man1/meshrun.1.gz" ]] ||
  die "the build made no manual pages: install help2man (scripts/install-deps.sh), then run this again"
is_elf() { [[ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" == '177ELF' ]]; }
while IFS= read -r -d '' f; do
  if is_elf "$f" || [[ "$f" == *.a ]]; then strip --strip-debug "$f"; fi
done < <(find "$root/bin" "$root/libexec" "$root/lib" -type f -print0)

# Every program and library: glibc only (libmesh's NCCL plugin, which loads NCCL
# and the CUDA driver itself, and the example worker: libmesh too), glibc
# symbols no newer than $glibc_floor.
newest="0"
glibc_libs='^(libc\.so\.6|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|ld-linux-x86-64\.so\.2)$'
while IFS= read -r -d '' f; do
  is_elf "$f" || continue
  allowed="$glibc_libs"
  # libmesh's NCCL plugin and the ready example worker: libmesh too.
  [[ "$(basename "$f")" == libmeshrun_mesh_nccl.so* || "$f" == */libexec/meshrun/examples/* ]] &&
    allowed='^(libc\.so\.6|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|ld-linux-x86-64\.so\.2|libmeshrun_mesh\.so\.0)$'
  while read -r needed; do
    [[ "$needed" =~ $allowed ]] || die "${f#"$root"/} needs $needed: a portable build links it statically (cmake/MeshrunPortable.cmake)"
  done < <(objdump -p "$f" | awk '$1 == "NEEDED" {print $2}')
  v="$(objdump -T "$f" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -1)"
  [[ -z "$v" ]] && continue
  if [[ "$(printf '%s\n%s\n' "$v" "$glibc_floor" | sort -V | tail -1)" != "$glibc_floor" ]]; then
    die "${f#"$root"/} needs GLIBC_$v, newer than the $glibc_floor promised (objdump -T $f | grep GLIBC_$v)"
  fi
  [[ "$(printf '%s\n%s\n' "$v" "$newest" | sort -V | tail -1)" == "$v" ]] && newest="$v"
done < <(find "$root/bin" "$root/libexec" "$root/lib" -type f -print0)
echo "package: every program and library needs glibc only, GLIBC_$newest at most"
# The archive: meshrun's programs in libexec/meshrun/, and bin/meshrun a
# launcher that says in one line when this system's glibc is too old
# (packaging/meshrun-archive-launcher.sh). The wheel and the .deb keep the
# programs in bin/: pip and dpkg refuse them on too old a glibc.
archive_root="$stage/archive/$name"
mkdir -p "$archive_root"
cp -a "$root/." "$archive_root/"
mkdir -p "$archive_root/libexec/meshrun"
mv "$archive_root/bin/meshrun" "$archive_root/bin/meshrun-worker-shim" "$archive_root/libexec/meshrun/"
sed "s/@GLIBC_FLOOR_MINOR@/${glibc_floor#*.}/" "$here/packaging/meshrun-archive-launcher.sh" > "$archive_root/bin/meshrun"
chmod 0755 "$archive_root/bin/meshrun"
touch -d "@$SOURCE_DATE_EPOCH" "$archive_root/bin/meshrun"

# Earlier files of the forms made now (others stay).
[[ $want_archive == 1 ]] && rm -f "$dist"/meshrun-*-linux-x86_64.tar.gz
[[ $want_wheel == 1 ]] && rm -f "$dist"/meshrun-*.whl
[[ $want_deb == 1 ]] && rm -f "$dist"/meshrun_*_amd64.deb "$dist"/meshrun-dev_*_amd64.deb
rm -f "$dist/SHA256SUMS" "$dist/SHA256SUMS.asc"

if [[ $want_archive == 1 ]]; then
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" -C "$stage/archive" -cf - "$name" |
    gzip -9n > "$dist/$name.tar.gz"
  echo "package: $dist/$name.tar.gz ($(du -h "$dist/$name.tar.gz" | cut -f1))"
fi

if [[ $want_wheel == 1 ]]; then
  # The PyPI tools, pinned, in a venv of their own (made again when the pins change).
  tools="$build/package-tools"
  req="$here/scripts/package-requirements.txt"
  if ! cmp -s "$req" "$tools/requirements.txt"; then
    rm -rf "$tools"
    /usr/bin/python3 -m venv "$tools/venv"
    "$tools/venv/bin/pip" install -q --disable-pip-version-check -r "$req"
    cp "$req" "$tools/requirements.txt"
  fi
  # The wheel: meshrun and its shim as scripts (the venv's bin/), as ruff
  # and ninja ship; no Python code. auditwheel then tags it with the oldest
  # manylinux its glibc symbols allow.
  w="$stage/wheel/meshrun-$version"
  mkdir -p "$w/meshrun-$version.data/scripts" "$w/meshrun-$version.dist-info"
  cp "$root/bin/meshrun" "$root/bin/meshrun-worker-shim" "$w/meshrun-$version.data/scripts/"
  cat > "$w/meshrun-$version.dist-info/METADATA" <<EOF
Metadata-Version: 2.1
Name: meshrun
Version: $version
Summary: A launcher and runtime for multi-process, multi-host GPU jobs (torchrun's command line, in C++)
Requires-Python: >=3.8
Description-Content-Type: text/markdown

meshrun starts the workers of a job on every host, gives them their ranks and
torchrun's environment, runs the rendezvous server and restarts the job when a
worker fails. Installing this wheel (\`pip install meshrun-<version>-py3-none-manylinux_2_34_x86_64.whl\`:
it is not on PyPI) puts the native \`meshrun\` command in the environment's bin/; it runs \`.py\` programs with that environment's Python
unless PYTHON_EXEC names another.
EOF
  cat > "$w/meshrun-$version.dist-info/WHEEL" <<EOF
Wheel-Version: 1.0
Generator: meshrun scripts/package.sh
Root-Is-Purelib: false
Tag: py3-none-linux_x86_64
EOF
  mkdir -p "$w/meshrun-$version.dist-info/licenses"
  cp "$here/cmake/debian/copyright" "$w/meshrun-$version.dist-info/licenses/COPYRIGHT"
  cp -r "$root/share/doc/meshrun/third-party" "$w/meshrun-$version.dist-info/licenses/"
  mkdir -p "$stage/wheel-raw"
  "$tools/venv/bin/wheel" pack "$w" -d "$stage/wheel-raw" > /dev/null
  PATH="$tools/venv/bin:$PATH" "$tools/venv/bin/auditwheel" repair -w "$dist" "$stage"/wheel-raw/*.whl > "$stage/auditwheel.log" 2>&1 ||
    { cat "$stage/auditwheel.log"; die "auditwheel repair failed"; }
  whl="$(ls "$dist"/meshrun-"$version"-*.whl)"
  echo "package: $whl ($(du -h "$whl" | cut -f1))"
fi

if [[ $want_deb == 1 ]]; then
  # CPack installs the components again (stripped) from the same build.
  cpack -G DEB --config "$build/CPackConfig.cmake" -B "$stage/cpack" > "$stage/cpack.log" 2>&1 ||
    { cat "$stage/cpack.log"; die "cpack failed"; }
  for deb in "$stage"/cpack/meshrun_"$version"_amd64.deb "$stage"/cpack/meshrun-dev_"$version"_amd64.deb; do
    [[ -f "$deb" ]] || { cat "$stage/cpack.log"; die "cpack made no $(basename "$deb")"; }
    mv "$deb" "$dist/"
    echo "package: $dist/$(basename "$deb") ($(du -h "$dist/$(basename "$deb")" | cut -f1))"
  done
fi

(cd "$dist" && sha256sum -- meshrun*.tar.gz meshrun*.whl meshrun*.deb 2>/dev/null > SHA256SUMS || true)
if [[ -n "$sign" ]]; then
  gpg --batch --yes --local-user "$sign" --armor --detach-sign --output "$dist/SHA256SUMS.asc" "$dist/SHA256SUMS" ||
    die "--sign $sign: gpg could not sign SHA256SUMS"
  echo "package: $dist/SHA256SUMS.asc (signed by $sign)"
fi
