#!/usr/bin/env bash
# Installs every Debian package kiln, its tests and its benchmarks need.
# Idempotent: does nothing when everything is already installed.
set -euo pipefail

PKGS=(
  # toolchain
  cmake g++ ninja-build ccache pkg-config
  # formatting (.clang-format)
  clang-format
  # libraries
  libcaf-dev libboost1.81-dev libboost-filesystem1.81-dev libboost-system1.81-dev
  nlohmann-json3-dev libspdlog-dev libssl-dev zlib1g-dev libzstd-dev libgtest-dev libyaml-cpp-dev
  # builders and registry
  buildah skopeo docker-registry apache2-utils uidmap bubblewrap busybox-static
  golang-go git curl iproute2 util-linux openssl ca-certificates procps psmisc
  # benchmarks
  gnuplot-nox python3 wrk
  # MCP test client
  nodejs
  # kiln's own image (scripts/build_image.sh: the Debian base) and manifest checks
  mmdebstrap python3-yaml
  # fuzzing (scripts/fuzz.sh only; the normal build uses gcc): clang + libFuzzer/ASan runtimes
  clang libclang-rt-14-dev
)

# kubectl (for `kubectl kustomize` in scripts/check_manifests.py): Debian's kubernetes-client
# only when no kubectl is installed (a newer one from elsewhere is kept; both render k8s/manifests).
command -v kubectl >/dev/null 2>&1 || PKGS+=(kubernetes-client)

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

# The unprivileged user containerfile builds run as (docs/security.md): a system user with no
# login, no home and no credential, plus a subordinate uid/gid range for rootless buildah's user
# namespace (newuidmap/newgidmap come from `uidmap`). Idempotent; KILN_BUILD_USER overrides the
# name (it must match build.user in kiln's config).
BUILD_USER=${KILN_BUILD_USER:-kiln-build}
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
if ! getent passwd "$BUILD_USER" >/dev/null; then
  echo "setup: creating build user $BUILD_USER"
  $SUDO useradd --system --user-group --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin "$BUILD_USER"
fi
# A free 65536-wide range after every range already handed out (useradd --system makes none).
next_sub_start() {  # FILE
  awk -F: 'BEGIN { m = 100000 } NF >= 3 { e = $2 + $3; if (e > m) m = e } END { print m }' "$1" 2>/dev/null || echo 100000
}
for kind in uid gid; do
  f=/etc/sub$kind
  [ -e "$f" ] || $SUDO touch "$f"
  if ! grep -q "^$BUILD_USER:" "$f"; then
    start=$(next_sub_start "$f")
    echo "setup: giving $BUILD_USER sub${kind}s $start-$((start + 65535))"
    $SUDO usermod "--add-sub${kind}s" "$start-$((start + 65535))" "$BUILD_USER"
  fi
done
