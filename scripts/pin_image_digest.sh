#!/usr/bin/env bash
# Pins kiln's image in k8s/manifests/kustomization.yaml (kustomize `images:`, name `kiln`) to
# a digest:
#
#   scripts/pin_image_digest.sh NAME@sha256:<64 hex> [--kustomization FILE]
#                               [--verify [--authfile FILE] [--tls-verify=false]]
#   scripts/pin_image_digest.sh --from-build        the last image scripts/build_image.sh built
#
# Rewrites only the `newName:` and `digest:` lines of the `- name: kiln` entry (comments and
# everything else stay), refuses tags and the all-zero placeholder, then renders the manifests
# and runs scripts/check_manifests.py --require-pinned. --verify first checks with skopeo that
# the digest resolves in its registry. The scripts/build_image.sh registry (127.0.0.1:5140) is
# only reachable from this machine: push the image to the cluster's registry first
# (e.g. `skopeo copy docker://127.0.0.1:5140/kiln/kiln@sha256:... docker://REGISTRY/kiln/kiln`;
# the digest stays the same when the layers are copied unchanged).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REF=""; KFILE=$KILN_REPO_ROOT/k8s/manifests/kustomization.yaml; VERIFY=0; SKOPEO_ARGS=()
while [ $# -gt 0 ]; do
  case $1 in
    --kustomization) KFILE=$2; shift 2 ;;
    --verify) VERIFY=1; shift ;;
    --authfile) SKOPEO_ARGS+=(--authfile "$2"); shift 2 ;;
    --tls-verify=*) SKOPEO_ARGS+=("$1"); shift ;;
    --from-build)
      last=$(ls -t "$KILN_REPO_ROOT"/build/image/records/*.build 2>/dev/null | head -n1) ||
        true
      [ -n "$last" ] || die "no build record in build/image/records (run scripts/build_image.sh)"
      REF=$(sed -n 's/^image=//p' "$last"); shift ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
    image=*) REF=${1#image=}; shift ;;
    -*) die "unknown argument: $1" ;;
    *) REF=$1; shift ;;
  esac
done
[ -n "$REF" ] || die "give NAME@sha256:<digest> (or --from-build)"
[[ "$REF" =~ ^([^@[:space:]]+)@(sha256:[0-9a-f]{64})$ ]] || die "not NAME@sha256:<64 hex>: $REF"
NAME=${BASH_REMATCH[1]}; DIGEST=${BASH_REMATCH[2]}
last=${NAME##*/}
[[ "$last" != *:* ]] || die "the name carries a tag ($NAME): give the repository only"
[ "$DIGEST" != "sha256:$(printf '0%.0s' {1..64})" ] || die "that is the placeholder digest"
[ -f "$KFILE" ] || die "no $KFILE"

if [ "$VERIFY" = 1 ]; then
  require_cmd skopeo
  skopeo inspect --raw "${SKOPEO_ARGS[@]}" "docker://$NAME@$DIGEST" >/dev/null ||
    die "$NAME@$DIGEST does not resolve"
  log "verified: $NAME@$DIGEST resolves"
fi

python3 - "$KFILE" "$NAME" "$DIGEST" <<'PY'
import re, sys
path, name, digest = sys.argv[1:]
lines = open(path).read().split("\n")
out, in_entry, done = [], False, set()
for line in lines:
    m = re.match(r"^(\s*)- name:\s*kiln\s*(#.*)?$", line)
    if m:
        in_entry, indent = True, len(m.group(1)) + 2
    elif in_entry and (re.match(r"^\s*- ", line) or (line.strip() and not line.startswith(" "))):
        in_entry = False
    if in_entry:
        for key, val in (("newName", name), ("digest", digest)):
            km = re.match(r"^(\s*)" + key + r":\s*\S+(\s+#.*)?$", line)
            if km:
                line = f"{km.group(1)}{key}: {val}{km.group(2) or ''}"
                done.add(key)
        if re.match(r"^\s*newTag:", line):
            sys.exit("the kiln entry has a newTag: remove it, kiln is pinned by digest only")
    out.append(line)
if done != {"newName", "digest"}:
    sys.exit(f"{path}: no `- name: kiln` entry with newName and digest lines under images:")
open(path, "w").write("\n".join(out))
PY
log "pinned kiln to $NAME@$DIGEST in $KFILE"
"$KILN_REPO_ROOT/scripts/check_manifests.py" --kustomize "$(dirname "$KFILE")" --require-pinned
