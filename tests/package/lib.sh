# Shared by the package tests (tests/package/*_test.sh): paths, skips,
# clean-up, and the glibc-only view of the file system.
# The caller sets SOURCE_DIR and BINARY_DIR (the build folder) first.
set -euo pipefail
PKG_TEST="$BINARY_DIR/package-test"          # this run's artifacts: made again by "package: dist"
PKG_DIST="$PKG_TEST/dist"
PKG_UNPACKED="$PKG_TEST/archive"             # the archive, unpacked (by "package: archive")
PKG_WORKER="$PKG_TEST/worker"                # the main job's worker, built against the archive
PKG_CACHE="${MESHRUN_PACKAGE_CACHE:-$BINARY_DIR/package-cache}"  # kept between runs: Debian roots, images, apt downloads
SUITE="${SUITE:-bookworm}"  # root_test.sh makes a root of another suite when given one
MIRROR="${MESHRUN_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "--- $*"; }

# Clean-up actions, run in reverse order on exit (also when a step fails).
_cleanups=()
on_exit() { _cleanups+=("$1"); }
_run_cleanups() {
  local i
  for ((i = ${#_cleanups[@]} - 1; i >= 0; i--)); do eval "${_cleanups[$i]}" || true; done
}
trap _run_cleanups EXIT

need_root() { [[ "$(id -u)" == 0 ]] || skip "needs root ($1)"; }
need_cmd() { command -v "$1" > /dev/null || skip "$1 is not installed (scripts/install-deps.sh installs it)"; }

# The archive's file and folder names from the dist folder.
archive_file() {
  local a
  a="$(ls "$PKG_DIST"/meshrun-*-linux-x86_64.tar.gz 2>/dev/null | head -1)"
  [[ -n "$a" ]] || fail "no archive in $PKG_DIST (the \"package: dist\" test makes it)"
  echo "$a"
}
archive_root() { local a; a="$(archive_file)"; echo "$PKG_UNPACKED/$(basename "$a" .tar.gz)"; }

# A folder holding glibc's files only (Debian's libc6), laid out as
# /usr/lib: bound over /usr/lib in a mount namespace, it leaves a program
# nothing but glibc (Debian 12's /lib and /lib64 lead into /usr/lib).
glibc_view() {
  local view="$PKG_CACHE/glibc-only-usr-lib"
  local stamp; stamp="$(dpkg-query -W -f='${Version}' libc6)"
  if [[ "$(cat "$view.stamp" 2>/dev/null)" != "$stamp" ]]; then
    rm -rf "$view" && mkdir -p "$view"
    dpkg -L libc6 | grep -E '^/(usr/)?lib/x86_64-linux-gnu/' | while read -r f; do
      [[ -f "$f" || -L "$f" ]] || continue
      rel="${f#/usr}"; rel="${rel#/lib/}"
      mkdir -p "$view/$(dirname "$rel")"
      cp -a "$f" "$view/$rel"
    done
    echo "$stamp" > "$view.stamp"
  fi
  echo "$view"
}

# GLIBC_ONLY: a command prefix that runs a command with glibc as the only
# library on the system: a private mount namespace where ld.so's cache is
# empty and /usr/lib is glibc_view (last: mount itself needs more). The
# command is exec'd by a shell that is already loaded. Usage: timeout 60 "${GLIBC_ONLY[@]}" prog args...
set_glibc_only() {
  local view; view="$(glibc_view)"
  GLIBC_ONLY=(unshare --mount --propagation private /bin/sh -c
              'mount --bind /dev/null /etc/ld.so.cache && mount --bind "$1" /usr/lib && shift && exec "$@"' sh "$view")
}

# A free TCP port on loopback (the kernel's choice).
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The Debian mirror answers (debootstrap and apt-get need it).
mirror_reachable() { timeout 20 curl -sfI "$MIRROR/dists/$SUITE/Release" > /dev/null; }
