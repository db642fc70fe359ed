#!/usr/bin/env bash
# Builds kiln's two local base images with buildah (no Docker Hub here) and pushes them:
#
#   REGISTRY/kiln/busybox:1        FROM scratch + busybox-static, applet symlinks in /bin,
#                                  /etc/passwd (root, nobody), /etc/group, /tmp 1777
#   REGISTRY/kiln/go-builder:1.19  busybox:1 + Debian's Go 1.19 (dereferenced copy of
#                                  /usr/lib/go-1.19 without test/ and the prebuilt cmd/ archives)
#                                  + the glibc files `ldd go` lists; CGO_ENABLED=0, GOCACHE set;
#                                  std reinstalled for CGO_ENABLED=0 (no std rebuild per build)
#
#   scripts/base_images.sh --registry 127.0.0.1:5000 --authfile FILE
#                          [--storage-root R --runroot RR] [--cert-dir DIR] [--force]
#
# Idempotent: each image carries the label io.kiln.inputs (a hash of this script, the
# busybox binary and the Debian package versions); when the registry already has the tag with
# the same label nothing is built; when the local storage has the image (tagged
# localhost/kiln/<name>:<inputs>) it is only pushed. Runs as root with `--isolation chroot`.
# stdout: `busybox=REF@DIGEST` and `go_builder=REF@DIGEST`; progress and timings on stderr.
# --cert-dir turns TLS verification on (HTTPS registry with a private CA); otherwise
# --tls-verify=false (plain HTTP or unverified HTTPS).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REGISTRY=""; AUTHFILE=""; ROOT=""; RUNROOT=""; CERTDIR=""; FORCE=0
while [ $# -gt 0 ]; do
  case $1 in
    --registry) REGISTRY=$2; shift 2 ;;
    --authfile) AUTHFILE=$2; shift 2 ;;
    --storage-root) ROOT=$2; shift 2 ;;
    --runroot) RUNROOT=$2; shift 2 ;;
    --cert-dir) CERTDIR=$2; shift 2 ;;
    --force) FORCE=1; shift ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
    *) die "unknown argument: $1" ;;
  esac
done
[ -n "$REGISTRY" ] || die "--registry HOST:PORT is required"
[ -n "$AUTHFILE" ] && [ -r "$AUTHFILE" ] || die "--authfile FILE is required and must be readable"
[ "$(id -u)" = 0 ] || die "run as root (buildah --isolation chroot)"
require_cmd buildah skopeo python3 sha256sum dpkg-query ldd tar

GOROOT_HOST=/usr/lib/go-1.19
GOROOT_IMG=/usr/lib/go-1.19
BUSYBOX_BIN=/bin/busybox
[ -x "$GOROOT_HOST/bin/go" ] || die "$GOROOT_HOST/bin/go missing (package golang-1.19-go)"
[ -x "$BUSYBOX_BIN" ] && ! ldd "$BUSYBOX_BIN" >/dev/null 2>&1 ||
  die "$BUSYBOX_BIN is not the static busybox (package busybox-static)"

BUILDAH=(buildah)
[ -n "$ROOT" ] && BUILDAH+=(--root "$ROOT")
[ -n "$RUNROOT" ] && BUILDAH+=(--runroot "$RUNROOT")
TLSARGS=(--tls-verify=false)
[ -n "$CERTDIR" ] && TLSARGS=(--tls-verify=true --cert-dir "$CERTDIR")

BB_REF=$REGISTRY/kiln/busybox:1
GO_REF=$REGISTRY/kiln/go-builder:1.19
LABEL=io.kiln.inputs

pkg_versions() { dpkg-query -W -f '${Package}=${Version}\n' "$@" 2>/dev/null | sort; }
BB_HASH=$( { sha256sum "$0" "$BUSYBOX_BIN" | cut -d' ' -f1; pkg_versions busybox-static; } |
  sha256sum | cut -c1-32)
GO_HASH=$( { echo "$BB_HASH"; pkg_versions golang-1.19-go golang-1.19-src libc6;
  cat "$GOROOT_HOST/VERSION"; } | sha256sum | cut -c1-32)

# remote_info REF -> prints "LABEL_VALUE DIGEST" (empty when the tag is missing).
remote_info() {
  local js
  js=$(skopeo inspect --authfile "$AUTHFILE" "${TLSARGS[@]}" "docker://$1" 2>/dev/null) || return 0
  python3 -c 'import json,sys
d=json.loads(sys.argv[2]); print((d.get("Labels") or {}).get(sys.argv[1],"-"), d["Digest"])' \
    "$LABEL" "$js"
}

# push REF -> pushes the local image REF to docker://REF, prints its digest.
push() {
  local df; df=$(mktemp)
  "${BUILDAH[@]}" push --quiet --authfile "$AUTHFILE" "${TLSARGS[@]}" --digestfile "$df" \
    "$1" "docker://$1" >&2
  cat "$df"; rm -f "$df"
}

CTRS=()
cleanup() {
  local c
  for c in "${CTRS[@]}"; do "${BUILDAH[@]}" rm "$c" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT

build_busybox() {
  local ctr mnt
  ctr=$("${BUILDAH[@]}" from --quiet scratch); CTRS+=("$ctr")
  mnt=$("${BUILDAH[@]}" mount "$ctr")
  install -D -m 0755 "$BUSYBOX_BIN" "$mnt/bin/busybox"
  mkdir -p "$mnt/etc" "$mnt/root" "$mnt/usr/bin" "$mnt/sbin" "$mnt/usr/sbin" "$mnt/tmp" "$mnt/var/tmp"
  chmod 1777 "$mnt/tmp" "$mnt/var/tmp"
  chmod 0700 "$mnt/root"
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' \
    >"$mnt/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$mnt/etc/group"
  "${BUILDAH[@]}" umount "$ctr" >/dev/null
  "${BUILDAH[@]}" run --isolation chroot "$ctr" -- /bin/busybox --install -s /bin
  "${BUILDAH[@]}" config --env PATH=/bin:/usr/bin:/sbin:/usr/sbin --cmd /bin/sh \
    --label "$LABEL=$BB_HASH" --created-by "kiln scripts/base_images.sh" "$ctr"
  "${BUILDAH[@]}" commit --quiet --rm --timestamp 0 "$ctr" "$BB_REF" >/dev/null
  CTRS=()
}

build_go() {
  local ctr mnt lib
  ctr=$("${BUILDAH[@]}" from --quiet --pull=always --authfile "$AUTHFILE" "${TLSARGS[@]}" \
    "$BB_REF"); CTRS+=("$ctr")
  mnt=$("${BUILDAH[@]}" mount "$ctr")
  mkdir -p "$mnt$(dirname "$GOROOT_IMG")"
  # Like `cp -rL`: src, pkg/include, ... are symlinks into /usr/share/go-1.19.
  tar -C "$(dirname "$GOROOT_HOST")" -chf - \
    --exclude="$(basename "$GOROOT_HOST")/test" \
    --exclude="$(basename "$GOROOT_HOST")/pkg/linux_amd64/cmd" \
    "$(basename "$GOROOT_HOST")" | tar -C "$mnt$(dirname "$GOROOT_IMG")" -xf -
  # go (and pprof, trace) link against glibc: copy what ldd lists, at the same paths.
  for lib in $(ldd "$GOROOT_HOST/bin/go" "$GOROOT_HOST"/pkg/tool/linux_amd64/* 2>/dev/null |
               grep -o '/[^ ]*\.so[^ ]*' | sort -u); do
    install -D -m 0755 "$(readlink -f "$lib")" "$mnt$lib"
  done
  mkdir -p "$mnt/root/.cache/go-build" "$mnt/root/go" "$mnt/src"
  "${BUILDAH[@]}" umount "$ctr" >/dev/null
  "${BUILDAH[@]}" config \
    --env GOROOT=$GOROOT_IMG \
    --env PATH=$GOROOT_IMG/bin:/bin:/usr/bin:/sbin:/usr/sbin \
    --env GOFLAGS=-buildvcs=false --env GOTOOLCHAIN=local --env CGO_ENABLED=0 \
    --env GOPROXY=off --env GOPATH=/root/go \
    --env HOME=/root --env GOCACHE=/root/.cache/go-build \
    --workingdir /src --label "$LABEL=$GO_HASH" \
    --created-by "kiln scripts/base_images.sh" "$ctr"
  # Debian's prebuilt std archives were compiled with cgo; with CGO_ENABLED=0 every cold build
  # would recompile std. Reinstall std for the image's own settings (also a smoke test).
  "${BUILDAH[@]}" run --isolation chroot "$ctr" -- go version >&2
  "${BUILDAH[@]}" run --isolation chroot "$ctr" -- sh -c \
    'go install std && rm -rf /root/.cache/go-build && mkdir -p /root/.cache/go-build'
  "${BUILDAH[@]}" commit --quiet --rm --timestamp 0 "$ctr" "$GO_REF" >/dev/null
  CTRS=()
}

# ensure NAME REF HASH BUILD_FN: builds and pushes unless the registry has REF with label HASH.
ensure() {
  local name=$1 ref=$2 hash=$3 fn=$4 info t0 t1 t2 digest
  t0=$(now_ms)
  info=$(remote_info "$ref")
  if [ "$FORCE" = 0 ] && [ "${info%% *}" = "$hash" ]; then
    log "$ref up to date (inputs $hash), checked in $(( $(now_ms) - t0 )) ms"
    echo "$name=$ref@${info##* }"
    return 0
  fi
  # Built before on this storage (e.g. pushed to another registry)? Re-tag instead of building.
  local cache_name=localhost/kiln/${name//_/-}:$hash
  if [ "$FORCE" = 0 ] && "${BUILDAH[@]}" inspect --type image "$cache_name" >/dev/null 2>&1; then
    log "reusing local $cache_name for $ref"
    "${BUILDAH[@]}" tag "$cache_name" "$ref"
  else
    log "building $ref (inputs $hash)"
    "$fn"
    "${BUILDAH[@]}" tag "$ref" "$cache_name"
  fi
  t1=$(now_ms)
  digest=$(push "$ref")
  t2=$(now_ms)
  log "$ref: build $(( t1 - t0 )) ms, push $(( t2 - t1 )) ms, digest $digest"
  echo "$name=$ref@$digest"
}

T0=$(now_ms)
ensure busybox "$BB_REF" "$BB_HASH" build_busybox
ensure go_builder "$GO_REF" "$GO_HASH" build_go
log "base images ready in $(( $(now_ms) - T0 )) ms"
