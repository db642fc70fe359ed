#!/usr/bin/env bash
# Configures and builds kiln (Release with debug info) into ./build. Uses ccache when present.
# KILN_WERROR=ON makes compiler warnings errors (scripts/test.sh, i.e. CI, sets it).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD_DIR="${KILN_BUILD_DIR:-$ROOT/build}"
# ccache hits across checkouts in different folders (CI clones beside the project).
export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=1
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DKILN_WERROR="${KILN_WERROR:-OFF}" >/dev/null
ninja -C "$BUILD_DIR" -j"$(nproc)" "$@"
