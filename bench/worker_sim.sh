#!/usr/bin/env bash
# Worker-pool simulation (issue 20, docs/benchmarks.md "Worker pool simulation"): the table at
# the offered load that measures ~70 % utilization, a sweep of the offered load, and the PNG.
# Pure CPU, deterministic (seed): no buildah, registry or lock needed.
#   SIM=build/pool/worker_sim OUT=docs/images/worker_sim.png bench/worker_sim.sh [worker_sim options]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SIM="${SIM:-$ROOT/build/pool/worker_sim}"
OUT="${OUT:-$ROOT/docs/images/worker_sim.png}"
LOAD="${LOAD:-0.76}"
# CSV (kept, for replotting with PLOT_ONLY=1): offered strategy hit_rate p99/mean util jain
CSV="${CSV:-$ROOT/build/worker_sim.csv}"
if [ "${PLOT_ONLY:-0}" != 1 ]; then
  "$SIM" --utilization "$LOAD" --sweep "$CSV" "$@"
fi
for s in 0 1 2; do awk -v s="$s" '$2 == s' "$CSV" >"$CSV.$s"; done
gnuplot <<GP
set terminal pngcairo size 1100,440 font ",10" noenhanced
set output "$OUT"
set multiplot layout 1,2 title "100 workers x 2 slots, 50 domains, 2,000 candidates (worker_sim)"
set xlabel "offered load (fraction of all slots at a 90 % hit rate)"
set key bottom left
set grid
set xrange [0.38:0.92]
set ylabel "warm-cache hit rate"
set yrange [0:1.02]
plot "$CSV.0" using (\$1/100):3 with linespoints title "affinity (rendezvous + spill)", \
     "$CSV.1" using (\$1/100):3 with linespoints title "random free worker", \
     "$CSV.2" using (\$1/100):3 with linespoints title "context-path hash"
set ylabel "p99 queue wait / mean build time"
set logscale y
set yrange [0.1:300]
set key center right
plot "$CSV.0" using (\$1/100):4 with linespoints title "affinity (rendezvous + spill)", \
     "$CSV.1" using (\$1/100):4 with linespoints title "random free worker", \
     "$CSV.2" using (\$1/100):4 with linespoints title "context-path hash", \
     2 with lines dashtype 2 lc "gray" title "target 2x"
unset multiplot
GP
rm -f "$CSV".[012]
echo "wrote $OUT"
