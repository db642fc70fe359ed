#!/usr/bin/env bash
# One run, every path side by side on the generated Go service (bench/gen_go_service.py):
# host go build (cold, no change, one-function change, compile error), plain buildah + push,
# buildah with a GOCACHE cache mount + push, ko-style with buildah (host go build, then
# buildah from/copy/config/commit/push), kiln containerfile mode and kiln layered mode (cold,
# no change, one-function change, compile error). Ratios are to host incremental go build of
# the same run. Writes bench/out/compare.json, bench/out/compare.png (one chart, all rows) and
# prints the table.
#
#   KILN=build/app/kiln bench/compare_bench.sh      (root; knobs as bench/containerfile_bench.sh)
#
# About 7-9 minutes on 2 quiet cores with N=5, N_COLD=2. Check `uptime` first: other builds on
# the machine skew every row.
set -euo pipefail
export ROWS=${ROWS:-host plain cache ko kiln layered}
export OUT_NAME=${OUT_NAME:-compare}
export N_COLD=${N_COLD:-2}
exec "$(dirname "${BASH_SOURCE[0]}")/containerfile_bench.sh" "$@"
