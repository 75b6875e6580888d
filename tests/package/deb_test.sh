#!/usr/bin/env bash
# The Debian packages, from the files (docs/install.md): lintian finds no
# error and no warning that is not overridden with its reason; their dependencies are declared; `apt-get install ./meshrun_*.deb
# ./meshrun-dev_*.deb` into a minimal Debian 12 root (the cached debootstrap
# root, under an overlay so that it stays clean) pulls them in from Debian's
# mirror, and the installed meshrun runs the main job there; systemd-analyze
# verify accepts the units it installed, and `man meshrun` shows the flags.
#   usage: deb_test.sh SOURCE_DIR BINARY_DIR
SOURCE_DIR="$1" BINARY_DIR="$2"
source "$SOURCE_DIR/tests/package/lib.sh"
need_cmd lintian
deb="$(ls "$PKG_DIST"/meshrun_*_amd64.deb 2>/dev/null | head -1)"
dev="$(ls "$PKG_DIST"/meshrun-dev_*_amd64.deb 2>/dev/null | head -1)"
[[ -n "$deb" && -n "$dev" ]] || fail "no Debian packages in $PKG_DIST (the \"package: dist\" test makes them)"

step "lintian $(basename "$deb") $(basename "$dev")"
lintian --fail-on error,warning --display-info "$deb" "$dev" | tee "$PKG_TEST/lintian.txt" ||
  fail "lintian reports errors or warnings (each kept one needs an override with its reason: cmake/debian/lintian-overrides)"
grep -E '^[EW]: ' "$PKG_TEST/lintian.txt" && fail "lintian reports errors or warnings"
step "declared dependencies"
for p in "$deb" "$dev"; do echo "$(basename "$p"): $(dpkg-deb -f "$p" Depends)"; done
dpkg-deb -f "$deb" Depends | grep -qE '(^|, )libc6 \(>= 2\.[0-9]+\)' || fail "meshrun does not depend on libc6"
dpkg-deb -f "$dev" Depends | grep -q "meshrun (= $(dpkg-deb -f "$deb" Version))" || fail "meshrun-dev does not depend on meshrun of its version"
dpkg-deb -f "$dev" Depends | grep -q "libabsl-dev" || fail "meshrun-dev does not depend on libabsl-dev"

need_root "a chroot into a Debian root"
base="$PKG_CACHE/$SUITE-minbase"
[[ -f "$base/.meshrun-root" ]] || fail "no Debian root in $base (the \"package: Debian root\" test makes it)"
[[ -x "$PKG_WORKER/two_d_setup" ]] || fail "no worker in $PKG_WORKER (the \"package: archive\" test builds it)"
mirror_reachable || skip "Debian's mirror $MIRROR cannot be reached (apt-get install needs it)"
work="$PKG_TEST/deb-root"
rm -rf "$work" && mkdir -p "$work/upper" "$work/overlay-work" "$work/root" "$PKG_CACHE/apt-archives/partial"
on_exit "rm -rf '$work'"
cp "$deb" "$dev" "$work/"
cp "$PKG_WORKER/two_d_setup" "$work/"
# Everything below runs in its own mount and PID namespaces: its mounts and
# processes end with it, whatever happens.
step "apt-get install into a minimal Debian 12 root, then the main job"
timeout 600 unshare --mount --pid --fork --propagation private /bin/bash -euo pipefail -c '
  base="$1" work="$2" archives="$3"
  r="$work/root"
  mount -t overlay overlay -o "lowerdir=$base,upperdir=$work/upper,workdir=$work/overlay-work" "$r"
  mount -t proc proc "$r/proc"
  mount --rbind /dev "$r/dev"
  mount --bind "$archives" "$r/var/cache/apt/archives"
  cp /etc/resolv.conf "$r/etc/resolv.conf"
  mkdir -p "$r/tmp/meshrun" && cp "$work"/*.deb "$work/two_d_setup" "$r/tmp/meshrun/"
  in_root() { chroot "$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive "$@"; }
  in_root dpkg -s libabsl-dev > /dev/null 2>&1 && { echo "the root has libabsl-dev before the install"; exit 1; }
  in_root apt-get update -qq
  in_root apt-get install -y -qq --no-install-recommends "/tmp/meshrun/$4" "/tmp/meshrun/$5"
  in_root dpkg-query -W -f="\${Package} \${Version} \${Status}\n" meshrun meshrun-dev libabsl-dev
  in_root meshrun --version
  in_root ldd /usr/bin/meshrun
  in_root ldd /tmp/meshrun/two_d_setup
  in_root meshrun --standalone --nproc_per_node=8 /tmp/meshrun/two_d_setup --device cpu
  # The systemd units the package installed, checked by systemd itself, and the manual.
  in_root apt-get install -y -qq --no-install-recommends systemd man-db
  echo "--- systemd-analyze verify"
  in_root systemd-analyze verify /usr/lib/systemd/system/meshrun-server.service meshrun-replica@29400.service 2>&1 |
    tee "$work/verify.txt"
  [[ ! -s "$work/verify.txt" ]] || { echo "systemd-analyze verify complains about the packaged units"; exit 1; }
  echo "verified: meshrun-server.service meshrun-replica@29400.service"
  grep -q "^ExecStart=/usr/bin/meshrun " "$r/usr/lib/systemd/system/meshrun-server.service"
  echo "--- man meshrun"
  in_root env MANWIDTH=100 man -P cat meshrun > "$work/man.txt"
  grep -q -- "--nproc_per_node" "$work/man.txt" && grep -q -- "--rdzv_endpoint" "$work/man.txt"
  in_root env MANWIDTH=100 man -P cat meshrun-server | grep -q -- "--state"
  echo "man meshrun: $(wc -l < "$work/man.txt") lines, the flags included"
' sh "$base" "$work" "$PKG_CACHE/apt-archives" "$(basename "$deb")" "$(basename "$dev")" > "$PKG_TEST/deb-root.log" 2>&1 ||
  { tail -40 "$PKG_TEST/deb-root.log"; fail "installing the Debian packages or the main job in the Debian root"; }
grep -E '^(meshrun|libabsl-dev) ' "$PKG_TEST/deb-root.log"
grep -qE '^libabsl-dev .* install ok installed' "$PKG_TEST/deb-root.log" || fail "apt-get did not pull in libabsl-dev"
[[ "$(grep -c '_sum=.* OK' "$PKG_TEST/deb-root.log")" == 16 ]] ||
  { tail -20 "$PKG_TEST/deb-root.log"; fail "the main job in the Debian root: not 8 ranks with both sums OK"; }
grep -q '^verified: meshrun-server.service' "$PKG_TEST/deb-root.log" || fail "the packaged systemd units were not verified"
grep -q '^man meshrun: ' "$PKG_TEST/deb-root.log" || fail "man meshrun does not show the flags"
echo "PASS: lintian has no errors; apt-get installs both packages with their dependencies; the main job runs;"
echo "  systemd-analyze verify accepts the packaged units; man meshrun shows the flags"
