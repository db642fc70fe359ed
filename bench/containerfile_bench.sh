#!/usr/bin/env bash
# Containerfile-mode benchmark: one generated Go service (bench/gen_go_service.py, ~29k lines,
# 45 packages), every path measured N times, medians compared with host incremental go build.
#
#   bench/containerfile_bench.sh            (root; env knobs below)
#
#   N=5                 iterations per row
#   N_COLD=3            iterations of the cold rows (each is a full compile)
#   KILN=build/app/kiln kiln binary; its rows show n/a when it is missing
#   BENCH_WORK=/var/tmp/kiln-bench           scratch space (tree, caches, buildah storage)
#   BENCH_REGISTRY_DIR=/var/tmp/kiln-registry BENCH_REGISTRY_PORT=5000   (scripts/registry.sh)
#   ROWS="host plain cache kiln"             which groups to run
#
# Writes bench/out/containerfile.json and bench/out/containerfile.png (gnuplot) and prints a
# table. Rows: see docs/benchmarks.md.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

N=${N:-5}
N_COLD=${N_COLD:-3}
WORK=${BENCH_WORK:-/var/tmp/kiln-bench}
KILN=${KILN:-$KILN_REPO_ROOT/build/app/kiln}
case $KILN in /*) ;; *) KILN=$KILN_REPO_ROOT/$KILN ;; esac
REG_DIR=${BENCH_REGISTRY_DIR:-/var/tmp/kiln-registry}
REG_PORT=${BENCH_REGISTRY_PORT:-5000}
ROWS=${ROWS:-host plain cache kiln}
OUT=$KILN_REPO_ROOT/bench/out
GEN=(python3 "$KILN_REPO_ROOT/bench/gen_go_service.py")
SRC=$WORK/src
SAMPLES=$WORK/samples.tsv
CMDLOG=$WORK/commands.log
STORE=(--root "$WORK/storage" --runroot "$WORK/runroot")

[ "$(id -u)" = 0 ] || die "run as root (buildah --isolation chroot)"
require_cmd go buildah skopeo python3 gnuplot curl
mkdir -p "$WORK" "$OUT"
: >"$SAMPLES"; : >"$CMDLOG"
BENCH_T0=$(now_ms)

# timed CMD...: runs CMD (output to the command log), sets RC and MS; never exits on failure.
timed() {
  local t0; t0=$(date +%s%N)
  echo "+ $*" >>"$CMDLOG"
  set +e; "$@" >>"$CMDLOG" 2>&1; RC=$?; set -e
  MS=$(( ($(date +%s%N) - t0) / 1000000 ))
}
sample() { printf '%s\t%s\n' "$1" "$2" >>"$SAMPLES"; }
gen() { "${GEN[@]}" --out "$SRC" "$@" >>"$CMDLOG"; }
has_row() { [[ " $ROWS " == *" $1 "* ]]; }

# --- registry, base images, workload --------------------------------------------------------
log "registry: $REG_DIR on 127.0.0.1:$REG_PORT"
reg_info=$("$KILN_REPO_ROOT/scripts/registry.sh" start --dir "$REG_DIR" --port "$REG_PORT")
REG=$(sed -n 's/^host=//p' <<<"$reg_info")
AUTH=$(sed -n 's/^auth_file=//p' <<<"$reg_info")
REG_URL=$(sed -n 's/^url=//p' <<<"$reg_info")
REG_CA=$(sed -n 's/^ca_file=//p' <<<"$reg_info")
REG_CA_JSON=null; [ -n "$REG_CA" ] && REG_CA_JSON="\"$REG_CA\""
log "base images (no-op when the registry has them)"
"$KILN_REPO_ROOT/scripts/base_images.sh" --registry "$REG" --authfile "$AUTH" >>"$CMDLOG"

rm -rf "$SRC"
gen_summary=$("${GEN[@]}" --out "$SRC")
log "$gen_summary"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOTOOLCHAIN=local GOPROXY=off

# --- host go build --------------------------------------------------------------------------
if has_row host; then
  cd "$SRC"
  for i in $(seq 1 "$N_COLD"); do
    rm -rf "$WORK/gocache"
    GOCACHE=$WORK/gocache timed go build -o "$WORK/host-app" ./cmd/app
    [ "$RC" = 0 ] || die "host cold build failed (see $CMDLOG)"
    sample host_cold "$MS"; log "host cold #$i: $MS ms"
  done
  export GOCACHE=$WORK/gocache
  for i in $(seq 1 "$N"); do
    timed go build -o "$WORK/host-app" ./cmd/app
    sample host_nochange "$MS"
  done
  for i in $(seq 1 "$N"); do
    gen --mutate "$i"
    timed go build -o "$WORK/host-app" ./cmd/app
    [ "$RC" = 0 ] || die "host incremental build failed (see $CMDLOG)"
    sample host_incr "$MS"; log "host incremental #$i: $MS ms"
  done
  for i in $(seq 1 "$N"); do
    gen --break
    timed go build -o "$WORK/host-app" ./cmd/app
    [ "$RC" != 0 ] || die "host build of the broken tree succeeded"
    sample host_break "$MS"
  done
  gen --mutate 0
  unset GOCACHE
  cd - >/dev/null
fi

# --- plain buildah (baseline) ---------------------------------------------------------------
BARGS=(--isolation chroot --layers --tls-verify=false --authfile "$AUTH"
       --build-arg "KILN_REGISTRY=$REG")
if has_row plain; then
  log "plain buildah: warm-up build (pulls the base images into $WORK/storage)"
  timed buildah "${STORE[@]}" build "${BARGS[@]}" -f "$SRC/Containerfile.plain" \
    -t "$REG/bench/plain:latest" "$SRC"
  [ "$RC" = 0 ] || die "plain buildah warm-up failed (see $CMDLOG)"
  for i in $(seq 1 "$N"); do
    gen --mutate $((100 + i))
    timed buildah "${STORE[@]}" build "${BARGS[@]}" -f "$SRC/Containerfile.plain" \
      -t "$REG/bench/plain:latest" "$SRC"
    [ "$RC" = 0 ] || die "plain buildah build failed (see $CMDLOG)"
    b=$MS
    timed buildah "${STORE[@]}" push --tls-verify=false --authfile "$AUTH" \
      "$REG/bench/plain:latest" "docker://$REG/bench/plain:latest"
    [ "$RC" = 0 ] || die "buildah push failed (see $CMDLOG)"
    sample plain_build "$b"; sample plain_push "$MS"; sample plain_total $((b + MS))
    log "plain buildah #$i: build $b ms + push $MS ms"
  done
  buildah "${STORE[@]}" rmi --prune >/dev/null 2>&1 || true
fi

# --- buildah with a GOCACHE cache mount (what kiln's containerfile mode runs) ---------------
if has_row cache; then
  log "buildah + cache mount: warm-up build (fills the cache mount under $WORK/tmp)"
  mkdir -p "$WORK/tmp"
  TMPDIR=$WORK/tmp timed buildah "${STORE[@]}" build "${BARGS[@]}" -f "$SRC/Containerfile" \
    -t "$REG/bench/cache:latest" "$SRC"
  [ "$RC" = 0 ] || die "cache-mount warm-up build failed (see $CMDLOG)"
  for i in $(seq 1 "$N"); do
    gen --mutate $((150 + i))
    TMPDIR=$WORK/tmp timed buildah "${STORE[@]}" build "${BARGS[@]}" -f "$SRC/Containerfile" \
      -t "$REG/bench/cache:latest" "$SRC"
    [ "$RC" = 0 ] || die "cache-mount buildah build failed (see $CMDLOG)"
    b=$MS
    timed buildah "${STORE[@]}" push --tls-verify=false --authfile "$AUTH" \
      "$REG/bench/cache:latest" "docker://$REG/bench/cache:latest"
    [ "$RC" = 0 ] || die "buildah push failed (see $CMDLOG)"
    sample cache_build "$b"; sample cache_push "$MS"; sample cache_total $((b + MS))
    log "buildah + cache mount #$i: build $b ms + push $MS ms"
  done
  buildah "${STORE[@]}" rmi --prune >/dev/null 2>&1 || true
fi

# --- kiln build (containerfile mode) --------------------------------------------------------
TOKEN_SHA=$(printf 'kiln-bench-token' | sha256sum | cut -d' ' -f1)
write_config() {  # FILE STATE_DIR
  cat >"$1" <<EOF
{
  "server": { "listen": "127.0.0.1:18700", "state_dir": "$2" },
  "scheduler": { "max_parallel_builds": 1 },
  "registries": { "local": { "url": "$REG_URL", "auth_file": "$AUTH", "ca_file": $REG_CA_JSON } },
  "domains": {
    "bench": {
      "token_sha256": ["$TOKEN_SHA"],
      "build": {
        "mode": "containerfile",
        "timeout_s": 1200,
        "containerfile": { "file": "Containerfile", "context": "." }
      },
      "image": { "registry": "local", "repository": "bench/app" },
      "deploy": { "type": "none" }
    }
  }
}
EOF
}

# kiln_run CONFIG EXPECT(succeeded|failed) ROW [CACHE_HIT]: one timed `kiln build`, checked.
kiln_run() {
  local cfg=$1 expect=$2 row=$3 want_hit=${4:-} res=$WORK/kiln-last.json
  local t0; t0=$(date +%s%N)
  echo "+ $KILN build --config $cfg --domain bench --candidate c1 --source $SRC" >>"$CMDLOG"
  set +e; "$KILN" build --config "$cfg" --domain bench --candidate c1 --source "$SRC" \
    >"$res" 2>>"$CMDLOG"; RC=$?; set -e
  MS=$(( ($(date +%s%N) - t0) / 1000000 ))
  cat "$res" >>"$CMDLOG"; cp "$res" "$WORK/kiln-$row.json"
  python3 - "$res" "$expect" "$RC" "$want_hit" <<'PY' >>"$CMDLOG" ||
import json, sys
path, expect, rc, want_hit = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
try:
    r = json.load(open(path))
except ValueError as e:
    sys.exit(f"kiln printed no JSON result: {e}")
if r.get("status") != expect or (rc == 0) != (expect == "succeeded"):
    sys.exit(f"status {r.get('status')!r} exit {rc}, expected {expect}")
if expect == "failed" and not any("tune.go" in (d.get("file") or "") for d in r.get("diagnostics") or []):
    print("WARNING: no diagnostic names tune.go", file=sys.stderr)
if want_hit and bool(r.get("cache_hit")) != (want_hit == "true"):
    print(f"WARNING: cache_hit is {r.get('cache_hit')}, expected {want_hit}", file=sys.stderr)
PY
    die "kiln $row: unexpected result (see $WORK/kiln-$row.json and $CMDLOG)"
  sample "$row" "$MS"
  python3 - "$res" "$row" >>"$SAMPLES" <<'PY'
import json, sys
t = json.load(open(sys.argv[1])).get("timings", {})
for k in ("build_ms", "push_ms"):
    if isinstance(t.get(k), (int, float)):
        print(f"{sys.argv[2]}_{k[:-3]}\t{t[k]}")
PY
  log "kiln $row: $MS ms"
}

if has_row kiln; then
  if [ -x "$KILN" ]; then
    for i in $(seq 1 "$N_COLD"); do
      rm -rf "$WORK/kiln-state-cold"
      write_config "$WORK/kiln-cold.json" "$WORK/kiln-state-cold"
      gen --mutate $((200 + i))
      kiln_run "$WORK/kiln-cold.json" succeeded kiln_cold
    done
    rm -rf "$WORK/kiln-state"
    write_config "$WORK/kiln.json" "$WORK/kiln-state"
    gen --mutate 300
    kiln_run "$WORK/kiln.json" succeeded kiln_warmup
    for i in $(seq 1 "$N"); do kiln_run "$WORK/kiln.json" succeeded kiln_nochange true; done
    for i in $(seq 1 "$N"); do
      gen --mutate $((300 + i))
      kiln_run "$WORK/kiln.json" succeeded kiln_incr false
    done
    for i in $(seq 1 "$N"); do
      gen --break
      kiln_run "$WORK/kiln.json" failed kiln_break
      gen --mutate $((400 + i))   # a fresh tree each time, so no result is reused
    done
    gen --mutate 0
  else
    log "kiln binary $KILN not found: kiln rows are n/a"
  fi
fi

# --- report ---------------------------------------------------------------------------------
BENCH_MS=$(( $(now_ms) - BENCH_T0 ))
python3 - "$SAMPLES" "$OUT" "$N" "$N_COLD" "$BENCH_MS" "$gen_summary" "$KILN" <<'PY'
import json, os, platform, statistics, subprocess, sys, time
samples, out, n, n_cold, bench_ms, gen_summary, kiln = sys.argv[1:8]
ROWS = [  # id, table label, chart label ("" = not charted); indented labels are parts
    ("host_cold", "host go build, cold (fresh GOCACHE)", "host cold"),
    ("host_nochange", "host go build, no change", "host no-change"),
    ("host_incr", "host go build, one-function change", "host 1-func change"),
    ("host_break", "host go build, compile error", "host compile error"),
    ("plain_build", "  buildah build, plain Containerfile, 1-func change", ""),
    ("plain_push", "  buildah push of that image", ""),
    ("plain_total", "buildah plain build + push (baseline)", "buildah plain + push"),
    ("cache_build", "  buildah build, GOCACHE cache mount, 1-func change", ""),
    ("cache_push", "  buildah push of that image", ""),
    ("cache_total", "buildah cache-mount build + push", "buildah cache mount + push"),
    ("kiln_cold", "kiln build, cold (fresh state_dir)", "kiln cold"),
    ("kiln_nochange", "kiln build, no change", "kiln no-change"),
    ("kiln_incr", "kiln build, one-function change", "kiln 1-func change"),
    ("kiln_incr_build", "  of which build_ms (kiln's timings)", ""),
    ("kiln_incr_push", "  of which push_ms (kiln's timings)", ""),
    ("kiln_break", "kiln build, compile error", "kiln compile error"),
]
data = {}
for line in open(samples):
    k, v = line.split("\t")
    data.setdefault(k, []).append(float(v) / 1000.0)
med = {k: statistics.median(v) for k, v in data.items()}
base = med.get("host_incr")
rows = []
for key, label, _ in ROWS:
    m = med.get(key)
    rows.append({"id": key, "label": label.strip(), "median_s": round(m, 3) if m is not None else None,
                 "samples_s": [round(x, 3) for x in data.get(key, [])],
                 "vs_host_incr": round(m / base, 2) if m is not None and base else None})
def cmd(*a):
    try:
        return subprocess.run(a, capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""
doc = {
    "benchmark": "containerfile",
    "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "n": int(n), "n_cold": int(n_cold), "bench_seconds": round(int(bench_ms) / 1000, 1),
    "workload": gen_summary,
    "machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                "loadavg_at_end": os.getloadavg()[0], "go": cmd("go", "version"),
                "buildah": cmd("buildah", "--version"),
                "kiln": kiln if os.access(kiln, os.X_OK) else None},
    "rows": rows,
}
with open(os.path.join(out, "containerfile.json"), "w") as f:
    json.dump(doc, f, indent=2)
    f.write("\n")
print(f"\n{gen_summary}; N={n} (cold rows N={n_cold}); {len(doc['rows'])} rows; "
      f"bench took {doc['bench_seconds']} s; load avg {doc['machine']['loadavg_at_end']:.1f}")
print(f"{'path':58} {'median s':>9} {'vs host incr':>13}")
for r, (_, label, _) in zip(rows, ROWS):
    m = "n/a" if r["median_s"] is None else f"{r['median_s']:.2f}"
    x = "" if r["vs_host_incr"] is None else f"{r['vs_host_incr']:.1f}x"
    print(f"{label:58} {m:>9} {x:>13}")
with open(os.path.join(out, "containerfile.dat"), "w") as f:
    for r, (_, _, chart) in zip(rows, ROWS):
        if chart and r["median_s"] is not None:
            group = {"host": 1, "plain": 2, "cache": 3, "kiln": 4}[r["id"].split("_")[0]]
            f.write('"%s" %.3f %d\n' % (chart, r["median_s"], group))
PY

if [ -s "$OUT/containerfile.dat" ]; then
  nbars=$(wc -l <"$OUT/containerfile.dat")
  gnuplot <<EOF
set terminal pngcairo size 1200,650 noenhanced font "sans,10"
set output "$OUT/containerfile.png"
set title "kiln containerfile mode vs host go build vs plain buildah (medians, N=$N; cold N=$N_COLD)"
set style fill solid 0.85 border -1
set boxwidth 0.6
set logscale y
set yrange [0.1:*]
set xrange [-0.6:$nbars-0.4]
set ylabel "seconds (log scale)"
set grid ytics
set xtics rotate by -30 font "sans,8"
set palette defined (1 "#6b8e23", 2 "#b22222", 3 "#d2691e", 4 "#3b73b9")
set cbrange [1:4]
unset colorbox
unset key
plot "$OUT/containerfile.dat" using 0:2:3:xtic(1) with boxes lc palette, \
     '' using 0:2:(sprintf("%.2f", \$2)) with labels offset 0,0.8
EOF
  log "wrote $OUT/containerfile.json and $OUT/containerfile.png"
fi
