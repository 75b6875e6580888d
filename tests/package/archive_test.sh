#!/usr/bin/env bash
# The portable archive, from the file (docs/install.md):
#   unpack    "package: archive" (fixture): tar xf; the layout; every program and
#             library needs glibc only, at most GLIBC_2.34 (objdump); programs built
#             against it with find_package(meshrun) (tests/package/worker/)
#   main      the main job (8 workers, the 2-D libmesh setup over Gloo; the worker built from
#             the archive's examples, then its ready libexec/meshrun/examples/two_d_setup), the static
#             consumer, where glibc is the only library (GLIBC_ONLY in lib.sh)
#   two-node  a two-node job, both nodes where glibc is the only library
#   old-glibc in a bare Debian 11 root (glibc 2.31): bin/meshrun exits 1 with one line
#             naming the glibc found and the one needed
#   usage: archive_test.sh SOURCE_DIR BINARY_DIR unpack|main|two-node|old-glibc
SOURCE_DIR="$1" BINARY_DIR="$2" mode="${3:-}"
source "$SOURCE_DIR/tests/package/lib.sh"
case "$mode" in unpack|main|two-node|old-glibc) ;; *) fail "mode '$mode': allowed unpack, main, two-node, old-glibc";; esac
floor=2.34

if [[ $mode == unpack ]]; then
  archive="$(archive_file)"
  rm -rf "$PKG_UNPACKED" "$PKG_WORKER"
  mkdir -p "$PKG_UNPACKED"
  step "tar xf $(basename "$archive")"
  tar -C "$PKG_UNPACKED" -xf "$archive"
  root="$(archive_root)"
  for f in bin/meshrun libexec/meshrun/meshrun libexec/meshrun/meshrun-worker-shim libexec/meshrun/examples/two_d_setup \
           share/meshrun/examples/CMakeLists.txt \
           share/meshrun/examples/two_d_setup.cc share/meshrun/deploy/container/Containerfile \
           share/meshrun/deploy/systemd/meshrun-server.service share/man/man1/meshrun.1.gz lib/libmeshrun_mesh.so.0 lib/libmeshrun_mesh.so lib/libmeshrun_mesh.a \
           lib/libmeshrun_absl.a include/meshrun/device_mesh.h include/absl/status/status.h \
           lib/cmake/meshrun/meshrunConfig.cmake lib/cmake/meshrun/meshrunTargets.cmake share/doc/meshrun/copyright; do
    [[ -e "$root/$f" ]] || fail "$f is missing from the archive"
  done
  step "glibc only, GLIBC_$floor at most"
  newest=0
  while IFS= read -r -d '' f; do
    [[ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" == '177ELF' ]] || continue
    needed="$(objdump -p "$f" | awk '$1 == "NEEDED" {print $2}' | tr '\n' ' ')"
    echo "${f#"$root"/}: $needed"
    for n in $needed; do
      case "$n" in
        libc.so.6|libm.so.6|libpthread.so.0|libdl.so.2|librt.so.1|ld-linux-x86-64.so.2) ;;
        libmeshrun_mesh.so.0) [[ "$f" == */libmeshrun_mesh_nccl.so* || "$f" == */libexec/meshrun/examples/* ]] || fail "${f#"$root"/} needs $n" ;;
        *) fail "${f#"$root"/} needs $n, which is not glibc" ;;
      esac
    done
    v="$(objdump -T "$f" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -1)"
    [[ -n "$v" && "$(printf '%s\n%s\n' "$v" "$newest" | sort -V | tail -1)" == "$v" ]] && newest="$v"
  done < <(find "$root/bin" "$root/libexec" "$root/lib" -type f -print0)
  [[ "$(printf '%s\n%s\n' "$newest" "$floor" | sort -V | tail -1)" == "$floor" ]] || fail "needs GLIBC_$newest (> $floor)"
  echo "newest glibc symbol version: GLIBC_$newest"
  step "ldd libexec/meshrun/meshrun; bin/meshrun --version (the launcher that checks glibc)"
  ldd "$root/libexec/meshrun/meshrun"
  "$root/bin/meshrun" --version
  # No run path: nothing is carried, everything is linked in.
  if objdump -p "$root/libexec/meshrun/meshrun" "$root/lib/libmeshrun_mesh.so.0" | grep -E 'R(UN)?PATH'; then
    fail "a run path is set"
  fi
  step "programs built against the archive with find_package(meshrun)"
  cmake -S "$SOURCE_DIR/tests/package/worker" -B "$PKG_WORKER" -DCMAKE_PREFIX_PATH="$root" \
    -DMESHRUN_SOURCE_DIR="$SOURCE_DIR" -DCMAKE_BUILD_TYPE=Release > "$PKG_TEST/worker-configure.log" 2>&1 ||
    { cat "$PKG_TEST/worker-configure.log"; fail "configuring tests/package/worker against the archive"; }
  # Its Abseil is the archive's, not the system's.
  grep -q "libmeshrun_absl.a" "$PKG_WORKER/CMakeFiles/mesh_consumer.dir/link.txt" ||
    fail "the consumer does not link the archive's Abseil (lib/libmeshrun_absl.a)"
  cmake --build "$PKG_WORKER" -j2 > "$PKG_TEST/worker-build.log" 2>&1 ||
    { tail -40 "$PKG_TEST/worker-build.log"; fail "building tests/package/worker against the archive"; }
  # The examples, from the archive alone (its share/meshrun/examples/), as its
  # CMakeLists.txt says: the main job's worker is the archive's two_d_setup.
  step "the archive's examples: cmake -S share/meshrun/examples -DCMAKE_PREFIX_PATH=<archive>"
  cmake -S "$root/share/meshrun/examples" -B "$PKG_WORKER/examples" -DCMAKE_PREFIX_PATH="$root" \
    -DCMAKE_BUILD_TYPE=Release > "$PKG_TEST/examples-configure.log" 2>&1 ||
    { cat "$PKG_TEST/examples-configure.log"; fail "configuring the archive's examples"; }
  cmake --build "$PKG_WORKER/examples" -j2 > "$PKG_TEST/examples-build.log" 2>&1 ||
    { tail -40 "$PKG_TEST/examples-build.log"; fail "building the archive's examples"; }
  cp "$PKG_WORKER/examples/two_d_setup" "$PKG_WORKER/two_d_setup"
  for e in hsdp three_d_slicing; do
    out="$(timeout 120 "$root/bin/meshrun" --standalone --nproc_per_node=8 "$PKG_WORKER/examples/$e" --device cpu 2>&1)" ||
      { echo "$out"; fail "the archive's example $e"; }
  done
  # The shared consumer, as a user on this machine runs it.
  out="$(timeout 120 "$root/bin/meshrun" --standalone --nproc_per_node=4 "$PKG_WORKER/mesh_consumer" 2>&1)" ||
    { echo "$out"; fail "mesh_consumer (shared libmesh) under the archive's meshrun"; }
  [[ "$(grep -c '_sum=.* OK' <<< "$out")" == 8 ]] || { echo "$out"; fail "mesh_consumer: not 4 ranks with both sums OK"; }
  echo "PASS: the archive unpacks, needs glibc <= $floor only, and programs build against it"
  exit 0
fi

if [[ $mode == old-glibc ]]; then
  need_root "chroot"
  old="$PKG_CACHE/bullseye-minbase"
  [[ -f "$old/.meshrun-root" ]] || skip "no Debian 11 root (the \"package: Debian 11 root\" test makes it)"
  root="$(archive_root)"
  step "bin/meshrun --version in a bare Debian 11 root ($(cat "$old/etc/debian_version"))"
  set +e
  out="$(timeout 60 unshare --mount --propagation private /bin/sh -c \
    'mount --bind "$1" "$2/mnt" && exec chroot "$2" /mnt/bin/meshrun --version' sh "$root" "$old" 2>&1)"
  code=$?
  set -e
  echo "$out"
  [[ $code == 1 ]] || fail "exit status $code, expected 1"
  [[ "$(printf '%s\n' "$out" | wc -l)" == 1 ]] || fail "more than one line"
  [[ "$out" == "meshrun: error: this system has glibc 2.31; meshrun needs glibc $floor or newer"* ]] ||
    fail "not the one-line glibc message"
  echo "PASS: one line, exit 1"
  exit 0
fi

need_root "a mount namespace that leaves glibc only"
root="$(archive_root)"
set_glibc_only
[[ -x "$PKG_WORKER/two_d_setup" ]] || fail "no worker in $PKG_WORKER (the \"package: archive\" test builds it)"
# The view works: a Debian program cannot start in it.
if "${GLIBC_ONLY[@]}" /usr/bin/python3 -c 'print(1)' > /dev/null 2>&1; then
  fail "python3 started with glibc only: Debian's libraries are not hidden"
fi
out="$("${GLIBC_ONLY[@]}" /usr/bin/python3 -c 'print(1)' 2>&1 || true)"
grep -q "^/usr/bin/python3: error while loading shared libraries" <<< "$out" || fail "python3 with glibc only: $out"

if [[ $mode == main ]]; then
  step "the main job with glibc only"
  start=$(date +%s%N)
  out="$(timeout 180 "${GLIBC_ONLY[@]}" "$root/bin/meshrun" --standalone --nproc_per_node=8 "$PKG_WORKER/two_d_setup" --device cpu 2>&1)" ||
    { echo "$out"; fail "the main job failed with glibc only"; }
  echo "$out" | tail -4
  [[ "$(grep -c 'shard_sum=.* OK' <<< "$out")" == 8 && "$(grep -c 'replicate_sum=.* OK' <<< "$out")" == 8 ]] ||
    { echo "$out"; fail "the main job: not 8 ranks with both sums OK"; }
  echo "main job: $(( ($(date +%s%N) - start) / 1000000 )) ms"
  step "the main job with the archive's ready worker (libexec/meshrun/examples/two_d_setup), glibc only"
  out="$(timeout 180 "${GLIBC_ONLY[@]}" "$root/bin/meshrun" --standalone --nproc_per_node=8 \
         "$root/libexec/meshrun/examples/two_d_setup" --device cpu 2>&1)" ||
    { echo "$out"; fail "the archive's two_d_setup failed with glibc only"; }
  [[ "$(grep -c 'shard_sum=.* OK' <<< "$out")" == 8 && "$(grep -c 'replicate_sum=.* OK' <<< "$out")" == 8 ]] ||
    { echo "$out"; fail "the archive's two_d_setup: not 8 ranks with both sums OK"; }
  step "the static consumer (meshrun::mesh_static) with glibc only"
  out="$(timeout 120 "${GLIBC_ONLY[@]}" "$root/bin/meshrun" --standalone --nproc_per_node=4 "$PKG_WORKER/mesh_consumer_static" 2>&1)" ||
    { echo "$out"; fail "mesh_consumer_static failed with glibc only"; }
  [[ "$(grep -c '_sum=.* OK' <<< "$out")" == 8 ]] || { echo "$out"; fail "mesh_consumer_static: not 4 ranks with both sums OK"; }
  # `meshrun --help` throws and catches an exception (CLI11): unwinding works
  # with the way a glibc older than 2.35 finds unwind tables (cmake/glibc_compat.c).
  step "an exception, unwound as on glibc 2.34 (MESHRUN_EMULATE_DL_FIND_OBJECT=1)"
  MESHRUN_EMULATE_DL_FIND_OBJECT=1 timeout 30 "${GLIBC_ONLY[@]}" "$root/bin/meshrun" --help > "$PKG_TEST/help.txt" 2>&1 ||
    { tail -5 "$PKG_TEST/help.txt"; fail "meshrun --help with the emulated _dl_find_object"; }
  grep -q -- "--nproc_per_node" "$PKG_TEST/help.txt" || fail "meshrun --help printed no flags"
  step "device cuda with glibc only: libmesh's NCCL backend says in one line what it looked for"
  out="$(timeout 60 "${GLIBC_ONLY[@]}" "$root/bin/meshrun" --standalone --nproc_per_node=1 "$PKG_WORKER/two_d_setup" \
         --device cuda --shape 1,1 2>&1)" && { echo "$out"; fail "device cuda ran with glibc only"; }
  if [[ -e "$root/lib/libmeshrun_mesh_nccl.so.0" ]]; then
    want="NCCL (libnccl.so.2) was not found on the library path"
  else
    want="is not installed (this package of meshrun has no NCCL backend)"
  fi
  grep -qF "$want" <<< "$out" || { echo "$out"; fail "device cuda with glibc only: no '$want'"; }
  grep -m1 -F "$want" <<< "$out"
  echo "PASS: the archive runs the main job and a static consumer with glibc only"
  exit 0
fi

# two-node: two meshruns, one node each (4 workers), on loopback.
step "a two-node job with glibc only"
port="$(free_port)"
logs="$PKG_TEST/two-node"
rm -rf "$logs" && mkdir -p "$logs"
pids=()
on_exit 'for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done'
for node in 0 1; do
  timeout 180 "${GLIBC_ONLY[@]}" "$root/bin/meshrun" --nnodes=2 --nproc_per_node=4 --rdzv_endpoint="127.0.0.1:$port" --rdzv_id="pkg-two-node-$$" \
    "$PKG_WORKER/two_d_setup" --device cpu > "$logs/node$node.log" 2>&1 &
  pids+=($!)
done
rc=0
for node in 0 1; do
  wait "${pids[$node]}" || { rc=$?; echo "node $node exited $rc"; cat "$logs/node$node.log"; }
done
pids=()
[[ $rc == 0 ]] || fail "the two-node job failed with glibc only"
total=$(cat "$logs"/node*.log | grep -c '_sum=.* OK')
[[ $total == 16 ]] || { cat "$logs"/node*.log; fail "the two-node job: $total of 16 sums OK"; }
echo "PASS: a two-node job with glibc only (8 ranks over 2 nodes)"

