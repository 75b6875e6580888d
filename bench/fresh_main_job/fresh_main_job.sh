#!/usr/bin/env bash
# The README's main-job command on a fresh Debian 12, timed (issue 31: "the main
# job within 5 minutes of git clone"): a clone of this repository's HEAD in a
# bare `debootstrap --variant=minbase bookworm` root (the package tests' cached
# root, under an overlay so that it stays bare), then `bash scripts/main-job.sh`
# there as root: it installs the build's Debian packages from the mirror, builds
# what the main job runs and runs it. Prints the time of each phase and the
# packages installed. A benchmark, not a test (docs/performance.md).
#   usage: bench/fresh_main_job/fresh_main_job.sh [BUILD_DIR]   (default: build; root,
#          the "package: Debian root" test's root in BUILD_DIR/package-cache/, Debian's mirror)
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(realpath -m "${1:-$here/build}")"
base="$build/package-cache/bookworm-minbase"
[[ "$(id -u)" == 0 ]] || { echo "fresh_main_job: needs root (chroot, mounts)" >&2; exit 2; }
[[ -f "$base/.meshrun-root" ]] || { echo "fresh_main_job: no Debian root in $base (ctest -R 'package: Debian root')" >&2; exit 2; }
work="$(mktemp -d /tmp/meshrun-fresh.XXXXXX)"
trap 'umount -R "$work/root" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/upper" "$work/ow" "$work/root"
git clone -q "$here" "$work/clone"
unshare --mount --propagation private /bin/bash -euo pipefail -c '
  base="$1" work="$2"
  r="$work/root"
  mount -t overlay overlay -o "lowerdir=$base,upperdir=$work/upper,workdir=$work/ow" "$r"
  mount -t proc proc "$r/proc"
  mount --rbind /dev "$r/dev"
  cp /etc/resolv.conf "$r/etc/resolv.conf"
  cp -a "$work/clone" "$r/root/meshrun"
  in_root() { chroot "$r" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive "$@"; }
  echo "--- apt-get update"
  t0=$(date +%s.%N)
  in_root apt-get update -qq
  t1=$(date +%s.%N)
  before=$(in_root dpkg-query -W -f="\${Package}\n" | wc -l)
  echo "--- bash scripts/main-job.sh (in /root/meshrun)"
  in_root /bin/bash -c "cd /root/meshrun && bash scripts/main-job.sh" > "$work/main-job.log" 2>&1 ||
    { tail -40 "$work/main-job.log"; echo "fresh_main_job: the main job failed"; exit 1; }
  t2=$(date +%s.%N)
  after=$(in_root dpkg-query -W -f="\${Package}\n" | wc -l)
  grep -c "_sum=.* OK" "$work/main-job.log" | sed "s/^/sums OK: /"
  printf "apt-get update: %.0f s; main-job.sh (packages, build, run): %.0f s; packages %d -> %d\n" \
    "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)" "$before" "$after"
  for p in slurm-wlm podman etcd-server python3-torch catch2 lintian; do
    in_root dpkg-query -W -f="\${Status}" "$p" 2>/dev/null | grep -q "install ok installed" && echo "also installed: $p" || true
  done
' sh "$base" "$work"
