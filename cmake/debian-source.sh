#!/usr/bin/env bash
# Unpacks Debian source packages (Debian's patches applied) into DEST with
# apt-get source, using the machine's own Debian mirrors as deb-src in a
# private state folder (nothing in /etc/apt changes). For
# cmake/debian-pic-archives.sh and cmake/debian-static-hwloc.sh.
#   usage: cmake/debian-source.sh DEST PACKAGE=VERSION...
set -euo pipefail
[[ $# -ge 2 ]] || { echo "usage: $0 DEST PACKAGE=VERSION..." >&2; exit 2; }
dest="$1"; shift
apt_dir="$dest/.apt"
rm -rf "$apt_dir"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/sources.list.d"
found=0
for f in /etc/apt/sources.list.d/*.sources; do
  [[ -f "$f" ]] || continue
  sed 's/^Types:.*/Types: deb-src/' "$f" > "$apt_dir/sources.list.d/$(basename "$f")"
  found=1
done
touch "$apt_dir/sources.list"
if [[ -f /etc/apt/sources.list ]] && grep -qE '^deb ' /etc/apt/sources.list; then
  grep -E '^deb ' /etc/apt/sources.list | sed 's/^deb /deb-src /' > "$apt_dir/sources.list"
  found=1
fi
[[ $found == 1 ]] || { echo "debian-source: no apt sources in /etc/apt to fetch Debian's sources from" >&2; exit 1; }
opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=$apt_dir/sources.list.d"
      -o "Dir::State::Lists=$apt_dir/lists" -o "APT::Get::List-Cleanup=0" -o "APT::Sandbox::User=root")
apt-get "${opts[@]}" update -qq > "$apt_dir/log" 2>&1 ||
  { cat "$apt_dir/log" >&2; echo "debian-source: apt-get update (deb-src) failed" >&2; exit 1; }
(cd "$dest" && apt-get "${opts[@]}" source -qq "$@") >> "$apt_dir/log" 2>&1 ||
  { tail -20 "$apt_dir/log" >&2
    echo "debian-source: apt-get source $* failed (no longer on the mirror? apt-get upgrade, then configure again)" >&2
    exit 1; }
rm -rf "$apt_dir"
