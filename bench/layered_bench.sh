#!/usr/bin/env bash
# Layered-mode latency in one run: host `go build` incremental (one function body changed in a
# leaf package) vs kiln layered mode (sandboxed compile + layer + push of the missing blobs),
# request to pushed digest, on the generated 45-package Go service. Medians of N.
#   bench/layered_bench.sh     env: KILN (build/app/kiln), N (5), BENCH_REGISTRY_DIR/PORT
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
KILN=${KILN:-$ROOT/build/app/kiln}
N=${N:-5}
REG_DIR=${BENCH_REGISTRY_DIR:-/var/tmp/kiln-registry}
REG_PORT=${BENCH_REGISTRY_PORT:-5000}
W=$(mktemp -d /var/tmp/kiln-layered-bench.XXXXXX)
OUT=$ROOT/bench/out; mkdir -p "$OUT"
trap 'rm -rf "$W"' EXIT
"$ROOT/scripts/registry.sh" start --dir "$REG_DIR" --port "$REG_PORT" >/dev/null
"$ROOT/scripts/base_images.sh" --registry "127.0.0.1:$REG_PORT" --authfile "$REG_DIR/auth.json" >/dev/null
DIGEST=$(skopeo inspect --authfile "$REG_DIR/auth.json" --tls-verify=false "docker://127.0.0.1:$REG_PORT/kiln/busybox:1" --format '{{.Digest}}')
python3 "$ROOT/bench/gen_go_service.py" --out "$W/src" >/dev/null
cat > "$W/kiln.json" <<JSON
{ "server": {"listen": "127.0.0.1:18741", "state_dir": "$W/state"},
  "registries": {"local": {"url": "http://127.0.0.1:$REG_PORT", "auth_file": "$REG_DIR/auth.json"}},
  "domains": {"bench": {"token_sha256": ["$(printf x | "$KILN" hash-token)"],
    "build": {"mode": "layered", "layered": {
      "base_image": "127.0.0.1:$REG_PORT/kiln/busybox@$DIGEST",
      "command": ["go", "build", "-o", "out/app", "./cmd/app"],
      "env": {"CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false"},
      "caches": {"GOCACHE": "go-build"},
      "outputs": [{"from": "out/app", "to": "/app"}], "entrypoint": ["/app"]}},
    "image": {"registry": "local", "repository": "bench/layered"}}}}
JSON
ms() { date +%s%3N; }
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
export GOCACHE="$W/host-gocache" CGO_ENABLED=0 GOFLAGS=-buildvcs=false
(cd "$W/src" && go build -o "$W/host-app" ./cmd/app)                       # warm host cache
"$KILN" build --config "$W/kiln.json" --domain bench --candidate c1 --source "$W/src" >/dev/null 2>&1  # warm kiln
host=(); kiln=(); sbx=(); tarms=(); gz=(); push=(); i=0
phase() {  # FILE: "sandbox tar gzip push" from kiln's log lines
  python3 - "$1" <<'PY'
import json, re, sys
r = json.load(open(sys.argv[1])); log = r.get("log_tail") or ""
m = re.search(r"timings: sandbox (\d+) ms, tar (\d+) ms, (?:gzip|cache lookup) (\d+) ms", log)
print(*(m.groups() if m else ("0", "0", "0")), r.get("timings", {}).get("push_ms", 0))
PY
}
for i in $(seq 1 "$N"); do
  python3 "$ROOT/bench/gen_go_service.py" --mutate "$i" --out "$W/src" >/dev/null
  t0=$(ms); (cd "$W/src" && go build -o "$W/host-app" ./cmd/app); t1=$(ms); host+=($((t1 - t0)))
  t0=$(ms); "$KILN" build --config "$W/kiln.json" --domain bench --candidate c1 --source "$W/src" > "$W/r.json" 2>/dev/null; t1=$(ms)
  grep -q '"succeeded"' "$W/r.json" || { echo "kiln build failed"; cat "$W/r.json"; exit 1; }
  kiln+=($((t1 - t0)))
  read -r a b c d < <(phase "$W/r.json"); sbx+=("$a"); tarms+=("$b"); gz+=("$c"); push+=("$d")
done
H=$(median "${host[@]}"); K=$(median "${kiln[@]}")
ratio=$(python3 -c "print(round($K/$H, 2))")
S=$(median "${sbx[@]}"); TA=$(median "${tarms[@]}"); G=$(median "${gz[@]}"); P=$(median "${push[@]}")
LOAD=$(cut -d' ' -f1 /proc/loadavg)
echo "host go build incremental: median ${H} ms; kiln layered request -> pushed digest: median ${K} ms; ratio ${ratio}x (N=$N, load $LOAD)"
echo "  kiln medians: sandboxed build ${S} ms, tar+diff_id ${TA} ms, gzip+digest ${G} ms, push ${P} ms"
echo "{\"n\": $N, \"host_incremental_ms\": $H, \"kiln_layered_ms\": $K, \"ratio\": $ratio, \"sandbox_ms\": $S, \"tar_ms\": $TA, \"gzip_ms\": $G, \"push_ms\": $P, \"loadavg\": $LOAD}" > "$OUT/layered.json"
