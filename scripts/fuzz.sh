#!/usr/bin/env bash
# Builds kiln's libFuzzer targets with clang (-fsanitize=fuzzer,address,undefined) in their own
# build directory and runs each for SECONDS (default 30), one at a time.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]      e.g. scripts/fuzz.sh 300 mcp_handler
#
# Seeds come from fuzz/corpus/<target>/ (read only); new inputs go to
# $FUZZ_BUILD_DIR/corpus/<target>/, crashes to $FUZZ_BUILD_DIR/artifacts/<target>/. Copy a crash
# into fuzz/regressions/<target>/ once fixed: the gcc CTest entry `fuzz_regressions` replays it.
# FUZZ_MERGE=1 merges the new coverage back into fuzz/corpus/<target>/ (minimized).
# Env: FUZZ_BUILD_DIR (default ./build-fuzz), FUZZ_JOBS (ninja -j, default nproc).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SECONDS_PER_TARGET="${1:-30}"
shift || true
ALL=(mcp_handler config_parser diagnostics www_authenticate layer_writer tool_views)
[ $# -gt 0 ] && TARGETS=("$@") || TARGETS=("${ALL[@]}")
BUILD_DIR="${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}"

command -v clang++ >/dev/null || { echo "fuzz: clang++ not found (scripts/setup.sh installs it)" >&2; exit 1; }

export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=1
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++ -DKILN_FUZZ=ON \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link $SAN" \
  -DCMAKE_EXE_LINKER_FLAGS="$SAN" >/dev/null
ninja -C "$BUILD_DIR" -j"${FUZZ_JOBS:-$(nproc)}" "${TARGETS[@]/#/fuzz_}"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
status=0
for t in "${TARGETS[@]}"; do
  work="$BUILD_DIR/corpus/$t" art="$BUILD_DIR/artifacts/$t"
  mkdir -p "$work" "$art" "$ROOT/fuzz/corpus/$t"
  echo "== fuzz_$t for ${SECONDS_PER_TARGET}s"
  if ! "$BUILD_DIR/fuzz/fuzz_$t" -max_total_time="$SECONDS_PER_TARGET" -max_len=65536 \
      -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$art/" \
      "$work" "$ROOT/fuzz/corpus/$t" 2>"$BUILD_DIR/fuzz_$t.log"; then
    echo "fuzz_$t: FAILED, see $BUILD_DIR/fuzz_$t.log and $art/" >&2
    status=1
  fi
  grep -E "^(#[0-9]+.*DONE|stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb)" \
    "$BUILD_DIR/fuzz_$t.log" || true
  if [ "${FUZZ_MERGE:-0}" = 1 ]; then
    "$BUILD_DIR/fuzz/fuzz_$t" -merge=1 "$ROOT/fuzz/corpus/$t" "$work" 2>>"$BUILD_DIR/fuzz_$t.log"
  fi
done
exit $status
