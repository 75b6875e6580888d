#!/usr/bin/env bash
# The container recipe (deploy/container/Containerfile), with Debian's podman
# and the archive: the base image is imported from the cached debootstrap
# root (no registry is reachable here; kept in <build>/package-cache/), the
# image adds meshrun under /opt/meshrun (no headers, static libraries or
# archive layer; its growth is printed), runs the main job, and two
# containers on one podman network run a two-node job, each finding the
# other by name.
# podman here needs --runtime runc (crun refuses hybrid cgroups) and explicit
# ulimits (its defaults exceed the hard limits).
#   usage: container_test.sh SOURCE_DIR BINARY_DIR
SOURCE_DIR="$1" BINARY_DIR="$2"
source "$SOURCE_DIR/tests/package/lib.sh"
need_root "podman's storage and networks"
need_cmd podman
need_cmd runc
base_root="$PKG_CACHE/$SUITE-minbase"
[[ -f "$base_root/.meshrun-root" ]] || fail "no Debian root in $base_root (the \"package: Debian root\" test makes it)"
[[ -x "$PKG_WORKER/two_d_setup" ]] || fail "no worker in $PKG_WORKER (the \"package: archive\" test builds it)"
archive="$(archive_file)"
version="$(basename "$archive" | sed -E 's/^meshrun-(.*)-linux-x86_64\.tar\.gz$/\1/')"

store="$PKG_CACHE/podman"  # (containers/: the layout before the short run root)
mkdir -p "$store"
# podman refuses a run root longer than 50 characters, and a build folder's
# path may be longer: the run root is a short folder named after the store
# (the same one each time, as podman's database remembers it).
runroot="/tmp/meshrun-podman-$(printf '%s' "$store" | md5sum | cut -c1-12)"
P=(podman --root "$store/storage" --runroot "$runroot" --cgroup-manager cgroupfs --events-backend file --runtime runc)
LIMITS=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
exec 9> "$store.lock"
flock -w 600 9 || fail "another test holds $store.lock for 10 min"

base=localhost/meshrun-test-base:$SUITE
root_stamp="$(cat "$base_root/.meshrun-root") $(stat -c %Y "$base_root/.meshrun-root")"
if ! "${P[@]}" image exists "$base" || [[ "$(cat "$store/base.stamp" 2>/dev/null)" != "$root_stamp" ]]; then
  step "import the Debian root as $base"
  "${P[@]}" rmi -f "$base" > /dev/null 2>&1 || true
  tar -C "$base_root" -c . | "${P[@]}" import - "$base" > /dev/null
  echo "$root_stamp" > "$store/base.stamp"
fi

image="localhost/meshrun-test:$version-$$"
net="meshrun-test-$$"
cleanup() {
  "${P[@]}" rm -f -i "mr0-$$" "mr1-$$" > /dev/null 2>&1
  "${P[@]}" network rm -f "$net" > /dev/null 2>&1
  "${P[@]}" rmi -f "$image" > /dev/null 2>&1
}
on_exit cleanup
step "podman build -f deploy/container/Containerfile --build-arg BASE=$base"
start=$(date +%s)
timeout 300 "${P[@]}" build "${LIMITS[@]}" -f "$SOURCE_DIR/deploy/container/Containerfile" --build-arg "BASE=$base" \
  -t "$image" "$PKG_DIST" > "$PKG_TEST/podman-build.log" 2>&1 ||
  { tail -30 "$PKG_TEST/podman-build.log"; fail "podman build"; }
echo "built in $(( $(date +%s) - start )) s"

step "only what runs: no include/, static library or CMake file; no layer holds the archive"
extra="$(timeout 60 "${P[@]}" run --rm "${LIMITS[@]}" --network none "$image" /bin/sh -c \
  'find /usr/local/include /usr/local/lib /opt/meshrun -mindepth 1 \( -path /opt/meshrun/include -o -path "*/include/*" \
     -o -name "*.a" -o -name cmake -o -name "meshrun-*.tar.gz" \) -print; find / -xdev -name "meshrun-*.tar.gz" -print' \
  2>"$PKG_TEST/podman-run.err")" || fail "podman run in the image: $(tail -n 5 "$PKG_TEST/podman-run.err")"
[[ -z "$extra" ]] || fail "the image holds development files or the archive: $extra"
# (Each read fails with its own line; the history is read whole, as a reader
# that stops after the first line leaves podman a broken pipe, and with
# pipefail the test ended there without a word, as one CI run showed.)
base_size="$("${P[@]}" image inspect --format '{{.Size}}' "$base")" || fail "podman image inspect $base"
image_size="$("${P[@]}" image inspect --format '{{.Size}}' "$image")" || fail "podman image inspect $image"
history="$("${P[@]}" history --format '{{.Size}}' "$image")" || fail "podman history $image"
layers="${history%%$'\n'*}"
archive_bytes="$(stat -c %s "$archive")"
# What the image should add: the archive's files that run, unpacked (the
# archive compressed is about half of that, so a layer holding it would add
# its size on top).
runtime_bytes="$(find "$PKG_UNPACKED" -type f ! -path "*/include/*" ! -name "*.a" ! -path "*/cmake/*" -printf '%s\n' |
  awk '{ s += $1 } END { print s + 0 }')"
(( runtime_bytes > 0 )) || fail "no files in the unpacked archive $PKG_UNPACKED"
growth=$(( image_size - base_size ))
slack=$(( 2 * 1024 * 1024 ))
echo "image growth: $growth bytes (its files that run: $runtime_bytes bytes; the archive: $archive_bytes bytes; meshrun's layer: $layers)"
(( growth <= runtime_bytes + slack )) ||
  fail "the image grew by $growth bytes, more than the $runtime_bytes bytes of files that run (+ $slack)"

step "the main job in the image"
out="$(timeout 180 "${P[@]}" run --rm "${LIMITS[@]}" --network none -v "$PKG_WORKER:/w:ro" "$image" \
  meshrun --standalone --nproc_per_node=8 /w/two_d_setup --device cpu 2>&1)" || { echo "$out"; fail "the main job in the image"; }
[[ "$(grep -c '_sum=.* OK' <<< "$out")" == 16 ]] || { echo "$out"; fail "the main job in the image: not 8 ranks with both sums OK"; }
echo "$out" | tail -2

step "a two-node job: two containers on the podman network $net"
"${P[@]}" network create "$net" > /dev/null
rdzv="mr0-$$:29400"
for node in 0 1; do
  "${P[@]}" run -d "${LIMITS[@]}" --name "mr$node-$$" --network "$net" -v "$PKG_WORKER:/w:ro" "$image" \
    meshrun --nnodes=2 --nproc_per_node=4 --rdzv_endpoint="$rdzv" --rdzv_id=two-containers /w/two_d_setup --device cpu > /dev/null
done
codes="$(timeout 180 "${P[@]}" wait "mr0-$$" "mr1-$$")" || { "${P[@]}" logs "mr0-$$"; "${P[@]}" logs "mr1-$$"; fail "the containers did not end within 180 s"; }
logs="$("${P[@]}" logs "mr0-$$" 2>&1; "${P[@]}" logs "mr1-$$" 2>&1)"
[[ "$(echo $codes)" == "0 0" ]] || { echo "$logs"; fail "the containers exited with $(echo $codes)"; }
[[ "$(grep -c '_sum=.* OK' <<< "$logs")" == 16 ]] || { echo "$logs"; fail "the two-node job: not 8 ranks with both sums OK"; }
echo "PASS: the Containerfile builds on $base; the image runs the main job and a two-node job over a podman network"
