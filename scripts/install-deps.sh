#!/usr/bin/env bash
# Installs every Debian package meshrun needs to build, test and benchmark.
# Idempotent: packages already present are skipped, and nothing runs when all are there.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev libcli11-dev catch2 libgloo-dev nlohmann-json3-dev
  clang libclang-rt-14-dev
  python3-torch python3-numpy python3-matplotlib
  libhwloc-dev prometheus-cpp-dev libcivetweb-dev libjemalloc-dev
  libssl-dev openssl
  iproute2 iputils-ping procps
  slurm-wlm munge python3-yaml python3-venv systemd
  # etcd v3 for the replicated server's state (docs/etcd.md): the server the tests start,
  # etcdctl for debugging and the auth tests, and etcd's .proto files the build generates
  # its stubs from (proto/etcd/).
  etcd-server etcd-client golang-etcd-server-dev
  # Packaging (scripts/package.sh) and its tests (tests/package/): CPack's .deb
  # (dpkg-dev, fakeroot), lintian, debootstrap roots, podman images, objdump.
  dpkg-dev fakeroot lintian debootstrap podman runc uidmap golang-github-containernetworking-plugin-dnsname
  binutils file curl util-linux
)

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
