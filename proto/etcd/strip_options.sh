#!/bin/sh
# Copies one of etcd's v3 .proto files (Debian's golang-etcd-server-dev) to OUT
# without what only Go needs: the gogoproto import and its file options, and the
# google.api.http annotations of the JSON gateway (and their import). None of
# them changes the wire format: the package, messages, fields and services stay
# as etcd ships them. Fails when such an option is left (a later etcd that adds
# inline field options must be handled here, not compiled wrongly).
#   strip_options.sh IN OUT
set -eu
in=$1
out=$2
sed -e '/^import "gogoproto\/gogo.proto";/d' \
    -e '/^import "google\/api\/annotations.proto";/d' \
    -e '/^option (gogoproto\./d' \
    -e '/option (google\.api\.http) = {/,/};/d' \
    "$in" >"$out.tmp"
if grep -n 'gogoproto\|google\.api\|google/api' "$out.tmp" >&2; then
  echo "strip_options.sh: $in: options left after stripping (above)" >&2
  rm -f "$out.tmp"
  exit 1
fi
mv "$out.tmp" "$out"
