#!/usr/bin/env bash
# Issue 18: every latency row of the Targets table in one run, interleaved pair by pair against
# the host's incremental `go build` (bench/run_all.py drives a real `kiln serve` over git + MCP).
#
#   bench/run_all.sh                  (root; run it under `flock /tmp/kiln-heavy.lock` on a shared machine)
#
#   N=5                         iterations per row (the concurrency row runs max(2, N/2) rounds of 8)
#   KILN=build/app/kiln         the kiln binary
#   BENCH_WORK=/var/tmp/kiln-run-all        scratch space (emptied first; ~2 GB)
#   BENCH_REGISTRY_DIR=/var/tmp/kiln-registry BENCH_REGISTRY_PORT=5000   (scripts/registry.sh)
#   KILN_BENCH_PORT=18751       kiln's listener (127.0.0.1)
#   ROWS="layered containerfile bare new identical error concurrent onpush"   subset to run
#   BENCH_PERF=/path/perf.data  record each concurrent round system-wide (perf report --sort comm)
#
# Writes bench/out/latency.json and bench/out/latency.png and prints the table and ratios.
# bench/on_push_bench.sh (build on push) is called when present; its last JSON line is kept.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export KILN=${KILN:-$ROOT/build/app/kiln}
case $KILN in /*) ;; *) KILN=$ROOT/$KILN ;; esac
for c in go buildah skopeo git gnuplot python3; do
  command -v "$c" >/dev/null || { echo "run_all.sh: $c is missing (scripts/setup.sh installs it)" >&2; exit 1; }
done
exec python3 "$ROOT/bench/run_all.py" "$@"
