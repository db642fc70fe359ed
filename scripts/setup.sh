#!/usr/bin/env bash
# Installs every Debian package kiln, its tests and its benchmarks need.
# Idempotent: does nothing when everything is already installed.
set -euo pipefail

PKGS=(
  # toolchain
  cmake g++ ninja-build ccache pkg-config
  # libraries
  libcaf-dev libboost1.81-dev libboost-filesystem1.81-dev libboost-system1.81-dev
  nlohmann-json3-dev libspdlog-dev libssl-dev zlib1g-dev libzstd-dev libgtest-dev
  # builders and registry
  buildah skopeo docker-registry apache2-utils uidmap bubblewrap busybox-static
  golang-go git curl iproute2 util-linux openssl ca-certificates procps psmisc
  # benchmarks
  gnuplot-nox python3 wrk
  # MCP test client
  nodejs
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
