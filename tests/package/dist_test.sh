#!/usr/bin/env bash
# "package: dist" (the fixture of every package test): scripts/package.sh
# packs this build folder into package-test/dist/ (no compiling), and the
# four files are there with the names docs/install.md gives.
#   usage: dist_test.sh SOURCE_DIR BINARY_DIR
SOURCE_DIR="$1" BINARY_DIR="$2"
source "$SOURCE_DIR/tests/package/lib.sh"

rm -rf "$PKG_TEST"
mkdir -p "$PKG_TEST"
version="$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$BINARY_DIR/CMakeCache.txt")"
step "scripts/package.sh --build-dir $BINARY_DIR --dist $PKG_DIST"
start=$(date +%s)
bash "$SOURCE_DIR/scripts/package.sh" --build-dir "$BINARY_DIR" --dist "$PKG_DIST"
echo "package.sh took $(( $(date +%s) - start )) s"
# Nothing was compiled: every target was up to date.
if grep -E 'Building (C|CXX) object|Linking' "$BINARY_DIR/package-build.log"; then
  fail "package.sh compiled or linked something: the build was not up to date, or packaging rebuilds"
fi
ls -l "$PKG_DIST"
for f in "meshrun-$version-linux-x86_64.tar.gz" "meshrun_${version}_amd64.deb" "meshrun-dev_${version}_amd64.deb" SHA256SUMS; do
  [[ -f "$PKG_DIST/$f" ]] || fail "$f is missing from $PKG_DIST"
done
whl="$(ls "$PKG_DIST"/meshrun-"$version"-py3-none-manylinux_*_x86_64.whl 2>/dev/null)" ||
  fail "no manylinux wheel in $PKG_DIST"
(cd "$PKG_DIST" && sha256sum -c --quiet SHA256SUMS) || fail "SHA256SUMS does not match the files"

# Bad input: one line naming the value and what is allowed.
out="$(bash "$SOURCE_DIR/scripts/package.sh" --only archive,zip 2>&1)" && fail "--only archive,zip was accepted"
[[ "$out" == "package: --only: unknown form 'zip': allowed archive, wheel, deb (comma-separated)" ]] ||
  fail "--only archive,zip: $out"
out="$(bash "$SOURCE_DIR/scripts/package.sh" --bogus 2>&1)" && fail "--bogus was accepted"
[[ "$out" == "package: unknown argument '--bogus': allowed --build-dir DIR, --dist DIR, --only archive,wheel,deb" ]] ||
  fail "--bogus: $out"
out="$(bash "$SOURCE_DIR/scripts/package.sh" --build-dir /nonexistent/meshrun-build 2>&1)" && fail "a missing build folder was accepted"
[[ "$out" == "package: --build-dir '/nonexistent/meshrun-build' is not a configured build folder (no CMakeCache.txt)" ]] ||
  fail "--build-dir /nonexistent: $out"
echo "PASS: $(basename "$whl") and the archive and Debian packages of $version"
