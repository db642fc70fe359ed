#!/usr/bin/env bash
# Layered mode end to end through `kiln build`: real bubblewrap, real docker-registry with
# htpasswd auth on 127.0.0.1. Checks: a build pushes a runnable image whose manifest is the
# pinned base's layers + one new layer; an unchanged tree is a cache hit; a one-file change
# uploads only the new layer and config; a compile error returns diagnostics; hostile outputs
# are refused. Usage: layered_cli_test.sh path/to/kiln
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
KILN="$(realpath "${1:?usage: layered_cli_test.sh KILN}")"
PORT=${KILN_LAYERED_TEST_PORT:-5141}
T=$(mktemp -d /var/tmp/kiln-layered-test.XXXXXX)
pass=0; fail=0
ok() { echo "ok - $*"; pass=$((pass + 1)); }
bad() { echo "not ok - $*"; fail=$((fail + 1)); }
cleanup() { "$ROOT/scripts/registry.sh" stop --dir "$T/registry" >/dev/null 2>&1 || true; rm -rf "$T"; }
trap cleanup EXIT
"$ROOT/scripts/registry.sh" start --dir "$T/registry" --port "$PORT" >/dev/null
"$ROOT/scripts/base_images.sh" --registry "127.0.0.1:$PORT" --authfile "$T/registry/auth.json" >/dev/null
AUTH="$T/registry/auth.json"
DIGEST=$(skopeo inspect --authfile "$AUTH" --tls-verify=false "docker://127.0.0.1:$PORT/kiln/busybox:1" --format '{{.Digest}}')
write_config() {  # outputs-json
  cat > "$T/kiln.json" <<JSON
{ "server": {"listen": "127.0.0.1:18740", "state_dir": "$T/state"},
  "registries": {"local": {"url": "http://127.0.0.1:$PORT", "auth_file": "$AUTH"}},
  "domains": {"fast": {"token_sha256": ["$(printf x | "$KILN" hash-token)"],
    "build": {"mode": "layered", "layered": {
      "base_image": "127.0.0.1:$PORT/kiln/busybox@$DIGEST",
      "command": ["go", "build", "-o", "out/app", "./cmd/epp"],
      "env": {"CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false"},
      "caches": {"GOCACHE": "go-build"},
      "outputs": $1, "entrypoint": ["/app"]}},
    "image": {"registry": "local", "repository": "test/fast"}}}}
JSON
}
field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
write_config '[{"from": "out/app", "to": "/app"}]'
cp -r "$ROOT/examples/epp" "$T/src"

"$KILN" build --config "$T/kiln.json" --domain fast --candidate c1 --source "$T/src" > "$T/r1.json" 2> "$T/r1.log" \
  && ok "first layered build succeeds" || { bad "first layered build"; cat "$T/r1.json" "$T/r1.log"; }
D1=$(field "$T/r1.json" "d['image']['digest']")
man=$(skopeo inspect --raw --authfile "$AUTH" --tls-verify=false "docker://127.0.0.1:$PORT/test/fast@$D1")
base=$(skopeo inspect --raw --authfile "$AUTH" --tls-verify=false "docker://127.0.0.1:$PORT/kiln/busybox@$DIGEST")
nl=$(python3 -c "import json,sys; print(len(json.loads(sys.argv[1])['layers']))" "$man")
nb=$(python3 -c "import json,sys; print(len(json.loads(sys.argv[1])['layers']))" "$base")
[ "$nl" -eq $((nb + 1)) ] && ok "manifest = base layers + one layer ($nb + 1)" || bad "manifest has $nl layers, base $nb"
mkdir -p "$T/st"
S=(--root "$T/st/root" --runroot "$T/st/run" --storage-driver overlay)
C=$(buildah "${S[@]}" from -q --authfile "$AUTH" --tls-verify=false "127.0.0.1:$PORT/test/fast@$D1")
buildah "${S[@]}" run --isolation chroot "$C" -- test -x /app && ok "the image runs and has /app" || bad "image has no runnable /app"
buildah "${S[@]}" rm "$C" >/dev/null

"$KILN" build --config "$T/kiln.json" --domain fast --candidate c1 --source "$T/src" > "$T/r2.json" 2>/dev/null
[ "$(field "$T/r2.json" "d['cache_hit']")" = "True" ] && ok "unchanged tree is a cache hit" || bad "no cache hit"

echo "// a comment: same binary" >> "$T/src/internal/scorer/scorer.go"
"$KILN" build --config "$T/kiln.json" --domain fast --candidate c1 --source "$T/src" > "$T/r3.json" 2>/dev/null || true
uploads=$(field "$T/r3.json" "d['log_tail'].count('kiln: uploading')")
[ "$uploads" = "0" ] && ok "same binary: nothing is uploaded again (same layer, same config)" || bad "uploads: $uploads"
echo 'func kilnTestChange() int { return 42 }' >> "$T/src/internal/scorer/scorer.go"
"$KILN" build --config "$T/kiln.json" --domain fast --candidate c1 --source "$T/src" > "$T/r3.json" 2>/dev/null || true
[ "$(field "$T/r3.json" "d['status']")" = "succeeded" ] && ok "one-file change builds" || bad "one-file change: $(cat "$T/r3.json")"
uploads=$(field "$T/r3.json" "d['log_tail'].count('kiln: uploading')")
[ "$uploads" = "2" ] && ok "only the new layer and config were uploaded" || bad "uploads: $uploads"
[ "$(field "$T/r3.json" "d['image']['digest']")" != "$D1" ] && ok "new digest" || bad "same digest after a change"

sed -i 's/s += w.Adapter$/s += w.AdapterPenalty/' "$T/src/internal/scorer/scorer.go"
"$KILN" build --config "$T/kiln.json" --domain fast --candidate c1 --source "$T/src" > "$T/r4.json" 2>/dev/null && bad "compile error exit 0" || true
[ "$(field "$T/r4.json" "[x['file'] for x in d['diagnostics']][0]")" = "internal/scorer/scorer.go" ] \
  && ok "compile error: diagnostics with repo-relative path" || bad "diagnostics: $(cat "$T/r4.json")"
sed -i 's/s += w.AdapterPenalty$/s += w.Adapter/' "$T/src/internal/scorer/scorer.go"

"$KILN" check-config --config "$T/kiln.json" > "$T/cc.out" 2>&1 && grep -q "base images resolve" "$T/cc.out" \
  && ok "check-config resolves the pinned base" || bad "check-config: $(cat "$T/cc.out")"
sed "s/$DIGEST/sha256:$(printf '0%.0s' $(seq 64))/" "$T/kiln.json" > "$T/badbase.json"
"$KILN" check-config --config "$T/badbase.json" > "$T/cc2.out" 2>&1 && bad "unresolvable base accepted" \
  || { grep -q "base_image: cannot be resolved" "$T/cc2.out" && ok "check-config: unresolvable base is a clear error" || bad "check-config: $(cat "$T/cc2.out")"; }
"$KILN" build --config "$T/badbase.json" --domain fast --candidate c3 --source "$T/src" > "$T/r6.json" 2>/dev/null && bad "build with unresolvable base succeeded" \
  || { grep -q "cannot be resolved" "$T/r6.json" && ok "build: unresolvable base is a clear error" || bad "build error: $(cat "$T/r6.json")"; }

write_config '[{"from": "../../etc/shadow", "to": "/x"}]'
rc=0; "$KILN" build --config "$T/kiln.json" --domain fast --candidate c2 --source "$T/src" > "$T/r5.json" 2> "$T/r5.log" || rc=$?
[ "$rc" -ne 0 ] && grep -q 'outputs\[0\].from' "$T/r5.log" \
  && ok "an output outside the workspace is refused by the config check" || bad "escaping output: rc=$rc $(cat "$T/r5.log")"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
