#!/usr/bin/env bash
# Installs the Debian packages meshrun needs. Idempotent: packages already
# present are skipped, and nothing runs when all are there.
#   usage: scripts/install-deps.sh [--build]
#     --build   only what building meshrun and its main job needs
#               (scripts/main-job.sh): compilers, CMake and the libraries
#     (none)    that, plus what the tests, benchmarks and packaging use
#               (scripts/test.sh, scripts/package.sh)
set -euo pipefail

BUILD_PKGS=(
  build-essential cmake pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev libcli11-dev libgloo-dev nlohmann-json3-dev
  libhwloc-dev prometheus-cpp-dev libcivetweb-dev libjemalloc-dev libssl-dev
  # etcd's .proto files the build generates its stubs from (proto/etcd/).
  golang-etcd-server-dev
)
TEST_PKGS=(
  # The portable build's sources of Debian's libraries (cmake/debian-source.sh).
  dpkg-dev
  catch2 clang libclang-rt-14-dev
  python3-torch python3-numpy python3-matplotlib
  openssl
  iproute2 iputils-ping procps
  slurm-wlm munge python3-yaml python3-venv systemd
  # etcd v3 for the replicated server's state (docs/etcd.md): the server the tests start,
  # etcdctl for debugging and the auth tests.
  etcd-server etcd-client
  # Packaging (scripts/package.sh) and its tests (tests/package/): CPack's .deb
  # (dpkg-dev, fakeroot), lintian, debootstrap roots, podman images, objdump.
  fakeroot lintian debootstrap podman runc uidmap golang-github-containernetworking-plugin-dnsname
  binutils file curl util-linux
  # The manual pages, made from meshrun --help (packaging/man-pages.sh).
  help2man
  # Signing SHA256SUMS (scripts/package.sh --sign) and its test.
  gnupg
)

case "${1:-}" in
  --build) PKGS=("${BUILD_PKGS[@]}") ;;
  "") PKGS=("${BUILD_PKGS[@]}" "${TEST_PKGS[@]}") ;;
  *) echo "install-deps: unknown argument '$1': allowed --build, or none" >&2; exit 2 ;;
esac

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
