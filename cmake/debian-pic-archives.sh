#!/usr/bin/env bash
# Copies of Debian's static archives that can go into a shared library
# (cmake/MeshrunPortable.cmake: libmesh). Debian builds them for programs
# (position-independent executables): a few objects use thread-local
# variables in the local-exec model (R_X86_64_TPOFF32) or read glibc's
# stderr/stdout directly (R_X86_64_PC32), which only a program can do. Each
# of those is compiled again, with -fPIC, from the Debian source of the
# installed package (cmake/debian-source.sh: Debian's patches applied) with Debian's
# flags, checked to define the same symbols as the member it replaces, and
# put in a copy of the archive (ar r); then no member of the copies may hold
# such a relocation. Everything else in them is Debian's own build.
#   usage: cmake/debian-pic-archives.sh OUT_DIR CXX [LAUNCHER]
# Writes OUT_DIR/<archive>.a; does nothing when OUT_DIR/stamp names the
# installed versions already. Needs dpkg-dev and the network (Debian's mirror).
set -euo pipefail
[[ $# -ge 2 ]] || { echo "usage: $0 OUT_DIR CXX [LAUNCHER]" >&2; exit 2; }
out="$1" cxx="$2" launcher="${3:-}"
lib=/usr/lib/x86_64-linux-gnu

# dev package | archive | member | source file | compile flags besides Debian's
absl="-std=c++17 -I."
specs=(
  "libabsl-dev|libabsl_base.a|sysinfo.cc.o|absl/base/internal/sysinfo.cc|$absl"
  "libabsl-dev|libabsl_cordz_functions.a|cordz_functions.cc.o|absl/strings/internal/cordz_functions.cc|$absl"
  "libabsl-dev|libabsl_random_internal_pool_urbg.a|pool_urbg.cc.o|absl/random/internal/pool_urbg.cc|$absl"
  "libabsl-dev|libabsl_raw_hash_set.a|raw_hash_set.cc.o|absl/container/internal/raw_hash_set.cc|$absl"
  "libabsl-dev|libabsl_str_format_internal.a|parser.cc.o|absl/strings/internal/str_format/parser.cc|$absl"
  "libprotobuf-dev|libprotobuf.a|arena.o|src/google/protobuf/arena.cc|-pthread -DHAVE_PTHREAD=1 -DHAVE_ZLIB=1 -Isrc"
  "libprotobuf-dev|libprotobuf.a|common.o|src/google/protobuf/stubs/common.cc|-pthread -DHAVE_PTHREAD=1 -DHAVE_ZLIB=1 -Isrc"
)
for m in bitstate compile dfa filtered_re2 mimics_pcre nfa onepass parse prefilter prefilter_tree re2 regexp set simplify tostring; do
  specs+=("libre2-dev|libre2.a|$m.o|re2/$m.cc|-pthread -std=c++11 -O3 -DNDEBUG -I.")
done

versions=""
for dev in libabsl-dev libprotobuf-dev libre2-dev; do
  v="$(dpkg-query -W -f='${source:Package}=${source:Version}' "$dev" 2>/dev/null)" ||
    { echo "debian-pic-archives: $dev is not installed (scripts/install-deps.sh installs it)" >&2; exit 1; }
  versions+="$dev:$v "
done
stamp="$versions $(sha256sum "$0" | cut -c1-16)"
if [[ -f "$out/stamp" && "$(cat "$out/stamp")" == "$stamp" ]]; then exit 0; fi
rm -rf "$out"
mkdir -p "$out/src" "$out/obj"

srcs=()
for entry in $versions; do srcs+=("${entry#*:}"); done
bash "$(dirname "$0")/debian-source.sh" "$out/src" "${srcs[@]}"

read -r -a debian_flags <<< "$(dpkg-buildflags --get CPPFLAGS) $(dpkg-buildflags --get CXXFLAGS)"
for spec in "${specs[@]}"; do
  IFS='|' read -r dev archive member file flags <<< "$spec"
  v="$(dpkg-query -W -f='${source:Package}-${source:Upstream-Version}' "$dev")"
  dir="$out/src/$v"
  [[ -n "$dir" && -f "$dir/$file" ]] || { echo "debian-pic-archives: $file not in the source of $dev ($out/src)" >&2; exit 1; }
  obj="$out/obj/$archive-$member"
  read -r -a extra <<< "$flags"
  (cd "$dir" && $launcher "$cxx" "${debian_flags[@]}" "${extra[@]}" -fPIC -w -c "$file" -o "$obj")
  strip --strip-debug "$obj"  # as Debian's archives are
  if readelf -rW "$obj" | grep -qE 'R_X86_64_(32|32S|TPOFF32) '; then
    echo "debian-pic-archives: $obj still has relocations a shared library cannot hold" >&2; exit 1
  fi
  # The same strong definitions as Debian's member (inline functions, weak,
  # may be inlined differently).
  strong() { nm -g --defined-only "$1" | awk '$2 !~ /^[WVwv]$/ {print $3}' | sort; }
  diff <(strong "$obj") <(cd "$out/obj" && ar p "$lib/$archive" "$member" > ref.o && strong ref.o) \
       > "$out/obj/symbols.diff" ||
    { cat "$out/obj/symbols.diff" >&2; echo "debian-pic-archives: $file defines other symbols than $archive($member)" >&2; exit 1; }
  [[ -f "$out/$archive" ]] || cp "$lib/$archive" "$out/$archive"
  cp "$obj" "$out/obj/$member"
  (cd "$out/obj" && ar r "$out/$archive" "$member" 2> /dev/null && rm -f "$member" ref.o)
done
# No member of the copies may still hold a relocation a shared library
# cannot: local-exec TLS, absolute 32-bit, or PC-relative to glibc's data.
nm -D --defined-only /lib/x86_64-linux-gnu/libc.so.6 /lib/x86_64-linux-gnu/libm.so.6 |
  awk '$2 ~ /^[BDVGRS]$/ {sub(/@.*/, "", $3); print $3}' | sort -u > "$out/glibc-data.txt"
bad="$(for a in "$out"/*.a; do
  readelf -rW "$a" | awk -v data="$out/glibc-data.txt" -v a="$(basename "$a")" '
    BEGIN { while ((getline l < data) > 0) d[l] = 1 }
    /^File: / { f = $2 }
    $3 ~ /^R_X86_64_(TPOFF32|32|32S)$/ { print f; next }
    $3 == "R_X86_64_PC32" { s = $5; sub(/@.*/, "", s); if (s in d) print f }'
done | sort -u)"
[[ -z "$bad" ]] || { echo "debian-pic-archives: still not position-independent (add them to the list in $0):" >&2; echo "$bad" >&2; exit 1; }
rm -rf "$out/src" "$out/glibc-data.txt"
echo "$stamp" > "$out/stamp"
