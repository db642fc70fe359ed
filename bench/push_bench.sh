#!/usr/bin/env bash
# Workspace-sync latency: what the agent's `git push` of a one-file change plus the start of its
# build (build_candidate with wait:false, answered once kiln has resolved and admitted it) add
# on top of the build itself. Baseline in the same run: `git push` of the same change to a
# local bare repository (no HTTP, no kiln). Bounded: N iterations on 127.0.0.1.
#
#   bench/push_bench.sh     env: KILN (build/app/kiln), N (15), BENCH_REGISTRY_DIR/PORT
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
KILN=${KILN:-$ROOT/build/app/kiln}
N=${N:-15}
REG_DIR=${BENCH_REGISTRY_DIR:-/var/tmp/kiln-registry}
REG_PORT=${BENCH_REGISTRY_PORT:-5000}
PORT=${KILN_BENCH_PORT:-18721}
OUT=$ROOT/bench/out
WORK=$(mktemp -d /var/tmp/kiln-push-bench.XXXXXX)
mkdir -p "$OUT"
"$ROOT/scripts/registry.sh" start --dir "$REG_DIR" --port "$REG_PORT" >/dev/null
TOKEN=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
HASH=$(printf '%s' "$TOKEN" | "$KILN" hash-token)
cat > "$WORK/kiln.json" <<JSON
{ "server": {"listen": "127.0.0.1:$PORT", "state_dir": "$WORK/state"},
  "scheduler": {"max_parallel_builds": 1},
  "registries": {"local": {"url": "http://127.0.0.1:$REG_PORT", "auth_file": "$REG_DIR/auth.json"}},
  "domains": {"bench": {"token_sha256": ["$HASH"], "build": {"mode": "containerfile"},
                        "image": {"registry": "local", "repository": "bench/push"}}}}
JSON
"$KILN" serve --config "$WORK/kiln.json" > "$WORK/kiln.log" 2>&1 &
KPID=$!
trap 'kill -TERM $KPID 2>/dev/null; wait $KPID 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done

export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=http.extraHeader GIT_CONFIG_VALUE_0="Authorization: Bearer $TOKEN"
W="$WORK/src"; cp -r "$ROOT/examples/epp" "$W"
cd "$W"; git init -q; git add -A; git -c user.name=b -c user.email=b@x commit -qm v0
git push -q "http://127.0.0.1:$PORT/git/bench.git" HEAD:refs/heads/c1
git init -q --bare "$WORK/plain.git"; git push -q "$WORK/plain.git" HEAD:refs/heads/c1

H=(-H "Authorization: Bearer $TOKEN" -H "Content-Type: application/json" -H "Accept: application/json, text/event-stream")
SID=$(curl -s -D - -o /dev/null "${H[@]}" "http://127.0.0.1:$PORT/mcp" \
  -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}' |
  tr -d '\r' | sed -n 's/^[Mm][Cc][Pp]-[Ss]ession-[Ii]d: //p')
H+=(-H "MCP-Session-Id: $SID" -H "MCP-Protocol-Version: 2025-11-25" -H "Accept: application/json")
ms() { date +%s%3N; }
kiln_ms=(); plain_ms=()
for i in $(seq 1 "$N"); do
  sed -i "s|^// bench.*||" internal/scorer/scorer.go; echo "// bench $i" >> internal/scorer/scorer.go
  git -c user.name=b -c user.email=b@x commit -qam "change $i"
  t0=$(ms); git push -q "$WORK/plain.git" HEAD:refs/heads/c1; t1=$(ms)
  plain_ms+=($((t1 - t0)))
  t0=$(ms)
  git push -q "http://127.0.0.1:$PORT/git/bench.git" HEAD:refs/heads/c1
  r=$(curl -s "${H[@]}" "http://127.0.0.1:$PORT/mcp" \
    -d '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"build_candidate","arguments":{"candidate":"c1","wait":false}}}')
  t1=$(ms)
  grep -q '"build_id' <<<"$r" || { echo "build did not start: $r" >&2; exit 1; }
  kiln_ms+=($((t1 - t0)))
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
K=$(median "${kiln_ms[@]}"); P=$(median "${plain_ms[@]}")
echo "git push over kiln's HTTP + build_candidate(wait:false) answered: median ${K} ms (N=$N)"
echo "git push to a local bare repository (baseline):               median ${P} ms"
echo "{\"n\": $N, \"push_and_build_start_ms\": $K, \"plain_local_push_ms\": $P, \"target_ms\": 150}" > "$OUT/push.json"
echo "wrote $OUT/push.json"
