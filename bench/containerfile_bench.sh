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
#   ROWS="host plain cache kiln"             which groups to run; also "ko" (host go build +
#                       buildah from/copy/commit/push) and "layered" (kiln layered mode)
#   OUT_NAME=containerfile                   basename of the outputs in bench/out
#
# Writes bench/out/$OUT_NAME.json and bench/out/$OUT_NAME.png (gnuplot) and prints a
# table. Rows: see docs/benchmarks.md. bench/compare_bench.sh runs every group.
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
OUT_NAME=${OUT_NAME:-containerfile}
export OUT_NAME
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
base_out=$("$KILN_REPO_ROOT/scripts/base_images.sh" --registry "$REG" --authfile "$AUTH" 2>>"$CMDLOG")
echo "$base_out" >>"$CMDLOG"
BUSYBOX_REF=$(sed -n 's/^busybox=//p' <<<"$base_out")   # REG/kiln/busybox:1@sha256:...
BUSYBOX_DIGEST=${BUSYBOX_REF##*@}

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

# --- ko-style with buildah: host go build, then from/copy/commit/push ----------------------
if has_row ko; then
  log "ko-style buildah: warm-up (host GOCACHE, base image pulled into $WORK/storage)"
  export GOCACHE=$WORK/gocache
  (cd "$SRC" && go build -o "$WORK/ko-app" ./cmd/app) >>"$CMDLOG" 2>&1 || die "ko warm-up go build failed"
  ko_image() {  # builds and pushes one image; sets KB (buildah ms) and KP (push ms)
    local t0 c; t0=$(date +%s%N)
    {
      c=$(buildah "${STORE[@]}" from -q --pull=missing --tls-verify=false --authfile "$AUTH" \
            "$REG/kiln/busybox@$BUSYBOX_DIGEST") &&
      buildah "${STORE[@]}" copy -q "$c" "$WORK/ko-app" /app >/dev/null &&
      buildah "${STORE[@]}" config --entrypoint '["/app"]' "$c" &&
      buildah "${STORE[@]}" commit -q "$c" "$REG/bench/ko:latest" >/dev/null &&
      buildah "${STORE[@]}" rm "$c" >/dev/null
    } >>"$CMDLOG" 2>&1 || die "ko-style buildah from/copy/commit failed (see $CMDLOG)"
    KB=$(( ($(date +%s%N) - t0) / 1000000 ))
    timed buildah "${STORE[@]}" push --tls-verify=false --authfile "$AUTH" \
      "$REG/bench/ko:latest" "docker://$REG/bench/ko:latest"
    [ "$RC" = 0 ] || die "ko-style push failed (see $CMDLOG)"
    KP=$MS
  }
  ko_image
  for i in $(seq 1 "$N"); do
    gen --mutate $((170 + i))
    cd "$SRC"; timed go build -o "$WORK/ko-app" ./cmd/app; cd - >/dev/null
    [ "$RC" = 0 ] || die "ko-style go build failed"
    g=$MS
    ko_image
    sample ko_go "$g"; sample ko_buildah "$KB"; sample ko_push "$KP"; sample ko_total $((g + KB + KP))
    log "ko-style #$i: go build $g ms + buildah $KB ms + push $KP ms"
  done
  unset GOCACHE
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
import re
r = json.load(open(sys.argv[1]))
t = r.get("timings", {})
for k in ("build_ms", "push_ms"):
    if isinstance(t.get(k), (int, float)):
        print(f"{sys.argv[2]}_{k[:-3]}\t{t[k]}")
# layered mode: "kiln: timings: sandbox N ms, tar N ms, gzip|cache lookup N ms"
m = re.search(r"kiln: timings: sandbox (\d+) ms, tar (\d+) ms, (?:gzip|cache lookup) (\d+) ms", r.get("log_tail") or "")
if m:
    for name, v in zip(("sandbox", "tar", "gzip"), m.groups()):
        print(f"{sys.argv[2]}_{name}\t{v}")
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

# --- kiln build, layered mode ---------------------------------------------------------------
write_layered_config() {  # FILE STATE_DIR
  cat >"$1" <<EOF
{
  "server": { "listen": "127.0.0.1:18701", "state_dir": "$2" },
  "scheduler": { "max_parallel_builds": 1 },
  "registries": { "local": { "url": "$REG_URL", "auth_file": "$AUTH", "ca_file": $REG_CA_JSON } },
  "domains": {
    "bench": {
      "token_sha256": ["$TOKEN_SHA"],
      "build": {
        "mode": "layered",
        "timeout_s": 1200,
        "layered": {
          "base_image": "$REG/kiln/busybox@$BUSYBOX_DIGEST",
          "command": ["go", "build", "-o", "out/app", "./cmd/app"],
          "env": { "CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false", "GOTOOLCHAIN": "local", "GOPROXY": "off" },
          "caches": { "GOCACHE": "go-build" },
          "outputs": [ { "from": "out/app", "to": "/app" } ],
          "entrypoint": ["/app"]
        }
      },
      "image": { "registry": "local", "repository": "bench/layered" },
      "deploy": { "type": "none" }
    }
  }
}
EOF
}

if has_row layered; then
  if [ -x "$KILN" ]; then
    for i in $(seq 1 "$N_COLD"); do
      rm -rf "$WORK/layered-state-cold"
      write_layered_config "$WORK/layered-cold.json" "$WORK/layered-state-cold"
      gen --mutate $((500 + i))
      kiln_run "$WORK/layered-cold.json" succeeded layered_cold
    done
    rm -rf "$WORK/layered-state"
    write_layered_config "$WORK/layered.json" "$WORK/layered-state"
    gen --mutate 600
    kiln_run "$WORK/layered.json" succeeded layered_warmup
    # `--source` hashes the whole directory, and the build just rewrote out/app there: the
    # first identical request after a build is a (link-only) rebuild. Not sampled.
    kiln_run "$WORK/layered.json" succeeded layered_settle
    for i in $(seq 1 "$N"); do kiln_run "$WORK/layered.json" succeeded layered_nochange true; done
    for i in $(seq 1 "$N"); do
      gen --mutate $((600 + i))
      kiln_run "$WORK/layered.json" succeeded layered_incr false
    done
    for i in $(seq 1 "$N"); do
      gen --break
      kiln_run "$WORK/layered.json" failed layered_break
      gen --mutate $((700 + i))
    done
    gen --mutate 0
  else
    log "kiln binary $KILN not found: layered rows are n/a"
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
    ("ko_go", "  host go build, 1-func change (ko-style)", ""),
    ("ko_buildah", "  buildah from + copy + config + commit", ""),
    ("ko_push", "  buildah push of that image", ""),
    ("ko_total", "ko-style buildah: host go build + image + push", "ko-style buildah + push"),
    ("layered_cold", "kiln layered, cold (fresh state_dir)", "layered cold"),
    ("layered_nochange", "kiln layered, no change", "layered no-change"),
    ("layered_incr", "kiln layered, one-function change", "layered 1-func change"),
    ("layered_incr_build", "  of which build_ms (kiln's timings)", ""),
    ("layered_incr_sandbox", "    of which sandboxed go build", ""),
    ("layered_incr_tar", "    of which tar + sha256 (diff_id)", ""),
    ("layered_incr_gzip", "    of which parallel gzip + sha256", ""),
    ("layered_incr_push", "  of which push_ms (kiln's timings)", ""),
    ("layered_break", "kiln layered, compile error", "layered compile error"),
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
    "benchmark": os.environ.get("OUT_NAME", "containerfile"),
    "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "n": int(n), "n_cold": int(n_cold), "bench_seconds": round(int(bench_ms) / 1000, 1),
    "workload": gen_summary,
    "machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                "loadavg_at_end": os.getloadavg()[0], "go": cmd("go", "version"),
                "buildah": cmd("buildah", "--version"),
                "kiln": kiln if os.access(kiln, os.X_OK) else None},
    "rows": rows,
}
name = os.environ.get("OUT_NAME", "containerfile")
with open(os.path.join(out, name + ".json"), "w") as f:
    json.dump(doc, f, indent=2)
    f.write("\n")
print(f"\n{gen_summary}; N={n} (cold rows N={n_cold}); {len(doc['rows'])} rows; "
      f"bench took {doc['bench_seconds']} s; load avg {doc['machine']['loadavg_at_end']:.1f}")
print(f"{'path':58} {'median s':>9} {'vs host incr':>13}")
for r, (_, label, _) in zip(rows, ROWS):
    if r["median_s"] is None and r["id"].split("_")[0] in ("ko", "layered"):
        continue  # a group that was not run
    m = "n/a" if r["median_s"] is None else f"{r['median_s']:.2f}"
    x = "" if r["vs_host_incr"] is None else f"{r['vs_host_incr']:.1f}x"
    print(f"{label:58} {m:>9} {x:>13}")
with open(os.path.join(out, name + ".dat"), "w") as f:
    for r, (_, _, chart) in zip(rows, ROWS):
        if chart and r["median_s"] is not None:
            group = {"host": 1, "plain": 2, "cache": 3, "kiln": 4, "ko": 5, "layered": 6}[r["id"].split("_")[0]]
            f.write('"%s" %.3f %d\n' % (chart, r["median_s"], group))
PY

if [ -s "$OUT/$OUT_NAME.dat" ]; then
  nbars=$(wc -l <"$OUT/$OUT_NAME.dat")
  gnuplot <<EOF
set terminal pngcairo size 1500,700 noenhanced font "sans,10"
set output "$OUT/$OUT_NAME.png"
set title "kiln containerfile + layered modes vs host go build vs buildah (medians, N=$N; cold N=$N_COLD)"
set style fill solid 0.85 border -1
set boxwidth 0.6
set logscale y
set yrange [0.01:*]
set xrange [-0.6:$nbars-0.4]
set ylabel "seconds (log scale)"
set grid ytics
set xtics rotate by -30 font "sans,8"
set palette defined (1 "#6b8e23", 2 "#b22222", 3 "#d2691e", 4 "#3b73b9", 5 "#8b5fbf", 6 "#1f9e89")
set cbrange [1:6]
unset colorbox
unset key
plot "$OUT/$OUT_NAME.dat" using 0:2:3:xtic(1) with boxes lc palette, \
     '' using 0:2:(sprintf("%.2f", \$2)) with labels offset 0,0.8
EOF
  log "wrote $OUT/$OUT_NAME.json and $OUT/$OUT_NAME.png"
fi
