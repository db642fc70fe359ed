#!/usr/bin/env bash
# MCP status-call load while builds run: 64 concurrent clients (wrk, keep-alive connections)
# call tools/call candidate_status on one MCP session while 2 builds run; reports calls/s and
# latency percentiles, plus the p50 of a single client (1 connection) for a call that needs no
# build. Bounded: each wrk run lasts DURATION seconds on 127.0.0.1 and stops by itself.
#
# Issue 17: the same 64-client load on protocol 2026-07-28 (no session), and tasks/get p50 of a
# build task (1 client), reported beside the 2025-11-25 numbers. Both revisions also run paced
# at the issue's target rate, ~3,000 calls/s from 64 clients (each waits PACE_MS, 20, between
# calls; wrk measures from send to answer, so the delay is not in the latency): the closed-loop
# rows saturate the 2 cores that wrk shares with kiln, the paced rows show the latency at the
# target load.
#
#   bench/mcp_bench.sh     env: KILN (build/app/kiln), DURATION (10), BENCH_REGISTRY_DIR/PORT
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
KILN=${KILN:-$ROOT/build/app/kiln}
DURATION=${DURATION:-10}
REG_DIR=${BENCH_REGISTRY_DIR:-/var/tmp/kiln-registry}
REG_PORT=${BENCH_REGISTRY_PORT:-5000}
PORT=${KILN_BENCH_PORT:-18720}
OUT=$ROOT/bench/out
WORK=$(mktemp -d /var/tmp/kiln-mcp-bench.XXXXXX)
mkdir -p "$OUT"
"$ROOT/scripts/registry.sh" start --dir "$REG_DIR" --port "$REG_PORT" >/dev/null
"$ROOT/scripts/base_images.sh" --registry "127.0.0.1:$REG_PORT" --authfile "$REG_DIR/auth.json" >/dev/null
TOKEN=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
HASH=$(printf '%s' "$TOKEN" | "$KILN" hash-token)
cat > "$WORK/kiln.json" <<JSON
{ "server": {"listen": "127.0.0.1:$PORT", "state_dir": "$WORK/state", "max_inflight_per_session": 1024},
  "scheduler": {"max_parallel_builds": 2},
  "registries": {"local": {"url": "http://127.0.0.1:$REG_PORT", "auth_file": "$REG_DIR/auth.json"}},
  "domains": {"bench": {"token_sha256": ["$HASH"], "build": {"mode": "containerfile"},
                        "image": {"registry": "local", "repository": "bench/mcp"}}}}
JSON
"$KILN" serve --config "$WORK/kiln.json" > "$WORK/kiln.log" 2>&1 &
KPID=$!
trap 'kill -TERM $KPID 2>/dev/null; wait $KPID 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done

# Two candidates whose builds run (a RUN step that sleeps) during the measurement.
for c in s1 s2; do
  w="$WORK/src-$c"; cp -r "$ROOT/examples/epp" "$w"
  sed -i "s|WORKDIR /src|WORKDIR /src\nRUN sleep $((DURATION * 8 + 20)) # $c|" "$w/Containerfile"
  (cd "$w" && git init -q && git add -A && git -c user.name=b -c user.email=b@x commit -qm "$c" &&
   git push -q "$WORK/state/domains/bench/repo.git" "HEAD:refs/heads/$c")
done

H=(-H "Authorization: Bearer $TOKEN" -H "Content-Type: application/json" -H "Accept: application/json, text/event-stream")
SID=$(curl -s -D - -o /dev/null "${H[@]}" "http://127.0.0.1:$PORT/mcp" \
  -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}' |
  tr -d '\r' | sed -n 's/^[Mm][Cc][Pp]-[Ss]ession-[Ii]d: //p')
H+=(-H "MCP-Session-Id: $SID" -H "MCP-Protocol-Version: 2025-11-25")
curl -s -o /dev/null "${H[@]}" "http://127.0.0.1:$PORT/mcp" -d '{"jsonrpc":"2.0","method":"notifications/initialized"}'
for c in s1 s2; do
  curl -s "${H[@]}" "http://127.0.0.1:$PORT/mcp" \
    -d "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"build_candidate\",\"arguments\":{\"candidate\":\"$c\",\"wait\":false}}}" >/dev/null
done
sleep 3
cat > "$WORK/status.lua" <<LUA
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"candidate_status","arguments":{"candidate":"s1"}}}'
wrk.headers["Authorization"] = "Bearer $TOKEN"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json"
wrk.headers["MCP-Session-Id"] = "$SID"
wrk.headers["MCP-Protocol-Version"] = "2025-11-25"
done = function(summary, latency, requests)
  io.write(string.format("RESULT rps=%.0f p50_ms=%.2f p90_ms=%.2f p99_ms=%.2f errors=%d requests=%d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50) / 1000, latency:percentile(90) / 1000,
    latency:percentile(99) / 1000, summary.errors.status + summary.errors.connect + summary.errors.read +
    summary.errors.write + summary.errors.timeout, summary.requests))
end
LUA
building=$(curl -s "${H[@]}" "http://127.0.0.1:$PORT/mcp" -d '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"list_candidates","arguments":{}}}' | grep -o '"state":"[a-z]*"' | sort | uniq -c | tr '\n' ' ')
echo "candidates while measuring: $building"
many=$(wrk -t2 -c64 -d"${DURATION}s" --latency -s "$WORK/status.lua" "http://127.0.0.1:$PORT/mcp" | grep RESULT)
# The same 64 clients paced to ~2,000 calls/s in total (each waits 28 ms between calls).
{ cat "$WORK/status.lua"; echo 'delay = function() return 28 end'; } > "$WORK/paced.lua"
paced=$(wrk -t2 -c64 -d"${DURATION}s" --latency -s "$WORK/paced.lua" "http://127.0.0.1:$PORT/mcp" | grep RESULT)
PACE_MS=${PACE_MS:-20}
{ cat "$WORK/status.lua"; echo "delay = function() return $PACE_MS end"; } > "$WORK/paced3k.lua"
paced3k=$(wrk -t2 -c64 -d"${DURATION}s" --latency -s "$WORK/paced3k.lua" "http://127.0.0.1:$PORT/mcp" | grep RESULT)
one=$(wrk -t1 -c1 -d"${DURATION}s" --latency -s "$WORK/status.lua" "http://127.0.0.1:$PORT/mcp" | grep RESULT)
# --- MCP 2026-07-28 (issue 17): the same load without a session, and tasks/get ---------------
META='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}},"io.modelcontextprotocol/clientInfo":{"name":"bench","version":"1"}}'
M=(-H "Authorization: Bearer $TOKEN" -H "Content-Type: application/json" -H "Accept: application/json" -H "MCP-Protocol-Version: 2026-07-28")
TASK=$(curl -s "${M[@]}" -H "Mcp-Method: tools/call" -H "Mcp-Name: build_candidate" "http://127.0.0.1:$PORT/mcp" \
  -d "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":\"build_candidate\",\"arguments\":{\"candidate\":\"s1\"},$META}}" |
  sed -n 's/.*"taskId":"\([^"]*\)".*/\1/p')
modern_lua() {  # $1 method, $2 Mcp-Name, $3 params (without _meta)
  cat <<LUA
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":7,"method":"$1","params":{$3,$META}}'
wrk.headers["Authorization"] = "Bearer $TOKEN"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json"
wrk.headers["MCP-Protocol-Version"] = "2026-07-28"
wrk.headers["Mcp-Method"] = "$1"
wrk.headers["Mcp-Name"] = "$2"
LUA
  sed -n '/^done = function/,$p' "$WORK/status.lua"
}
modern_lua tools/call candidate_status '"name":"candidate_status","arguments":{"candidate":"s1"}' > "$WORK/modern.lua"
modern_lua tasks/get "$TASK" "\"taskId\":\"$TASK\"" > "$WORK/taskget.lua"
mmany=$(wrk -t2 -c64 -d"${DURATION}s" --latency -s "$WORK/modern.lua" "http://127.0.0.1:$PORT/mcp" | grep RESULT)
{ cat "$WORK/modern.lua"; echo "delay = function() return $PACE_MS end"; } > "$WORK/mpaced.lua"
mpaced=$(wrk -t2 -c64 -d"${DURATION}s" --latency -s "$WORK/mpaced.lua" "http://127.0.0.1:$PORT/mcp" | grep RESULT)
tget=$(wrk -t1 -c1 -d"${DURATION}s" --latency -s "$WORK/taskget.lua" "http://127.0.0.1:$PORT/mcp" | grep RESULT)
echo "2026-07-28, 64 clients, 2 builds running: $mmany"
echo "2026-07-28, 64 clients paced (~3000/s):    $mpaced"
echo "2026-07-28, tasks/get, 1 client:          $tget"

echo "64 clients, 2 builds running: $many"
echo "64 clients paced (~2000/s):   $paced"
echo "64 clients paced (~3000/s):   $paced3k"
echo "1 client,   2 builds running: $one"
kv() { sed -n "s/.*$2=\([0-9.]*\).*/\1/p" <<<"$1"; }
cat > "$OUT/mcp.json" <<JSON
{ "duration_s": $DURATION,
  "c64": {"rps": $(kv "$many" rps), "p50_ms": $(kv "$many" p50_ms), "p99_ms": $(kv "$many" p99_ms), "errors": $(kv "$many" errors)},
  "c64_paced": {"rps": $(kv "$paced" rps), "p50_ms": $(kv "$paced" p50_ms), "p99_ms": $(kv "$paced" p99_ms), "errors": $(kv "$paced" errors)},
  "c1":  {"rps": $(kv "$one" rps), "p50_ms": $(kv "$one" p50_ms), "p99_ms": $(kv "$one" p99_ms), "errors": $(kv "$one" errors)},
  "c64_paced_3k": {"rps": $(kv "$paced3k" rps), "p50_ms": $(kv "$paced3k" p50_ms), "p99_ms": $(kv "$paced3k" p99_ms), "errors": $(kv "$paced3k" errors)},
  "modern_c64_paced_3k": {"rps": $(kv "$mpaced" rps), "p50_ms": $(kv "$mpaced" p50_ms), "p99_ms": $(kv "$mpaced" p99_ms), "errors": $(kv "$mpaced" errors)},
  "modern_c64": {"rps": $(kv "$mmany" rps), "p50_ms": $(kv "$mmany" p50_ms), "p99_ms": $(kv "$mmany" p99_ms), "errors": $(kv "$mmany" errors)},
  "modern_tasks_get_c1": {"rps": $(kv "$tget" rps), "p50_ms": $(kv "$tget" p50_ms), "p99_ms": $(kv "$tget" p99_ms), "errors": $(kv "$tget" errors)},
  "targets": {"c64_p99_ms_max": 20, "c64_rps_min": 2000, "c1_p50_ms_max": 2,
              "modern_c64_p99_ms_max": 10, "modern_c64_rps_min": 3000, "modern_tasks_get_p50_ms_max": 1} }
JSON
echo "wrote $OUT/mcp.json"
