#!/usr/bin/env bash
# Layered-mode pushes against real docker-registry instances (distribution 2.8, htpasswd auth),
# over plain HTTP and over HTTPS with a private CA made for the test (scripts/registry.sh --tls),
# through `kiln build`. Checks, per registry:
#   - a push gives an image that skopeo pulls back and `buildah run --isolation chroot` runs;
#     its manifest is the base's layers + one, its config's rootfs.diff_ids match the layers;
#   - a rebuild with the same binary (new tree: a comment changed) uploads no blob at all
#     (counted in the registry's access log) and PUTs only the manifest;
#   - a rebuild of the same tree without the build-key cache (state/keys removed) finds the tag
#     already at the same digest: no blob upload and no manifest PUT;
# and on the HTTP registry: killing the registry during a large layer upload fails the build,
# leaves the old tag intact after the registry restarts, and the retry succeeds.
#
#   tests/integration/layered_push_test.sh path/to/kiln      (root; ports 5131, 5132)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
KILN="$(realpath "${1:?usage: layered_push_test.sh KILN}")"
HTTP_PORT=${KILN_LAYERED_PUSH_HTTP_PORT:-5131}
TLS_PORT=${KILN_LAYERED_PUSH_TLS_PORT:-5132}
# Lower case only: the path ends up in an oci: image reference, which must be lower case.
T=/var/tmp/kiln-layered-push.$$.$(date +%s%N); mkdir -m 700 "$T"
pass=0; fail=0
ok() { echo "ok - $*"; pass=$((pass + 1)); }
bad() { echo "not ok - $*"; fail=$((fail + 1)); }
cleanup() {
  for r in reg regtls; do "$ROOT/scripts/registry.sh" stop --dir "$T/$r" >/dev/null 2>&1 || true; done
  buildah --root "$T/st/root" --runroot "$T/st/run" --storage-driver overlay rm -a >/dev/null 2>&1 || true
  umount -R "$T/st/root/overlay" >/dev/null 2>&1 || true
  rm -rf "$T"
}
trap cleanup EXIT
field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }

# --- registries and the base image ------------------------------------------------------------
"$ROOT/scripts/registry.sh" start --dir "$T/reg" --port "$HTTP_PORT" >/dev/null
"$ROOT/scripts/registry.sh" start --dir "$T/regtls" --port "$TLS_PORT" --tls >/dev/null
"$ROOT/scripts/base_images.sh" --registry "127.0.0.1:$HTTP_PORT" --authfile "$T/reg/auth.json" >/dev/null 2>&1
skopeo copy -q --src-authfile "$T/reg/auth.json" --src-tls-verify=false \
  --dest-authfile "$T/regtls/auth.json" --dest-cert-dir "$T/regtls/certs" \
  "docker://127.0.0.1:$HTTP_PORT/kiln/busybox:1" "docker://127.0.0.1:$TLS_PORT/kiln/busybox:1"
BASE_DIGEST=$(skopeo inspect --authfile "$T/reg/auth.json" --tls-verify=false \
  "docker://127.0.0.1:$HTTP_PORT/kiln/busybox:1" --format '{{.Digest}}')
TLS_BASE_DIGEST=$(skopeo inspect --authfile "$T/regtls/auth.json" --cert-dir "$T/regtls/certs" \
  "docker://127.0.0.1:$TLS_PORT/kiln/busybox:1" --format '{{.Digest}}')

# --- the workload: a small Go program (pure Go, static) ---------------------------------------
mkdir -p "$T/src"
cat > "$T/src/go.mod" <<'EOF'
module example.com/hello

go 1.19
EOF
write_main() {  # MESSAGE [COMMENT]
  cat > "$T/src/main.go" <<EOF
package main

import "fmt"

// ${2:-first}
func main() { fmt.Println("$1") }
EOF
}
write_main "hello v1"

# write_config FILE PORT SCHEME BASE_DIGEST REG_DIR STATE [BIG]   (build.compression: $COMPRESSION)
COMPRESSION=auto
write_config() {
  local ca=null cmd='["go", "build", "-o", "out/app", "."]' outputs='[{"from": "out/app", "to": "/app"}]'
  [ "$3" = https ] && ca="\"$5/ca.pem\""
  if [ -n "${7:-}" ]; then
    cmd='["sh", "-c", "go build -o out/app . && head -c 150000000 /dev/urandom > out/big"]'
    outputs='[{"from": "out/app", "to": "/app"}, {"from": "out/big", "to": "/big"}]'
  fi
  cat > "$1" <<JSON
{ "server": {"listen": "127.0.0.1:18760", "state_dir": "$6"},
  "registries": {"local": {"url": "$3://127.0.0.1:$2", "auth_file": "$5/auth.json", "ca_file": $ca}},
  "domains": {"push": {"token_sha256": ["$(printf x | "$KILN" hash-token)"],
    "build": {"mode": "layered", "layered": {
      "base_image": "127.0.0.1:$2/kiln/busybox@$4",
      "command": $cmd,
      "env": {"GOFLAGS": "-buildvcs=false", "GOPROXY": "off"},
      "caches": {"GOCACHE": "go-build"},
      "outputs": $outputs, "entrypoint": ["/app"]}, "compression": "$COMPRESSION"},
    "image": {"registry": "local", "repository": "test/push"}}}}
JSON
}

# Access-log counters since line $1 of the registry log $2.
count() {  # FROM_LINE LOG REGEX
  tail -n +"$(( $1 + 1 ))" "$2" | grep -cE "$3" || true
}
lines() { wc -l < "$1"; }
build() {  # CONFIG CANDIDATE OUT
  "$KILN" build --config "$1" --domain push --candidate "$2" --source "$T/src" > "$3" 2> "$3.log"
}

mkdir -p "$T/st"
S=(--root "$T/st/root" --runroot "$T/st/run" --storage-driver overlay)

run_suite() {  # NAME PORT SCHEME BASE_DIGEST REG_DIR COMPRESSION
  local name=$1 port=$2 scheme=$3 bdig=$4 rdir=$5
  COMPRESSION=$6
  local log=$rdir/registry.log cfg=$T/$name.json tlsargs=(--tls-verify=false)
  [ "$scheme" = https ] && tlsargs=(--cert-dir "$rdir/certs")
  write_main "hello v1"
  write_config "$cfg" "$port" "$scheme" "$bdig" "$rdir" "$T/state-$name"

  local l0; l0=$(lines "$log")
  if build "$cfg" c1 "$T/$name-1.json"; then ok "$name: first build pushes"; else bad "$name: first build: $(cat "$T/$name-1.json" "$T/$name-1.json.log")"; return; fi
  local d1; d1=$(field "$T/$name-1.json" "d['image']['digest']")
  local up; up=$(count "$l0" "$log" '"PUT /v2/test/push/blobs/uploads/[^ ]* HTTP/1.1" 201')
  [ "$up" = 2 ] && ok "$name: first push uploads the layer and the config (base layer mounted)" || bad "$name: first push uploaded $up blobs"

  # The image as a client sees it.
  local man cfgblob
  man=$(skopeo inspect --raw --authfile "$rdir/auth.json" "${tlsargs[@]}" "docker://127.0.0.1:$port/test/push:c1")
  cfgblob=$(skopeo inspect --config --raw --authfile "$rdir/auth.json" "${tlsargs[@]}" "docker://127.0.0.1:$port/test/push:c1")
  python3 - "$man" "$cfgblob" "$COMPRESSION" <<'PY' && ok "$name: manifest/config are consistent OCI documents ($COMPRESSION layer)" || bad "$name: manifest/config: $man $cfgblob"
import json, sys
m, c = json.loads(sys.argv[1]), json.loads(sys.argv[2])
# Issue 18: the new layer is gzip, or (compression none; auto on this loopback registry) the plain
# tar, whose digest is its diff_id.
new, new_diff = m["layers"][-1], c["rootfs"]["diff_ids"][-1]
if sys.argv[3] == "gzip":
    assert new["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip" and new["digest"] != new_diff
else:
    assert new["mediaType"] == "application/vnd.oci.image.layer.v1.tar" and new["digest"] == new_diff
assert m["schemaVersion"] == 2 and m["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
assert m["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
assert len(m["layers"]) == len(c["rootfs"]["diff_ids"]) >= 2
assert all(l["digest"].startswith("sha256:") and l["size"] > 0 for l in m["layers"])
assert c["os"] == "linux" and c["architecture"] == "amd64" and c["config"]["Entrypoint"] == ["/app"]
assert sum(1 for h in c["history"] if not h.get("empty_layer")) == len(m["layers"])
PY
  rm -rf "$T/oci-$name"
  skopeo copy -q --src-authfile "$rdir/auth.json" "${tlsargs[@]/--/--src-}" \
    "docker://127.0.0.1:$port/test/push:c1" "oci:$T/oci-$name:x" \
    && ok "$name: skopeo pulls the image back (layer digests verified)" || bad "$name: skopeo copy failed"
  local ctr outp
  ctr=$(buildah "${S[@]}" from -q "oci:$T/oci-$name:x" 2>&1) || ctr=""
  outp=$( [ -n "$ctr" ] && buildah "${S[@]}" run --isolation chroot "$ctr" -- /app 2>&1 || true)
  [ -n "$ctr" ] && buildah "${S[@]}" rm "$ctr" >/dev/null 2>&1
  [ "$outp" = "hello v1" ] && ok "$name: the pulled image runs (buildah run --isolation chroot)" || bad "$name: run printed: $outp"

  # Same binary, new tree (a file outside the build changed; a comment in package main would
  # change Go's build ID): no blob upload, only the manifest.
  echo "notes $name" > "$T/src/NOTES.txt"
  l0=$(lines "$log")
  build "$cfg" c1 "$T/$name-2.json" || true
  [ "$(field "$T/$name-2.json" "d['status']")" = succeeded ] && ok "$name: rebuild with the same binary succeeds" || bad "$name: rebuild: $(cat "$T/$name-2.json")"
  up=$(count "$l0" "$log" '"(POST|PUT|PATCH) /v2/test/push/blobs/uploads')
  local mput; mput=$(count "$l0" "$log" '"PUT /v2/test/push/manifests/c1 HTTP/1.1" 201')
  [ "$up" = 0 ] && [ "$mput" = 1 ] && ok "$name: same binary: no blob request beyond HEAD, one manifest PUT" \
    || bad "$name: same binary: $up upload requests, $mput manifest PUTs"
  if [ "$COMPRESSION" = gzip ]; then
    grep -q "from the outputs cache" "$T/$name-2.json" && ok "$name: same outputs: the layer comes from the outputs cache" \
      || bad "$name: no outputs-cache hit: $(field "$T/$name-2.json" "d['log_tail']")"
  else
    grep -q "uncompressed" "$T/$name-2.json" && ok "$name: the layer is stored uncompressed (no compression pass)" \
      || bad "$name: not an uncompressed layer: $(field "$T/$name-2.json" "d['log_tail']")"
  fi
  local d2; d2=$(field "$T/$name-2.json" "d['image']['digest']")

  # Same tree, build-key cache dropped: the same image again, and the tag already has it.
  rm -rf "$T/state-$name/keys"
  l0=$(lines "$log")
  build "$cfg" c1 "$T/$name-3.json" || true
  up=$(count "$l0" "$log" '"(POST|PUT|PATCH) /v2/test/push/')
  [ "$(field "$T/$name-3.json" "d['image']['digest']")" = "$d2" ] && [ "$up" = 0 ] \
    && ok "$name: identical image: nothing pushed at all (no upload, no manifest PUT)" \
    || bad "$name: identical image: $up write requests; $(cat "$T/$name-3.json")"
  [ "$d1" != "$d2" ] || bad "$name: the build key/commit annotation should distinguish d1 and d2"
}

run_suite http "$HTTP_PORT" http "$BASE_DIGEST" "$T/reg" gzip
run_suite tls "$TLS_PORT" https "$TLS_BASE_DIGEST" "$T/regtls" auto  # loopback: the plain tar
COMPRESSION=auto

# --- registry killed during an upload -----------------------------------------------------------
old=$(skopeo inspect --authfile "$T/reg/auth.json" --tls-verify=false "docker://127.0.0.1:$HTTP_PORT/test/push:c1" --format '{{.Digest}}')
write_config "$T/big.json" "$HTTP_PORT" http "$BASE_DIGEST" "$T/reg" "$T/state-big" big
write_main "hello v2"
build "$T/big.json" c1 "$T/big-1.json" &
kpid=$!
uploads=$T/reg/data/docker/registry/v2/repositories/test/push/_uploads
killed=0
for _ in $(seq 1 1200); do  # up to 120 s: compile + 150 MB of gzip first
  big=$(find "$uploads" -name data -size +5M 2>/dev/null | head -1 || true)
  if [ -n "$big" ]; then kill -9 "$(cat "$T/reg/registry.pid")"; killed=1; break; fi
  kill -0 "$kpid" 2>/dev/null || break
  sleep 0.1
done
rc=0; wait "$kpid" || rc=$?
[ "$killed" = 1 ] && ok "registry killed during the layer upload" || bad "the upload was never seen (rc=$rc)"
[ "$rc" != 0 ] && [ "$(field "$T/big-1.json" "d['status']")" = failed ] \
  && ok "the interrupted push fails the build" || bad "interrupted push: rc=$rc $(cat "$T/big-1.json")"
"$ROOT/scripts/registry.sh" start --dir "$T/reg" --port "$HTTP_PORT" >/dev/null
now=$(skopeo inspect --authfile "$T/reg/auth.json" --tls-verify=false "docker://127.0.0.1:$HTTP_PORT/test/push:c1" --format '{{.Digest}}')
[ "$now" = "$old" ] && ok "the tag still points at the old image after the failed push" || bad "tag moved: $old -> $now"
if build "$T/big.json" c1 "$T/big-2.json"; then
  new=$(field "$T/big-2.json" "d['image']['digest']")
  now=$(skopeo inspect --authfile "$T/reg/auth.json" --tls-verify=false "docker://127.0.0.1:$HTTP_PORT/test/push:c1" --format '{{.Digest}}')
  [ "$new" != "$old" ] && [ "$now" = "$new" ] && ok "the retry pushes and moves the tag" || bad "retry: new=$new tag=$now old=$old"
else
  bad "retry failed: $(cat "$T/big-2.json" "$T/big-2.json.log")"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
