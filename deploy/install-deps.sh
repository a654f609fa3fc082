#!/usr/bin/env bash
# Installs the Debian packages tshard needs to build, test and run. Idempotent: when every package
# is already present it does nothing. As non-root it prints the exact apt-get line and exits 1.
set -euo pipefail

packages=(
  build-essential cmake pkg-config clang libclang-rt-dev procps clang-format universal-ctags
  libopenmpi-dev openmpi-bin
  libuv1-dev libxxhash-dev libjansson-dev liburing-dev libmicrohttpd-dev
  libprotobuf-c-dev protobuf-c-compiler
  check
  libopenblas-dev
  python3-numpy python3-protobuf protobuf-compiler python3-mpi4py python3-matplotlib
  python3-torch
  python3-pip python3-setuptools python3-venv
  iproute2
  chromium
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "tshard: missing Debian packages: ${missing[*]}" >&2
  echo "run as root:  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi

echo "tshard: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
