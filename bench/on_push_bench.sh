#!/usr/bin/env bash
# Build on push (issue 18): the agent pushes a one-function change of the generated Go service
# (bench/gen_go_service.py), waits DELAY_MS (2 s, the model deciding to call the tool), then
# calls build_candidate; kiln started the build when the push landed, so the call joins it.
# Measured per iteration, interleaved: host incremental `go build` of the same change, and the
# agent's wait (`timings.waited_ms` from the call to the answer, and the client's own clock).
# Row: "build on push, agent calls build_candidate 2 s after its push: waited <= 0.1x host
# incremental go build". Medians of N.
#
#   bench/on_push_bench.sh      (root; env: KILN=build/app/kiln N=5 MODE=layered|containerfile
#                                DELAY_MS=2000 BENCH_REGISTRY_DIR=/var/tmp/kiln-registry
#                                BENCH_REGISTRY_PORT=5000 PORT=18851)
# Prints one JSON object line (also bench/out/on_push.json) with the numbers and ratios.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
KILN=$(realpath "${KILN:-$ROOT/build/app/kiln}")
export N=${N:-5} MODE=${MODE:-layered} DELAY_MS=${DELAY_MS:-2000} PORT=${PORT:-18851}
REG_DIR=${BENCH_REGISTRY_DIR:-/var/tmp/kiln-registry}
REG_PORT=${BENCH_REGISTRY_PORT:-5000}
W=$(mktemp -d /var/tmp/kiln-onpush-bench.XXXXXX)
OUT=$ROOT/bench/out; mkdir -p "$OUT"
trap 'rm -rf "$W"' EXIT
if [ ! -d "$ROOT/tests/e2e/node_modules/@modelcontextprotocol/sdk" ]; then
  (cd "$ROOT/tests/e2e" && npm install --no-audit --no-fund --loglevel=error >&2)
fi
"$ROOT/scripts/registry.sh" start --dir "$REG_DIR" --port "$REG_PORT" >/dev/null
"$ROOT/scripts/base_images.sh" --registry "127.0.0.1:$REG_PORT" --authfile "$REG_DIR/auth.json" >/dev/null
DIGEST=$(skopeo inspect --authfile "$REG_DIR/auth.json" --tls-verify=false "docker://127.0.0.1:$REG_PORT/kiln/busybox:1" --format '{{.Digest}}')
python3 "$ROOT/bench/gen_go_service.py" --out "$W/src" >/dev/null
TOKEN=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
if [ "$MODE" = layered ]; then
  BUILD='"mode": "layered", "layered": {
      "base_image": "127.0.0.1:'$REG_PORT'/kiln/busybox@'$DIGEST'",
      "command": ["go", "build", "-o", "out/app", "./cmd/app"],
      "env": {"CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false"},
      "caches": {"GOCACHE": "go-build"},
      "outputs": [{"from": "out/app", "to": "/app"}], "entrypoint": ["/app"]}'
else
  cp "$ROOT/bench/Containerfile" "$W/src/Containerfile"
  BUILD='"mode": "containerfile", "containerfile": {"file": "Containerfile", "context": "."}'
fi
cat > "$W/kiln.json" <<JSON
{ "server": {"listen": "127.0.0.1:$PORT", "state_dir": "$W/state"},
  "registries": {"local": {"url": "http://127.0.0.1:$REG_PORT", "auth_file": "$REG_DIR/auth.json"}},
  "domains": {"bench": {"token_sha256": ["$(printf %s "$TOKEN" | "$KILN" hash-token)"],
    "build": {$BUILD},
    "image": {"registry": "local", "repository": "bench/onpush"}}}}
JSON
export KILN W TOKEN ROOT
node "$ROOT/bench/on_push_bench.mjs" | tee "$OUT/on_push.json"
