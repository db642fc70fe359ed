#!/usr/bin/env bash
# Restart to serving with 10,000 build records: writes the state_load_bench fixture (10,000
# finished builds of 4 domains x 20 candidates, 20,000 journal records) into a state directory,
# then starts `kiln serve` on it N times (SIGTERM between runs) and measures, per start, the
# time from exec to the first 200 of /healthz and to the first answer of the MCP tool
# list_candidates (the restored candidates). Baseline in the same run: the same kiln on an
# empty state directory. Target (issue 7): under 1 s with 10,000 records.
#
#   KILN=build/app/kiln BENCH=build/state/state_load_bench N=5 bench/restart_bench.sh
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
KILN="$(realpath "${KILN:-$ROOT/build/app/kiln}")"
BENCH="$(realpath "${BENCH:-$ROOT/build/state/state_load_bench}")"
N="${N:-5}"
PORT="${PORT:-18790}"
T=$(mktemp -d /var/tmp/kiln-restart-bench.XXXXXX)
trap 'kill -TERM $(cat "$T/pid" 2>/dev/null) 2>/dev/null || true; rm -rf "$T"' EXIT

KILN_LOAD_BENCH_STATE_DIR="$T/full" "$BENCH" >/dev/null
mkdir -p "$T/empty"
TOKEN=benchtoken0  # domain0's; domain<i> has benchtoken<i>
HASH=$(for i in 0 1 2 3; do printf %s "benchtoken$i" | "$KILN" hash-token; done | paste -sd,)
config() {  # state-dir
  python3 - "$1" "$PORT" "$HASH" > "$T/kiln.json" <<'PY'
import json, sys
state, port, hashes = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
print(json.dumps({
  "server": {"listen": f"127.0.0.1:{port}", "state_dir": state},
  "registries": {"local": {"url": "http://127.0.0.1:9", "auth_file": None}},
  "domains": {f"domain{i}": {"token_sha256": [hashes[i]], "build": {"mode": "containerfile"},
              "image": {"registry": "local", "repository": f"bench/d{i}"}} for i in range(4)}}))
PY
}
# Milliseconds from exec to /healthz 200, and to list_candidates answering.
one_start() {  # state-dir
  config "$1"
  local t0 t1 t2
  t0=$(date +%s%N)
  "$KILN" serve --config "$T/kiln.json" --grace 1 2>"$T/log" & echo $! > "$T/pid"
  until curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1; do sleep 0.005; done
  t1=$(date +%s%N)
  local init='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}'
  local sid
  sid=$(curl -s -D - -o /dev/null -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
        -H 'Accept: application/json, text/event-stream' --data "$init" "http://127.0.0.1:$PORT/mcp" |
        tr -d '\r' | awk -F': ' 'tolower($1)=="mcp-session-id"{print $2}')
  local out
  out=$(curl -s -H "Authorization: Bearer $TOKEN" -H "Mcp-Session-Id: $sid" -H 'Content-Type: application/json' \
        -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2025-06-18' \
        --data '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_candidates","arguments":{}}}' \
        "http://127.0.0.1:$PORT/mcp")
  t2=$(date +%s%N)
  local n
  n=$(grep -o '"candidate":"' <<<"$out" | wc -l || true)
  kill -TERM "$(cat "$T/pid")"; wait "$(cat "$T/pid")" 2>/dev/null || true
  echo "$(( (t1 - t0) / 1000000 )) $(( (t2 - t0) / 1000000 )) $n"
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "kiln: $KILN; load $(cut -d' ' -f1-3 /proc/loadavg); $N starts each"
for kind in empty full; do
  : > "$T/$kind.times"
  for _ in $(seq 1 "$N"); do one_start "$T/$kind" >> "$T/$kind.times"; done
  h=$(cut -d' ' -f1 "$T/$kind.times" | median); m=$(cut -d' ' -f2 "$T/$kind.times" | median)
  c=$(cut -d' ' -f3 "$T/$kind.times" | tail -1)
  printf '%-6s healthz %5d ms   list_candidates %5d ms   (%s candidates listed)\n' "$kind" "$h" "$m" "$c"
  grep -h "state:" "$T/log" | tail -1 | sed 's/^/       /'
done
