#!/usr/bin/env bash
# "package: Debian root" (fixture of the deb and container tests): a minimal
# Debian 12 root, `debootstrap --variant=minbase bookworm`, made once and
# kept in <build>/package-cache/ (about 30 s and 200 MB the first time);
# "package: Debian 11 root" the same of bullseye (the archive's old-glibc
# check). Skipped without root, or when Debian's mirror cannot be reached.
#   usage: root_test.sh SOURCE_DIR BINARY_DIR [SUITE]   (default bookworm)
SOURCE_DIR="$1" BINARY_DIR="$2" SUITE="${3:-bookworm}"
source "$SOURCE_DIR/tests/package/lib.sh"
need_root "debootstrap"
need_cmd debootstrap
root="$PKG_CACHE/$SUITE-minbase"
stamp="debootstrap --variant=minbase $SUITE $MIRROR"
mkdir -p "$PKG_CACHE"
exec 9> "$PKG_CACHE/root-$SUITE.lock"
flock -w 900 9 || fail "another test holds $PKG_CACHE/root-$SUITE.lock for 15 min"
if [[ -f "$root/.meshrun-root" && "$(cat "$root/.meshrun-root")" == "$stamp" ]]; then
  echo "PASS: cached $root ($(cat "$root/etc/debian_version"))"
  exit 0
fi
mirror_reachable || skip "Debian's mirror $MIRROR cannot be reached"
rm -rf "$root" "$root.tmp"
on_exit "rm -rf '$root.tmp'"
step "$stamp"
start=$(date +%s)
timeout 900 debootstrap --variant=minbase "$SUITE" "$root.tmp" "$MIRROR" > "$PKG_CACHE/debootstrap.log" 2>&1 ||
  { tail -30 "$PKG_CACHE/debootstrap.log"; fail "debootstrap failed (log: $PKG_CACHE/debootstrap.log)"; }
rm -rf "$root.tmp/var/cache/apt/archives/"*.deb
echo "$stamp" > "$root.tmp/.meshrun-root"
mv "$root.tmp" "$root"
echo "PASS: made $root in $(( $(date +%s) - start )) s ($(du -sh "$root" | cut -f1))"
