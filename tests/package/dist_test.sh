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
[[ "$out" == "package: unknown argument '--bogus': allowed --build-dir DIR, --dist DIR, --only archive,wheel,deb, --sign KEYID" ]] ||
  fail "--bogus: $out"
out="$(bash "$SOURCE_DIR/scripts/package.sh" --build-dir /nonexistent/meshrun-build 2>&1)" && fail "a missing build folder was accepted"
[[ "$out" == "package: --build-dir '/nonexistent/meshrun-build' is not a configured build folder (no CMakeCache.txt)" ]] ||
  fail "--build-dir /nonexistent: $out"

# A signed release: a key made here, in a keyring of its own; gpg verifies the
# signature and catches a changed SHA256SUMS.
if command -v gpg > /dev/null; then
  step "scripts/package.sh --sign KEYID --only archive (a test key)"
  export GNUPGHOME="$PKG_TEST/gnupg"
  rm -rf "$GNUPGHOME" && mkdir -m 0700 "$GNUPGHOME"
  on_exit "gpgconf --kill all > /dev/null 2>&1 || true; rm -rf '$GNUPGHOME'"
  gpg --batch --quiet --passphrase '' --quick-gen-key "meshrun release test <release@meshrun.test>" ed25519 sign 1d
  signed="$PKG_TEST/signed"
  out="$(bash "$SOURCE_DIR/scripts/package.sh" --build-dir "$BINARY_DIR" --dist "$signed" --only archive --sign nobody@nowhere 2>&1)" &&
    fail "--sign with an unknown key was accepted"
  [[ "$out" == "package: --sign: no secret key 'nobody@nowhere' in gpg's keyring (gpg --list-secret-keys shows them)" ]] ||
    fail "--sign nobody@nowhere: $out"
  bash "$SOURCE_DIR/scripts/package.sh" --build-dir "$BINARY_DIR" --dist "$signed" --only archive \
    --sign release@meshrun.test > /dev/null
  gpg --batch --verify "$signed/SHA256SUMS.asc" "$signed/SHA256SUMS" || fail "gpg does not verify SHA256SUMS.asc"
  (cd "$signed" && sha256sum -c --quiet SHA256SUMS) || fail "the signed SHA256SUMS does not match the files"
  echo "0000  meshrun-forged.tar.gz" >> "$signed/SHA256SUMS"
  gpg --batch --verify "$signed/SHA256SUMS.asc" "$signed/SHA256SUMS" 2> /dev/null && fail "gpg verified a changed SHA256SUMS"
  rm -rf "$signed"
  echo "signed: gpg verifies SHA256SUMS.asc, and refuses it once SHA256SUMS changes"
else
  echo "gpg is not installed: the signed release is not checked"
fi
echo "PASS: $(basename "$whl") and the archive and Debian packages of $version"
