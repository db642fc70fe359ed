#!/usr/bin/env bash
# Hostile candidate builds, in BOTH modes, through `kiln build` (docs/security.md): the build
# steps (hostile_probe.sh, and in containerfile mode also the chroot escape hostile_escape.go)
# try to read the registry auth file, walk /proc for kiln's secrets, signal kiln and another
# build, connect to kiln's HTTP port, the registry and a Kubernetes API stand-in on 127.0.0.1,
# read another candidate's workspace/storage and the state directory, leave background
# processes and fill the disk (bounded). Each attempt must be BLOCKED; a control build with
# build.network "host" must connect (so the probe itself works); afterwards no secret may be in
# the result, the logs or the image, and no process of the builds may survive.
# Usage: hostile_build_test.sh path/to/kiln   (root; scripts/setup.sh packages + build user)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
HERE="$ROOT/tests/integration"
KILN="$(realpath "${1:?usage: hostile_build_test.sh KILN}")"
PORT=${KILN_HOSTILE_REGISTRY_PORT:-5120}
KPORT=18720   # kiln serve (stands for kiln's HTTP port)
APIPORT=18722 # Kubernetes API stand-in
T=$(mktemp -d /var/tmp/kiln-hostile-test.XXXXXX)
chmod 755 "$T"
pass=0; fail=0
ok() { echo "ok - $*"; pass=$((pass + 1)); }
bad() { echo "not ok - $*"; fail=$((fail + 1)); }
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 1
  "$ROOT/scripts/registry.sh" stop --dir "$T/registry" >/dev/null 2>&1 || true
  [ -n "${KEEP:-}" ] || rm -rf "$T"
}
trap cleanup EXIT

# Processes of the build user that exist before this test (another test's deployed candidate,
# say) are not this test's to judge; every other one must be gone at the end.
BEFORE=" $( (pgrep -u kiln-build || true) | tr '\n' ' ') "
SECRET="kiln-hostile-secret-$RANDOM$RANDOM$RANDOM"
export KILN_HOSTILE_SECRET="$SECRET"  # in kiln's environment: must never reach a build step
"$ROOT/scripts/registry.sh" start --dir "$T/registry" --port "$PORT" >/dev/null
AUTH="$T/registry/auth.json"
"$ROOT/scripts/base_images.sh" --registry "127.0.0.1:$PORT" --authfile "$AUTH" >/dev/null
PASSWORD=$(cat "$T/registry/password")
AUTHSTR=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(list(d['auths'].values())[0]['auth'])" "$AUTH")
DIGEST=$(skopeo inspect --authfile "$AUTH" --tls-verify=false "docker://127.0.0.1:$PORT/kiln/busybox:1" --format '{{.Digest}}')
TOKEN=$(printf x | "$KILN" hash-token)

STATE="$T/state"
# Another candidate's workspace and build storage, with the secret inside.
VICTIM="$STATE/domains/hostile/candidates/victim/src/secret.txt"
VSTORE="$STATE/domains/hostile/candidates/victim/storage/rootless"
VCACHE="$STATE/domains/layered/cache/rootless"
mkdir -p "$(dirname "$VICTIM")" "$VSTORE" "$VCACHE"
echo "$SECRET" > "$VICTIM"; echo "$SECRET" > "$VSTORE/secret.txt"; echo "$SECRET" > "$VCACHE/secret.txt"
chown -R kiln-build: "$VSTORE" "$VCACHE"  # owned by the build user, like a real store

write_config() {  # FILE STATE LISTEN NETWORK PIDS
  local f=$1 st=$2 listen=$3 net=$4 pids=$5
  local args="\"H_AUTH\": \"$AUTH\", \"H_STATE\": \"$STATE\", \"H_VICTIM\": \"$VICTIM\",
      \"H_VICTIM_STORE\": \"$VSTORE\", \"H_VICTIM_CACHE\": \"$VCACHE\",
      \"H_PORTS\": \"$KPORT $PORT $APIPORT\", \"H_PIDS\": \"$pids\""
  cat > "$f" <<JSON
{ "server": {"listen": "$listen", "state_dir": "$st"},
  "registries": {"local": {"url": "http://127.0.0.1:$PORT", "auth_file": "$AUTH"}},
  "domains": {
    "hostile": {"token_sha256": ["$TOKEN"],
      "build": {"mode": "containerfile", "network": "$net", "max_file_mb": 512, "timeout_s": 300,
                "containerfile": {"build_args": { $args, "H_FILL_DIR": "/", "H_FILL_MB": "600" }}},
      "image": {"registry": "local", "repository": "test/hostile"}},
    "layered": {"token_sha256": ["$(printf y | "$KILN" hash-token)"],
      "build": {"mode": "layered", "timeout_s": 300, "layered": {
        "base_image": "127.0.0.1:$PORT/kiln/busybox@$DIGEST",
        "command": ["sh", "hostile_probe.sh"],
        "env": { $args, "H_FILL_DIR": "/tmp", "H_FILL_MB": "1200", "H_OUT": "out/results.txt" },
        "outputs": [{"from": "out/results.txt", "to": "/results.txt"}]}},
      "image": {"registry": "local", "repository": "test/hostile-layered"}},
    "other": {"token_sha256": ["$(printf z | "$KILN" hash-token)"],
      "build": {"mode": "containerfile"},
      "image": {"registry": "local", "repository": "test/other"}}}}
JSON
}

# kiln's HTTP port (a real `kiln serve`) and a Kubernetes API stand-in, on 127.0.0.1.
write_config "$T/serve.json" "$T/serve-state" "127.0.0.1:$KPORT" none ""
"$KILN" serve --config "$T/serve.json" > "$T/serve.log" 2>&1 & KILN_SERVE=$!; PIDS+=("$KILN_SERVE")
mkdir -p "$T/api"; (cd "$T/api" && exec python3 -m http.server --bind 127.0.0.1 "$APIPORT") > /dev/null 2>&1 & PIDS+=("$!")
for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$KPORT/healthz" && curl -s -o /dev/null "http://127.0.0.1:$APIPORT/" && break; sleep 0.2; done
curl -s -o /dev/null "http://127.0.0.1:$KPORT/healthz" && ok "kiln serve listens on $KPORT" || bad "kiln serve did not start: $(tail -3 "$T/serve.log")"

# Another build, running (its RUN step sleeps), in another state dir.
mkdir -p "$T/other-src"
printf 'ARG KILN_REGISTRY\nFROM ${KILN_REGISTRY}/kiln/busybox:1\nRUN sleep 4301\n' > "$T/other-src/Containerfile"
write_config "$T/other.json" "$T/other-state" "127.0.0.1:18723" none ""
"$KILN" build --config "$T/other.json" --domain other --candidate o1 --source "$T/other-src" > "$T/other.json.out" 2>&1 & OTHER_KILN=$!; PIDS+=("$OTHER_KILN")
OTHER_SLEEP=""
for _ in $(seq 300); do OTHER_SLEEP=$(pgrep -f '^sleep 4301' | head -1 || true); [ -n "$OTHER_SLEEP" ] && break; sleep 0.2; done
[ -n "$OTHER_SLEEP" ] && ok "another build is running (its step is pid $OTHER_SLEEP)" || bad "the other build did not start: $(tail -5 "$T/other.json.out")"

# The hostile candidate.
mkdir -p "$T/hsrc"
cp "$HERE/hostile_probe.sh" "$HERE/hostile_escape.go" "$T/hsrc/"
cat > "$T/hsrc/Containerfile" <<'EOF2'
ARG KILN_REGISTRY
FROM ${KILN_REGISTRY}/kiln/go-builder:1.19 AS esc
COPY hostile_escape.go /src/esc.go
RUN cd /src && CGO_ENABLED=0 go build -o /esc esc.go
FROM ${KILN_REGISTRY}/kiln/busybox:1
ARG H_AUTH
ARG H_STATE
ARG H_VICTIM
ARG H_VICTIM_STORE
ARG H_VICTIM_CACHE
ARG H_PORTS
ARG H_PIDS
ARG H_FILL_DIR
ARG H_FILL_MB
COPY --from=esc /esc /esc
COPY hostile_probe.sh /probe.sh
RUN /esc > /results-escape.txt 2>&1; H_OUT=/results.txt sh /probe.sh > /dev/null; cat /results-escape.txt /results.txt
EOF2
write_config "$T/kiln.json" "$STATE" "127.0.0.1:18724" none "$KILN_SERVE $OTHER_SLEEP $OTHER_KILN"

"$KILN" check-config --config "$T/kiln.json" > "$T/cc.out" 2>&1 && ok "check-config accepts the setup" || bad "check-config: $(cat "$T/cc.out")"

field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
# results FILE: the RESULT lines of a build's log_tail
results() { field "$1" "'\n'.join(l for l in d.get('log_tail','').splitlines() if l.startswith('RESULT '))" 2>/dev/null || true; }
expect_blocked() {  # MODE JSON NAMES...
  local mode=$1 json=$2; shift 2
  local res; res=$(results "$json")
  echo "$res" | sed "s/^/  [$mode] /"
  for n in "$@"; do
    line=$(echo "$res" | grep "^RESULT $n " || true)
    case "$line" in
      *" BLOCKED"*) ok "$mode: $n blocked" ;;
      "") bad "$mode: no result for $n" ;;
      *) bad "$mode: $line" ;;
    esac
  done
  echo "$res" | grep -q " LEAK" && bad "$mode: a LEAK line: $(echo "$res" | grep " LEAK")" || ok "$mode: no LEAK line"
}
COMMON=(auth_file proc_walk "signal_$KILN_SERVE" "signal_$OTHER_SLEEP" "signal_$OTHER_KILN" "connect_$KPORT" "connect_$PORT" "connect_$APIPORT" other_workspace other_storage state_dir disk_fill)

# 1. containerfile mode
rc=0; "$KILN" build --config "$T/kiln.json" --domain hostile --candidate h1 --source "$T/hsrc" > "$T/h1.json" 2> "$T/h1.log" || rc=$?
st=$(field "$T/h1.json" "d['status']" 2>/dev/null || echo none)
[ "$st" = succeeded ] || [ "$st" = failed ] && ok "containerfile: the build ends cleanly ($st, exit $rc)" || bad "containerfile: status $st: $(head -c 600 "$T/h1.json") $(tail -5 "$T/h1.log")"
expect_blocked containerfile "$T/h1.json" "${COMMON[@]}" escape_auth_file escape_state_dir escape_other_workspace escape_other_storage escape_other_cache

# 2. layered mode
mkdir -p "$T/lsrc"; cp "$HERE/hostile_probe.sh" "$T/lsrc/"
rc=0; "$KILN" build --config "$T/kiln.json" --domain layered --candidate l1 --source "$T/lsrc" > "$T/l1.json" 2> "$T/l1.log" || rc=$?
st=$(field "$T/l1.json" "d['status']" 2>/dev/null || echo none)
[ "$st" = succeeded ] || [ "$st" = failed ] && ok "layered: the build ends cleanly ($st, exit $rc)" || bad "layered: status $st: $(head -c 600 "$T/l1.json")"
expect_blocked layered "$T/l1.json" "${COMMON[@]}"

# 3. control: with build.network "host" the same probe DOES connect (the probe works).
write_config "$T/hostnet.json" "$T/hostnet-state" "127.0.0.1:18725" host ""
"$KILN" check-config --config "$T/hostnet.json" > "$T/cc2.out" 2>&1 || true
grep -q 'WARNING: domains.hostile.build.network: !!!' "$T/cc2.out" && ok "check-config warns loudly about build.network host" || bad "no host-network warning: $(cat "$T/cc2.out")"
"$KILN" build --config "$T/hostnet.json" --domain hostile --candidate h2 --source "$T/hsrc" > "$T/h2.json" 2> "$T/h2.log" || true
results "$T/h2.json" | grep -q "^RESULT connect_$PORT LEAK" && ok "control: with network host the probe reaches the registry" || bad "control: probe did not connect: $(results "$T/h2.json" | grep connect)"

# 4. No secret anywhere, no surviving process.
for f in "$T/h1.json" "$T/h1.log" "$T/l1.json" "$T/l1.log"; do
  if grep -q -e "$SECRET" -e "$PASSWORD" -e "$AUTHSTR" "$f"; then bad "a secret is in $(basename "$f")"; else ok "no secret in $(basename "$f")"; fi
done
for img in test/hostile:h1 test/hostile-layered:l1; do
  rm -rf "$T/img"; skopeo copy -q --authfile "$AUTH" --src-tls-verify=false "docker://127.0.0.1:$PORT/$img" "dir:$T/img" 2>/dev/null || { bad "cannot fetch $img"; continue; }
  found=0
  for b in "$T"/img/*; do zcat -f "$b" 2>/dev/null | grep -a -q -e "$SECRET" -e "$PASSWORD" -e "$AUTHSTR" && found=1; done
  [ "$found" = 0 ] && ok "no secret in image $img" || bad "a secret is in image $img"
  for b in "$T"/img/*; do zcat -f "$b" 2>/dev/null | tar -xOf - results.txt 2>/dev/null; done > "$T/img-results.txt" || true
  grep -q "^RESULT auth_file BLOCKED" "$T/img-results.txt" && ok "image $img records the results" || bad "image $img has no results.txt"
done
sleep 1
left=$(pgrep -f '^sleep 434[34]' || true)
[ -z "$left" ] && ok "no background process of the hostile builds survives" || bad "surviving processes: $left"
kill -0 "$KILN_SERVE" 2>/dev/null && ok "kiln serve survived the hostile builds" || bad "kiln serve was killed"
kill -0 "$OTHER_SLEEP" 2>/dev/null && ok "the other build survived the hostile builds" || bad "the other build was killed"
# Cancelling the other build (SIGTERM to `kiln build`) kills its whole tree.
kill -TERM "$OTHER_KILN"; wait "$OTHER_KILN" 2>/dev/null || true
sleep 1
[ -z "$(pgrep -f '^sleep 4301' || true)" ] && ok "cancel killed the other build's step" || bad "the other build's step survives its cancel"
left=""
for p in $(pgrep -u kiln-build || true); do case "$BEFORE" in *" $p "*) ;; *) left="$left $p";; esac; done
if [ -z "$left" ]; then ok "no process of the build user is left"
else bad "build-user processes left:$(for p in $left; do echo; ps -o pid=,ppid=,args= -p "$p"; done)
$(ps -eo pid,ppid,user,args | head -60)"; fi
stat -c %a "$STATE" | grep -q '^700$' && ok "state dir is 0700" || bad "state dir mode $(stat -c %a "$STATE")"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
