#!/usr/bin/env bash
# Makes kiln's Debian 12 base image locally (no Docker Hub here) and pushes it:
#
#   REGISTRY/kiln/debian:12   mmdebstrap --variant=minbase bookworm from Debian's mirror
#                             (bookworm, bookworm-updates, bookworm-security), docs/man/locales
#                             excluded through a dpkg path-exclude that stays in the image
#
#   image/base_image.sh --registry 127.0.0.1:5140 --authfile FILE --root R --runroot RR
#                       [--mirror URL] [--security-mirror URL] [--refresh]
#
# Idempotent: the image carries the label io.kiln.inputs (a hash of this script, the mirrors
# and the mmdebstrap version). When the registry already has the tag with that label nothing is
# built. --refresh rebuilds anyway (e.g. to pick up Debian security updates: the package set
# comes from the mirror at build time, so the inputs hash does not see new package versions).
# stdout: `base=REF@DIGEST` and `inputs=HASH`; progress on stderr. Runs as root.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

REGISTRY=""; AUTHFILE=""; ROOT=""; RUNROOT=""; REFRESH=0
MIRROR=http://deb.debian.org/debian
SECMIRROR=http://deb.debian.org/debian-security
while [ $# -gt 0 ]; do
  case $1 in
    --registry) REGISTRY=$2; shift 2 ;;
    --authfile) AUTHFILE=$2; shift 2 ;;
    --root) ROOT=$2; shift 2 ;;
    --runroot) RUNROOT=$2; shift 2 ;;
    --mirror) MIRROR=$2; shift 2 ;;
    --security-mirror) SECMIRROR=$2; shift 2 ;;
    --refresh) REFRESH=1; shift ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
    *) die "unknown argument: $1" ;;
  esac
done
[ -n "$REGISTRY" ] && [ -r "$AUTHFILE" ] && [ -n "$ROOT" ] && [ -n "$RUNROOT" ] ||
  die "--registry, --authfile, --root and --runroot are required"
[ "$(id -u)" = 0 ] || die "run as root"
require_cmd mmdebstrap buildah skopeo python3 sha256sum

BUILDAH=(buildah --root "$ROOT" --runroot "$RUNROOT")
TLS=(--tls-verify=false)   # the local registry is plain HTTP on 127.0.0.1
REF=$REGISTRY/kiln/debian:12
LABEL=io.kiln.inputs
INPUTS=$( { sha256sum "$0" | cut -d' ' -f1; echo "$MIRROR $SECMIRROR";
            dpkg-query -W -f '${Version}\n' mmdebstrap; } | sha256sum | cut -c1-32)

remote=$(skopeo inspect --authfile "$AUTHFILE" "${TLS[@]}" "docker://$REF" 2>/dev/null || true)
if [ -n "$remote" ] && [ "$REFRESH" = 0 ]; then
  read -r have digest < <(python3 -c 'import json,sys
d=json.loads(sys.argv[1]); print((d.get("Labels") or {}).get("io.kiln.inputs","-"), d["Digest"])' "$remote")
  if [ "$have" = "$INPUTS" ]; then
    log "$REF up to date (inputs $INPUTS)"
    echo "base=${REF%:*}@$digest"; echo "inputs=$INPUTS"
    exit 0
  fi
fi

T0=$(now_ms)
WORK=$(mktemp -d /var/tmp/kiln-base.XXXXXX)
CTR=""
cleanup() {
  [ -n "$CTR" ] && "${BUILDAH[@]}" rm "$CTR" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
log "mmdebstrap bookworm (minbase) from $MIRROR"
# Fixed SOURCE_DATE_EPOCH: file mtimes and generated files are clamped, so two runs against
# the same package set give the same tarball. dpkg runs without fsync while bootstrapping (a
# failed run is thrown away); the hook's config file is removed before the tarball is made.
SOURCE_DATE_EPOCH=1716163200 mmdebstrap --quiet --variant=minbase --mode=root --format=tar \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --aptopt='Acquire::Retries "3"' \
  --setup-hook='mkdir -p "$1/etc/dpkg/dpkg.cfg.d" && echo force-unsafe-io >"$1/etc/dpkg/dpkg.cfg.d/00kiln-unsafe-io"' \
  --customize-hook='rm -f "$1/etc/dpkg/dpkg.cfg.d/00kiln-unsafe-io"' \
  bookworm "$WORK/rootfs.tar" \
  "deb $MIRROR bookworm main" "deb $MIRROR bookworm-updates main" \
  "deb $SECMIRROR bookworm-security main" >&2
log "rootfs $(du -m "$WORK/rootfs.tar" | cut -f1) MB in $(( $(now_ms) - T0 )) ms"
CTR=$("${BUILDAH[@]}" from --quiet scratch)
"${BUILDAH[@]}" add --quiet "$CTR" "$WORK/rootfs.tar" / >/dev/null
"${BUILDAH[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env LANG=C.UTF-8 --cmd /bin/bash --label "$LABEL=$INPUTS" \
  --created-by "kiln image/base_image.sh" "$CTR"
"${BUILDAH[@]}" commit --quiet --rm --timestamp 0 "$CTR" "$REF" >/dev/null
CTR=""
df=$WORK/digest
"${BUILDAH[@]}" push --quiet --authfile "$AUTHFILE" "${TLS[@]}" --digestfile "$df" "$REF" "docker://$REF" >&2
log "$REF built and pushed in $(( $(now_ms) - T0 )) ms, digest $(cat "$df")"
echo "base=${REF%:*}@$(cat "$df")"; echo "inputs=$INPUTS"
