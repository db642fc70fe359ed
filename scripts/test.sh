#!/usr/bin/env bash
# Sets everything up and runs the whole test suite: unit tests, integration tests with real
# buildah and a real docker-registry, and end-to-end tests with the official MCP client.
# Usage: scripts/test.sh [ctest args...]   e.g. scripts/test.sh -L unit
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD_DIR="${KILN_BUILD_DIR:-$ROOT/build}"
"$ROOT/scripts/setup.sh"
# Warnings are errors here (and so in CI, .ci/run); the library graph is checked by ctest
# layer_check (scripts/check_layers.py) and the formatting by ctest format_check
# (scripts/check_format.sh).
KILN_WERROR=ON KILN_BUILD_DIR="$BUILD_DIR" "$ROOT/scripts/build.sh"
cd "$BUILD_DIR"
ctest --output-on-failure --no-tests=error "$@"
