#!/usr/bin/env bash
# Builds kiln's hardened image (image/Containerfile, docs/image.md), pushes it to a local
# registry, smoke-tests it and records its dependency closure.
#
#   scripts/build_image.sh [--from-head] [--no-smoke] [--refresh-base]
#
# 1. starts a local docker-registry on 127.0.0.1:5140 (scripts/registry.sh, dir
#    $KILN_IMAGE_REGISTRY_DIR, default /var/tmp/kiln-image-registry; KILN_IMAGE_REGISTRY_PORT)
# 2. makes the Debian 12 base image (image/base_image.sh; reused when unchanged), then checks
#    that BASE@DIGEST resolves in the registry to the image it expects (its io.kiln.inputs label
#    and linux/amd64) before passing it to the build as KILN_BASE
# 3. `buildah build --isolation chroot --layers` on a staged context: the files git tracks plus
#    untracked, not ignored ones (the working tree), or `git archive HEAD` with --from-head
# 4. pushes 127.0.0.1:5140/kiln/kiln:<commit> and prints `image=REF@DIGEST` on stdout
# 5. smoke test: `buildah from` + `buildah run --isolation chroot` (host network, 127.0.0.1):
#    kiln serve with a small config; /healthz 200, /readyz's documented shape, MCP initialize +
#    tools/list over HTTP with a bearer token, the process's uid/gid is 10001:10001 with no
#    effective capability, no compiler in the image, image size under the gate below
# 6. closure: the image's /usr/share/kiln/closure.txt is kept as
#    build/image/records/<digest>.closure; a build of a commit built before reports every
#    difference against the previous record of that commit
#
# State (layer storage, cache mounts) lives under $KILN_IMAGE_WORK (default
# /var/tmp/kiln-image) so rebuilds are incremental; an empty directory gives a cold build.
# Runs as root. Timings on stderr.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Size gate (uncompressed image, all layers). Measured 2025-11: see docs/image.md.
SIZE_GATE_MB=${KILN_IMAGE_SIZE_GATE_MB:-400}
SMOKE_PORT=${KILN_IMAGE_SMOKE_PORT:-18741}
KILN_UID=10001; KILN_GID=10001

FROM_HEAD=0; SMOKE=1; REFRESH=()
while [ $# -gt 0 ]; do
  case $1 in
    --from-head) FROM_HEAD=1; shift ;;
    --no-smoke) SMOKE=0; shift ;;
    --refresh-base) REFRESH=(--refresh); shift ;;
    -h|--help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
    *) die "unknown argument: $1" ;;
  esac
done
[ "$(id -u)" = 0 ] || die "run as root (buildah --isolation chroot)"
require_cmd buildah skopeo mmdebstrap git curl python3 sha256sum tar
ROOT=$KILN_REPO_ROOT
WORK=${KILN_IMAGE_WORK:-/var/tmp/kiln-image}
OUT=$ROOT/build/image
mkdir -p "$WORK/storage" "$WORK/run" "$WORK/tmp" "$OUT/records"
BUILDAH=(buildah --root "$WORK/storage" --runroot "$WORK/run" --storage-driver overlay)
TLS=(--tls-verify=false)
# buildah keeps RUN --mount=type=cache directories under $TMPDIR: keep them with the storage.
export TMPDIR=$WORK/tmp

T_START=$(now_ms)
phase() { log "$1: $(( $(now_ms) - $2 )) ms"; }

# --- 1. registry --------------------------------------------------------------------------
REG_DIR="${KILN_IMAGE_REGISTRY_DIR:-/var/tmp/kiln-image-registry}"
# The registry stops when this script ends (its data stays in REG_DIR for the next run);
# KILN_IMAGE_KEEP_REGISTRY=1 leaves it running, e.g. to pull the image afterwards.
stop_registry() {
  [ "${KILN_IMAGE_KEEP_REGISTRY:-0}" = 1 ] || "$ROOT/scripts/registry.sh" stop --dir "$REG_DIR" >/dev/null 2>&1 || true
}
trap stop_registry EXIT
reg=$("$ROOT/scripts/registry.sh" start --dir "$REG_DIR" --port "${KILN_IMAGE_REGISTRY_PORT:-5140}")
REGISTRY=$(sed -n 's/^host=//p' <<<"$reg")
AUTH=$(sed -n 's/^auth_file=//p' <<<"$reg")

# --- 2. base image ------------------------------------------------------------------------
t=$(now_ms)
base_out=$("$ROOT/image/base_image.sh" --registry "$REGISTRY" --authfile "$AUTH" \
  --root "$WORK/storage" --runroot "$WORK/run" "${REFRESH[@]}")
BASE=$(sed -n 's/^base=//p' <<<"$base_out")
INPUTS=$(sed -n 's/^inputs=//p' <<<"$base_out")
[[ "$BASE" =~ ^[^@]+@sha256:[0-9a-f]{64}$ ]] || die "base image reference is not pinned by digest: '$BASE'"
# The digest must resolve to the image we expect, not to whatever the tag says now.
insp=$(skopeo inspect --authfile "$AUTH" "${TLS[@]}" "docker://$BASE") ||
  die "base image $BASE does not resolve in $REGISTRY"
python3 - "$insp" "$BASE" "$INPUTS" <<'PY' || die "base image $BASE is not the expected image"
import json, sys
d = json.loads(sys.argv[1]); want_digest = sys.argv[2].split("@", 1)[1]
problems = []
if d.get("Digest") != want_digest: problems.append(f"digest {d.get('Digest')} != {want_digest}")
if (d.get("Labels") or {}).get("io.kiln.inputs") != sys.argv[3]: problems.append("io.kiln.inputs label differs")
if (d.get("Os"), d.get("Architecture")) != ("linux", "amd64"): problems.append("not linux/amd64")
for p in problems: print("base image:", p, file=sys.stderr)
sys.exit(1 if problems else 0)
PY
phase "base image $BASE" "$t"

# --- 3. context and build -----------------------------------------------------------------
t=$(now_ms)
COMMIT=$(git -C "$ROOT" rev-parse HEAD)
CTX=$OUT/context
rm -rf "$CTX"; mkdir -p "$CTX"
if [ "$FROM_HEAD" = 1 ]; then
  git -C "$ROOT" archive --format=tar HEAD | tar -C "$CTX" -xf -
  SOURCE_ID=$COMMIT
else
  # The working tree as git sees it (tracked + untracked, not ignored; deleted files skipped).
  (cd "$ROOT" && git ls-files -z -co --exclude-standard |
     while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
     tar --null -T - -cf -) | tar -C "$CTX" -xf -
  SOURCE_ID=$COMMIT
  [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=normal)" ] && SOURCE_ID=$COMMIT-dirty
fi
# The image files always come from the working tree (they are what this script is).
rm -rf "$CTX/image"; cp -a "$ROOT/image" "$CTX/image"
# Files the compile does not read stay out of `COPY . /src`, so editing them does not rerun it.
# CMakeLists.txt files stay: the configure step reads every one of them.
printf '%s\n' .git docs bench '*.md' k8s/manifests 'tests/manifests/*' '!tests/manifests/CMakeLists.txt' \
  tests/e2e/node_modules image/Containerfile image/base_image.sh >"$CTX/.containerignore"
# Build dependencies: the `# toolchain` and `# libraries` groups of the context's
# scripts/setup.sh, so the image compiles with exactly what a developer machine has.
BUILD_DEPS=$(awk '/^[[:space:]]*#[[:space:]]*(toolchain|libraries)/ {on=1; next}
                  /^[[:space:]]*#/ || /^\)/ {on=0} on {print}' "$CTX/scripts/setup.sh" | xargs)
[ -n "$BUILD_DEPS" ] || die "no toolchain/libraries packages found in scripts/setup.sh"
# Host caches, mounted into every RUN step with --volume (never part of a layer):
# - the host's ccache (`ccache -k cache_dir`; KILN_IMAGE_CCACHE_DIR overrides) at /mnt: the
#   build stage compiles exactly like scripts/build.sh, so after a host build (CI: scripts/test.sh)
#   the compile is cache hits. ccache hashes the locale variables: pass the host's.
# - $WORK/apt-archives at /var/cache/apt/archives, seeded with hard links to the host's .debs
#   (what scripts/setup.sh downloaded): apt only downloads what the host does not have.
# - $WORK/apt-lists at /var/lib/apt/lists (not a locked cache mount: image/Containerfile).
CCACHE_HOST=${KILN_IMAGE_CCACHE_DIR:-}
if [ -z "$CCACHE_HOST" ] && command -v ccache >/dev/null 2>&1; then
  CCACHE_HOST=$(ccache -k cache_dir 2>/dev/null || true)
fi
CCACHE_HOST=${CCACHE_HOST:-$WORK/ccache}
mkdir -p "$CCACHE_HOST"
LOCALE_ENV=""
for v in LANG LC_ALL LC_CTYPE LC_MESSAGES; do
  [ -n "${!v+x}" ] && LOCALE_ENV+="${LOCALE_ENV:+ }$v=${!v}"
done
DEBS=$WORK/apt-archives
mkdir -p "$DEBS/partial" "$WORK/apt-lists/partial"
HOST_DEBS=/var/cache/apt/archives
if compgen -G "$HOST_DEBS/*.deb" >/dev/null; then
  cp -l -n "$HOST_DEBS"/*.deb "$DEBS"/ 2>/dev/null ||
    log "could not hard-link $HOST_DEBS into $DEBS (another filesystem?): apt downloads them"
fi
log "ccache $CCACHE_HOST, apt archives $DEBS ($(compgen -G "$DEBS/*.deb" | wc -l) .debs)"
TAG=$REGISTRY/kiln/kiln:${COMMIT:0:12}
"${BUILDAH[@]}" build --isolation chroot --layers --pull=missing "${TLS[@]}" --authfile "$AUTH" \
  --volume "$DEBS:/var/cache/apt/archives:rw" --volume "$WORK/apt-lists:/var/lib/apt/lists:rw" \
  --volume "$CCACHE_HOST:/mnt:rw" \
  --build-arg "KILN_BASE=$BASE" --build-arg "KILN_BUILD_DEPS=$BUILD_DEPS" \
  --build-arg "KILN_CCACHE_LOCALE=$LOCALE_ENV" \
  --label "org.opencontainers.image.revision=$COMMIT" \
  --label "io.kiln.base=$BASE" \
  -f "$ROOT/image/Containerfile" -t "$TAG" "$CTX" >&2
T_BUILD=$(( $(now_ms) - t ))
phase "image build" "$t"

# --- 4. push ------------------------------------------------------------------------------
t=$(now_ms)
df=$(mktemp)
"${BUILDAH[@]}" push --quiet "${TLS[@]}" --authfile "$AUTH" --digestfile "$df" "$TAG" "docker://$TAG" >&2
DIGEST=$(cat "$df"); rm -f "$df"
[[ "$DIGEST" =~ ^sha256:[0-9a-f]{64}$ ]] || die "push gave no digest"
IMAGE=$REGISTRY/kiln/kiln@$DIGEST
phase "push" "$t"

# --- 5. smoke test ------------------------------------------------------------------------
FAIL=0
fail() { printf 'image smoke: FAIL %s\n' "$*" >&2; FAIL=1; }
ok() { printf 'image smoke: ok   %s\n' "$*" >&2; }

CTR=""; RUNPID=""; SMOKEDIR=""
cleanup() {
  if [ -n "$RUNPID" ] && kill -0 "$RUNPID" 2>/dev/null; then
    kill -TERM "$RUNPID" 2>/dev/null || true
  fi
  [ -n "$CTR" ] && "${BUILDAH[@]}" rm "$CTR" >/dev/null 2>&1 || true
  [ -n "$SMOKEDIR" ] && rm -rf "$SMOKEDIR"
  stop_registry
}
trap cleanup EXIT

# Descendants of PID (breadth first), one per line.
descendants() {
  local queue=("$1") p c
  while ((${#queue[@]})); do
    p=${queue[0]}; queue=("${queue[@]:1}")
    for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do echo "$c"; queue+=("$c"); done
  done
}

t_smoke=$(now_ms)
CTR=$("${BUILDAH[@]}" from --quiet --pull=never "$TAG")
MNT=$("${BUILDAH[@]}" mount "$CTR")

# Size: every layer uncompressed, as mounted.
SIZE_MB=$(du -sm -x "$MNT" | cut -f1)
if [ "$SIZE_MB" -le "$SIZE_GATE_MB" ]; then ok "image size ${SIZE_MB} MB <= gate ${SIZE_GATE_MB} MB"
else fail "image size ${SIZE_MB} MB > gate ${SIZE_GATE_MB} MB"; fi
for c in gcc g++ cc c++ clang go ld as make cmake ninja; do
  for d in usr/bin bin usr/local/bin; do
    [ -e "$MNT/$d/$c" ] && fail "runtime image has a compiler/build tool: /$d/$c"
  done
done
CLOSURE_SRC=$MNT/usr/share/kiln/closure.txt
[ -s "$CLOSURE_SRC" ] || fail "no /usr/share/kiln/closure.txt in the image"
CLOSURE_COPY=$(mktemp); cp "$CLOSURE_SRC" "$CLOSURE_COPY" 2>/dev/null || true
for lib in CAF_VERSION BOOST_LIB_VERSION OPENSSL_VERSION_TEXT NLOHMANN_JSON_VERSION_MAJOR SPDLOG_VER_MAJOR ZLIB_VERSION; do
  grep -q "^$lib=" "$CLOSURE_COPY" || fail "closure lacks $lib"
done
IMG_USER=$("${BUILDAH[@]}" inspect --type container --format '{{.OCIv1.Config.User}}' "$CTR")
[ "$IMG_USER" = "$KILN_UID:$KILN_GID" ] && ok "image USER $IMG_USER" || fail "image USER is '$IMG_USER'"
"${BUILDAH[@]}" umount "$CTR" >/dev/null

if [ "$SMOKE" = 1 ]; then
  [ "$(http_code "http://127.0.0.1:$SMOKE_PORT/healthz")" = 000 ] ||
    die "127.0.0.1:$SMOKE_PORT is in use (set KILN_IMAGE_SMOKE_PORT)"
  SMOKEDIR=$(mktemp -d /var/tmp/kiln-image-smoke.XXXXXX)
  chmod 0750 "$SMOKEDIR"; chgrp "$KILN_GID" "$SMOKEDIR"
  TOKEN=$(openssl rand -hex 24)
  HASH=$(printf '%s' "$TOKEN" | sha256sum | cut -d' ' -f1)
  # check-config wants kiln's credential files 0600 and owned by kiln's uid.
  install -m 0600 -o "$KILN_UID" -g "$KILN_GID" "$AUTH" "$SMOKEDIR/registry-auth.json"
  cat >"$SMOKEDIR/kiln.json" <<JSON
{
  "log_level": "info",
  "server": { "listen": "127.0.0.1:$SMOKE_PORT", "state_dir": "/var/lib/kiln/state" },
  "scheduler": { "max_parallel_builds": 1 },
  "registries": { "local": { "url": "http://$REGISTRY", "auth_file": "registry-auth.json", "ca_file": null } },
  "domains": {
    "smoke": {
      "token_sha256": ["$HASH"],
      "build": { "mode": "containerfile", "timeout_s": 60 },
      "image": { "registry": "local", "repository": "smoke/app" },
      "deploy": { "type": "none" }
    }
  }
}
JSON
  chmod 0440 "$SMOKEDIR/kiln.json"; chgrp "$KILN_GID" "$SMOKEDIR/kiln.json"
  RUNLOG=$OUT/smoke.log
  "${BUILDAH[@]}" run --isolation chroot --volume "$SMOKEDIR:/etc/kiln:ro" "$CTR" -- \
    /usr/bin/kiln check-config --config /etc/kiln/kiln.json >&2 && ok "kiln check-config in the image" ||
    fail "kiln check-config in the image"
  "${BUILDAH[@]}" run --isolation chroot --volume "$SMOKEDIR:/etc/kiln:ro" "$CTR" -- \
    /usr/bin/kiln serve --config /etc/kiln/kiln.json >"$RUNLOG" 2>&1 &
  RUNPID=$!
  code=000
  for _ in $(seq 1 100); do
    code=$(http_code "http://127.0.0.1:$SMOKE_PORT/healthz"); [ "$code" = 200 ] && break
    kill -0 "$RUNPID" 2>/dev/null || break
    sleep 0.1
  done
  [ "$code" = 200 ] && ok "/healthz 200" || { fail "/healthz answered $code"; tail -n 20 "$RUNLOG" >&2; }

  KPID=""
  for p in $(descendants "$RUNPID"); do
    [ "$(readlink "/proc/$p/exe" 2>/dev/null)" = "$MNT/usr/bin/kiln" ] ||
      [ "$(cat "/proc/$p/comm" 2>/dev/null)" = kiln ] && { KPID=$p; break; }
  done
  if [ -n "$KPID" ]; then
    ids=$(awk '/^Uid:/{u=$2"/"$3"/"$4"/"$5} /^Gid:/{g=$2"/"$3"/"$4"/"$5} /^CapEff:/{c=$2} END{print u, g, c}' "/proc/$KPID/status")
    read -r uids gids capeff <<<"$ids"
    [ "$uids" = "$KILN_UID/$KILN_UID/$KILN_UID/$KILN_UID" ] && [ "$gids" = "$KILN_GID/$KILN_GID/$KILN_GID/$KILN_GID" ] &&
      ok "kiln runs as uid/gid $KILN_UID:$KILN_GID" || fail "kiln runs as uid $uids gid $gids"
    [ "$capeff" = 0000000000000000 ] && ok "no effective capabilities" || fail "effective capabilities $capeff"
  else
    fail "kiln process not found under buildah run (pid $RUNPID)"
  fi

  # /readyz: 200 with ready=true or 503 with ready=false; checks.<name>.{ok,detail} for the
  # builder and each registry (docs/operations.md). The background check runs at start-up.
  sleep 1
  rbody=$(mktemp)
  rcode=$(curl -s -o "$rbody" -w '%{http_code}' --max-time 5 "http://127.0.0.1:$SMOKE_PORT/readyz" || true)
  if python3 - "$rcode" "$rbody" <<'PY' >&2; then ok "/readyz $rcode $(cat "$rbody")"; else fail "/readyz $rcode $(cat "$rbody")"; fi
import json, sys
code, body = int(sys.argv[1]), json.load(open(sys.argv[2]))
checks = body["checks"]
assert isinstance(body["ready"], bool) and code == (200 if body["ready"] else 503)
assert "builder" in checks and "registry:local" in checks
for v in checks.values(): assert isinstance(v["ok"], bool) and isinstance(v["detail"], str)
assert checks["registry:local"]["ok"] is True, "registry unreachable from the image"
PY
  rm -f "$rbody"

  # MCP over real HTTP: initialize, notifications/initialized, tools/list.
  mcp() {  # BODY [SESSION] -> response body on stdout, headers in $hdr
    local extra=()
    [ -n "${2:-}" ] && extra=(-H "Mcp-Session-Id: $2" -H "MCP-Protocol-Version: 2025-06-18")
    curl -s --max-time 10 -D "$hdr" -H "Authorization: Bearer $TOKEN" \
      -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
      "${extra[@]}" --data "$1" "http://127.0.0.1:$SMOKE_PORT/mcp"
  }
  jsonrpc() {  # extracts the JSON-RPC message from a JSON or SSE body
    python3 -c 'import json,sys
t=sys.stdin.read().strip()
if not t.startswith("{"):
    t=[l[5:].strip() for l in t.splitlines() if l.startswith("data:")][-1]
print(json.dumps(json.loads(t)))'
  }
  hdr=$(mktemp)
  init=$(mcp '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"image-smoke","version":"1"}}}' | jsonrpc || true)
  session=$(awk 'tolower($1)=="mcp-session-id:"{print $2}' "$hdr" | tr -d '\r')
  if python3 -c 'import json,sys; r=json.loads(sys.argv[1])["result"]; assert r["protocolVersion"] and r["serverInfo"]["name"]' "$init" 2>/dev/null; then
    ok "MCP initialize (session ${session:+set})"
  else fail "MCP initialize: $init"; fi
  mcp '{"jsonrpc":"2.0","method":"notifications/initialized"}' "$session" >/dev/null || true
  tools=$(mcp '{"jsonrpc":"2.0","id":2,"method":"tools/list"}' "$session" | jsonrpc || true)
  if names=$(python3 -c 'import json,sys; t=json.loads(sys.argv[1])["result"]["tools"]
n=sorted(x["name"] for x in t); assert "build_candidate" in n and "candidate_status" in n; print(",".join(n))' "$tools" 2>/dev/null); then
    ok "MCP tools/list: $names"
  else fail "MCP tools/list: $tools"; fi
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -H 'Content-Type: application/json' \
    -H 'Accept: application/json, text/event-stream' --data '{"jsonrpc":"2.0","id":3,"method":"tools/list"}' \
    "http://127.0.0.1:$SMOKE_PORT/mcp" || true)
  [ "$code" = 401 ] && ok "MCP without a token: 401" || fail "MCP without a token answered $code"
  rm -f "$hdr"

  # Graceful stop: SIGTERM to kiln, which exits 0; buildah run returns its status.
  [ -n "$KPID" ] && kill -TERM "$KPID" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$RUNPID" 2>/dev/null || break; sleep 0.2; done
  if kill -0 "$RUNPID" 2>/dev/null; then fail "kiln did not stop on SIGTERM"; kill -TERM "$RUNPID" || true
  else
    st=0; wait "$RUNPID" || st=$?
    [ "$st" = 0 ] && ok "kiln stopped on SIGTERM, exit 0" || fail "kiln exited $st on SIGTERM (log: $RUNLOG)"
  fi
  RUNPID=""
fi
T_SMOKE=$(( $(now_ms) - t_smoke ))
phase "smoke test" "$t_smoke"

# --- 6. closure record --------------------------------------------------------------------
# The build stage installs the mirror's current packages; where a -dev package differs from the
# host's, the host's ccache cannot serve the files that include its headers (say so, it explains
# a slow compile).
skew=$(sed -n '/^\[compiled against\]/,/^\[runtime/p' "$CLOSURE_COPY" | grep -E '^[a-z0-9][a-z0-9.+-]*=' |
  while IFS== read -r p v; do
    h=$(dpkg-query -W -f '${Version}' "$p" 2>/dev/null || true)
    [ "$h" = "$v" ] || printf ' %s=%s(host %s)' "$p" "$v" "${h:-none}"
  done || true)
[ -z "$skew" ] || log "build stage vs host packages:$skew"
REC=$OUT/records
install -m 0644 "$CLOSURE_COPY" "$REC/$DIGEST.closure"; rm -f "$CLOSURE_COPY"
printf 'image=%s\ncommit=%s\nsource=%s\nbase=%s\nsize_mb=%s\nbuild_ms=%s\n' \
  "$IMAGE" "$COMMIT" "$SOURCE_ID" "$BASE" "$SIZE_MB" "$T_BUILD" >"$REC/$DIGEST.build"
LAST=$REC/source-$SOURCE_ID.last
if [ -s "$LAST" ]; then
  prev=$(cat "$LAST")
  if [ "$prev" = "$DIGEST" ]; then
    log "closure: same digest as the previous build of $SOURCE_ID"
  elif [ -s "$REC/$prev.closure" ] && diff -u "$REC/$prev.closure" "$REC/$DIGEST.closure" >"$REC/$DIGEST.diff"; then
    log "closure: identical to the previous build of $SOURCE_ID ($prev), image digest differs"
  elif [ -s "$REC/$prev.closure" ]; then
    log "closure: DIFFERS from the previous build of $SOURCE_ID ($prev):"
    grep '^[-+][^-+]' "$REC/$DIGEST.diff" >&2 || true
  fi
fi
echo "$DIGEST" >"$LAST"
log "closure record $REC/$DIGEST.closure ($(wc -c <"$REC/$DIGEST.closure") bytes, $(grep -c '=' "$REC/$DIGEST.closure") entries)"

log "total $(( $(now_ms) - T_START )) ms (build ${T_BUILD} ms, smoke ${T_SMOKE} ms), size ${SIZE_MB} MB"
echo "image=$IMAGE"
[ "$FAIL" = 0 ] || die "image smoke test failed"
