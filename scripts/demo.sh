#!/usr/bin/env bash
# kiln's main job on embedded defaults, end to end, on a fresh machine:
#   installs packages, builds kiln, starts a local docker-registry (htpasswd auth) on
#   127.0.0.1:5000, makes the local base images, writes a config with two example domains,
#   starts `kiln serve`, puts the example sources on candidate branches, and runs a scripted
#   agent (official MCP TypeScript SDK client) through a build with progress, a concurrent
#   status call and a compile error, deploys the best candidate to the local deploy target
#   (127.0.0.1:$KILN_DEPLOY_PORT, default 9000) and ends with `kiln apply`, the loop engine's
#   backstop. Stops kiln, the deployed candidate and the registry at the end.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEMO="${KILN_DEMO_DIR:-$ROOT/.kiln-demo}"
PORT="${KILN_PORT:-8700}"
REG_PORT="${KILN_REGISTRY_PORT:-5000}"
DEPLOY_PORT="${KILN_DEPLOY_PORT:-9000}"
BUILD_DIR="${KILN_BUILD_DIR:-$ROOT/build}"
KILN="$BUILD_DIR/app/kiln"
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "setup (packages) and build"
"$ROOT/scripts/setup.sh"
KILN_BUILD_DIR="$BUILD_DIR" "$ROOT/scripts/build.sh" kiln
(cd "$ROOT/tests/e2e" && [ -d node_modules/@modelcontextprotocol/sdk ] || npm install --no-audit --no-fund --silent)

mkdir -p "$DEMO"
say "local registry on 127.0.0.1:$REG_PORT"
"$ROOT/scripts/registry.sh" start --dir "$DEMO/registry" --port "$REG_PORT"
say "base images (first run takes a minute or two)"
"$ROOT/scripts/base_images.sh" --registry "127.0.0.1:$REG_PORT" --authfile "$DEMO/registry/auth.json"

say "config"
if [ ! -f "$DEMO/epp.token" ]; then
  umask 077
  head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$DEMO/epp.token"
  head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$DEMO/ranker.token"
fi
if [ ! -f "$DEMO/operator.token" ]; then
  umask 077
  head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$DEMO/operator.token"
  umask 022
  umask 022
fi
EPP_HASH=$("$KILN" hash-token < "$DEMO/epp.token")
RANKER_HASH=$("$KILN" hash-token < "$DEMO/ranker.token")
OPERATOR_HASH=$("$KILN" hash-token < "$DEMO/operator.token")
cat > "$DEMO/kiln.json" <<JSON
{
  "server": { "listen": "127.0.0.1:$PORT", "state_dir": "state", "allowed_origins": [] },
  "operator_token_sha256": ["$OPERATOR_HASH"],
  "scheduler": { "max_parallel_builds": 2 },
  "registries": {
    "local": { "url": "http://127.0.0.1:$REG_PORT", "auth_file": "registry/auth.json", "ca_file": null }
  },
  "domains": {
    "epp": {
      "token_sha256": ["$EPP_HASH"],
      "weight": 1,
      "tool_aliases": { "build_epp": "build_candidate" },
      "build": { "mode": "containerfile", "timeout_s": 900,
                 "containerfile": { "file": "Containerfile", "context": "." } },
      "image": { "registry": "local", "repository": "loop/epp" },
      "deploy": { "type": "local", "local": { "port": $DEPLOY_PORT, "health_path": "/healthz" } }
    },
    "ranker": {
      "token_sha256": ["$RANKER_HASH"],
      "build": { "mode": "containerfile", "timeout_s": 900 },
      "image": { "registry": "local", "repository": "loop/ranker" },
      "deploy": { "type": "none" }
    }
  }
}
JSON
"$KILN" check-config --config "$DEMO/kiln.json"

say "kiln serve on 127.0.0.1:$PORT"
"$KILN" serve --config "$DEMO/kiln.json" > "$DEMO/kiln.log" 2>&1 &
KILN_PID=$!
cleanup() {
  kill -TERM "$KILN_PID" 2>/dev/null && wait "$KILN_PID" 2>/dev/null || true
  "$ROOT/scripts/registry.sh" stop --dir "$DEMO/registry" >/dev/null 2>&1 || true
  echo "kiln log: $DEMO/kiln.log"
}
trap cleanup EXIT
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break
  sleep 0.1
done
curl -sf "http://127.0.0.1:$PORT/healthz"; echo

say "the agent pushes its candidate branches to kiln over git: epp/c1, epp/c2 (a compile error), ranker/r1"
WORK="$DEMO/agent-work"
rm -rf "$WORK" && mkdir -p "$WORK"
push_branch() {  # domain source-dir branch [sed-expression file]
  local domain="$1" src="$2" branch="$3"
  local w="$WORK/$domain-$branch"
  cp -r "$src" "$w"
  (cd "$w" && git init -q && git checkout -q -b "$branch" &&
   if [ $# -ge 5 ]; then sed -i "$4" "$5"; fi &&
   git add -A && git -c user.name=agent -c user.email=agent@sandbox commit -qm "candidate $branch" &&
   # kiln is the agent's git remote; the token goes in a header (kept out of argv).
   GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=http.extraHeader \
   GIT_CONFIG_VALUE_0="Authorization: Bearer $(cat "$DEMO/$domain.token")" \
   git push -q -f "http://127.0.0.1:$PORT/git/$domain.git" "HEAD:refs/heads/$branch")
  echo "pushed $domain/$branch over http://127.0.0.1:$PORT/git/$domain.git"
}
push_branch epp "$ROOT/examples/epp" c1
push_branch ranker "$ROOT/examples/ranker" r1
# The agent's own iteration: clone from kiln, edit, commit, push a new candidate branch.
(
  export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=http.extraHeader
  GIT_CONFIG_VALUE_0="Authorization: Bearer $(cat "$DEMO/epp.token")"
  export GIT_CONFIG_VALUE_0
  git clone -q -b c1 "http://127.0.0.1:$PORT/git/epp.git" "$WORK/agent-clone"
  cd "$WORK/agent-clone"
  git checkout -q -b c2
  sed -i 's/s += w.Adapter$/s += w.AdapterPenalty/' internal/scorer/scorer.go   # a compile error
  git -c user.name=agent -c user.email=agent@sandbox commit -qam "try an adapter penalty"
  git push -q -f origin HEAD:refs/heads/c2
  echo "agent cloned epp.git, committed a change and pushed candidate c2"
)

say "the ranker domain, through the same scheduler"
(cd "$ROOT/tests/e2e" && KILN_URL="http://127.0.0.1:$PORT/mcp" KILN_TOKEN="$(cat "$DEMO/ranker.token")" \
  node -e '
import("@modelcontextprotocol/sdk/client/index.js").then(async ({ Client }) => {
  const { StreamableHTTPClientTransport } = await import("@modelcontextprotocol/sdk/client/streamableHttp.js");
  const t = new StreamableHTTPClientTransport(new URL(process.env.KILN_URL),
    { requestInit: { headers: { Authorization: `Bearer ${process.env.KILN_TOKEN}` } } });
  const c = new Client({ name: "ranker-agent", version: "1.0.0" });
  await c.connect(t);
  const r = await c.callTool({ name: "build_candidate", arguments: { candidate: "r1" } }, undefined, { timeout: 900000 });
  const s = r.structuredContent;
  console.log(`[ranker] build ${s.build_id}: ${s.status}`, s.image ? s.image.ref : "", JSON.stringify(s.timings));
  await c.close();
  process.exit(s.status === "succeeded" ? 0 : 1);
});')

say "scripted agent (MCP over Streamable HTTP, official TypeScript SDK client)"
(cd "$ROOT/tests/e2e" && KILN_URL="http://127.0.0.1:$PORT/mcp" KILN_TOKEN="$(cat "$DEMO/epp.token")" \
  GOOD=c1 BAD=c2 DEPLOY_URL="http://127.0.0.1:$DEPLOY_PORT/healthz" node scripted_agent.mjs)

say "kiln apply: the loop engine's backstop before the judge measures (operator token)"
KILN_TOKEN="$(cat "$DEMO/operator.token")" "$KILN" apply --server "http://127.0.0.1:$PORT" --domain epp --timeout 300
echo "kiln apply exit code: $?"

say "metrics (excerpt)"
curl -s -H "Authorization: Bearer $(cat "$DEMO/operator.token")" "http://127.0.0.1:$PORT/metrics" | grep -E '^kiln_builds_total|^kiln_build_cache_hits_total' || true
say "demo finished"
