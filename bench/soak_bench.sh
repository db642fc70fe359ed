#!/usr/bin/env bash
# usage: bench/soak_bench.sh    env: KILN=build/app/kiln DOMAINS=2 CANDIDATES=4 ITERATIONS=25 [SEED=N] [KEEP=1]
#
# Soak benchmark (bench/soak_bench.mjs): a real docker-registry with htpasswd auth on
# 127.0.0.1:5170 and a real `kiln serve` on 127.0.0.1:18740 (DOMAINS layered domains, local
# deploy target on 127.0.0.1:19170+i), DOMAINS x CANDIDATES concurrent agent loops of ITERATIONS
# iterations each (mutate, git push, build_candidate over MCP; ~20 % compile errors, ~10 %
# cancels, ~10 % duplicate requests, occasional deploys), then consistency, leak, RSS, journal
# (`kiln state-check --builds`) and restart checks. Prints a summary (also bench/out/soak.json)
# and exits non-zero when a check fails. Bounded by SOAK_TIMEOUT_S (default 900 + 20 s per
# iteration). Small CI mode: DOMAINS=2 CANDIDATES=2 ITERATIONS=3 (a couple of minutes).
# Other knobs (see the header of soak_bench.mjs): P_BREAK P_CANCEL P_DUP P_DEPLOY DUP_EXPECT
# SOAK_PARENT SOAK_JSON; issue 19: STORAGE_MAX_GB (storage budget, split per domain), GC_INTERVAL_S,
# SAMPLE_S (RSS/disk/fd/thread samples into soak.json), DISK_SLACK, RSS_FLAT_PCT, KILLS and
# REGISTRY_RESTARTS (kill -9 / registry restarts during the loop, at EVENT_STEP intervals), LOOP_S
# (time-bounded loop), MIN_BUILDS, SOAK_PNG (chart). The long soak (docs/benchmarks.md):
#   DOMAINS=2 CANDIDATES=4 ITERATIONS=1000 LOOP_S=2160 SOAK_TIMEOUT_S=2700 KILLS=2 REGISTRY_RESTARTS=1 \
#   EVENT_STEP=0.05 STORAGE_MAX_GB=0.3 RSS_FLAT_PCT=10 MIN_BUILDS=1500 nice -n 10 bench/soak_bench.sh Runs as root (bubblewrap, registry); installs the MCP SDK on first use.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export KILN="$(realpath "${KILN:-$ROOT/build/app/kiln}")"
export DOMAINS="${DOMAINS:-2}" CANDIDATES="${CANDIDATES:-4}" ITERATIONS="${ITERATIONS:-25}"
if [ ! -d "$ROOT/tests/e2e/node_modules/@modelcontextprotocol/sdk" ]; then
  (cd "$ROOT/tests/e2e" && npm install --no-audit --no-fund --loglevel=error)
fi
exec node "$ROOT/bench/soak_bench.mjs"
