#!/usr/bin/env bash
# Issue 18: kiln's containerfile `buildah build`, reproduced by hand, against variants of it that
# differ in one thing each, on the benchmark's workload. Run after bench/run_all.sh (it reuses
# that run's scratch space: the `cf` domain's candidate store, base store and build cache, and
# bare buildah's storage; the registry need not run: every base is already in the stores).
#
#   flock /tmp/kiln-heavy.lock bench/buildah_variants.sh [ROUNDS] [VARIANTS...]   (root)
#
#   kiln       kiln's invocation (`ps`/strace of `kiln serve`): new PID/mount/net namespaces, a
#              tmpfs on /run/kiln-build with the candidate's directory, the domain cache and the
#              source bind-mounted below it, buildah rootless as the build user with the
#              candidate's store and the domain's base store as overlay.imagestore, TMPDIR on
#              the domain cache. (unshare + setpriv stand in for kiln's ChildConfinement; the
#              hidden state/secret mounts are left out.)
#   kiln-userns  kiln's, but the user namespace buildah would create (0 -> the build user, 1..65536
#              -> its subuid/subgid range) is made before buildah starts (`unshare --user
#              --map-root-user --map-users/--map-groups`, via newuidmap/newgidmap) and buildah
#              runs as uid 0 in it with _CONTAINERS_USERNS_CONFIGURED set: it does not re-exec
#              itself (containers/storage pkg/unshare MaybeReexecUsingUserNamespace)
#   root-conf  the same namespaces and mounts, buildah as root on bare buildah's storage
#   rl-noconf  rootless as the build user, no PID/net namespace (a mount namespace for the paths)
#   bare       bare root buildah as bench/run_all.py runs it (own storage, own TMPDIR)
#
# Each build is a new one-function change (gen_go_service.py --mutate) of a private copy of the
# source, so every variant compiles once in its own Go build cache (never one another's change).
# Prints one line per build: the whole `buildah build` and its phases from buildah's step lines,
# timestamped as they arrive: start (to STEP 1), FROM+WORKDIR, COPY . ., the RUN (go build),
# FROM of the final stage, COPY --from, and COMMIT (to "Successfully tagged").
#
#   BENCH_WORK=/var/tmp/kiln-run-all  BENCH_REGISTRY_PORT=5000  KILN_BUILD_USER=kiln-build
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
W=${BENCH_WORK:-/var/tmp/kiln-run-all}
HOST=127.0.0.1:${BENCH_REGISTRY_PORT:-5000}
BU=${KILN_BUILD_USER:-kiln-build}
ROUNDS=${1:-3}
shift || true
VARIANTS=${*:-kiln root-conf bare rl-noconf}
S=$W/state/domains/cf
C=$S/candidates/c1/storage/rootless
UID_B=$(id -u "$BU")
GID_B=$(id -g "$BU")
BASES=$S/cache/bases/u$UID_B
SRC=$W/variants-src
M=/run/kiln-build
for d in "$C/root" "$BASES" "$W/storage"; do
  [ -d "$d" ] || { echo "buildah_variants.sh: $d is missing: run bench/run_all.sh first" >&2; exit 1; }
done
rm -rf "$SRC" && cp -a "$S/candidates/c1/src" "$SRC" && rm -rf "$SRC/.git"
mkdir -p "$W/tmp-variants" "$W/variants-logs" "$M"
FLAGS="--isolation chroot --layers=false --force-rm --pull=never --build-arg KILN_REGISTRY=$HOST"
ENVV="PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=$M/c/home"
ENVV+=" XDG_RUNTIME_DIR=$M/c/xdg TMPDIR=$M/cache LANG=C.UTF-8 STORAGE_DRIVER=overlay BUILDAH_ISOLATION=chroot"
MOUNTS="mount -t tmpfs -o mode=0755,size=1m kiln-build $M && mkdir -p $M/c $M/cache $M/bases"
MOUNTS+=" && mount --bind $C $M/c && mount --bind $S/cache/rootless $M/cache && mkdir -p $M/c/src"
MOUNTS+=" && mount --bind $SRC $M/c/src && mount --bind $BASES $M/bases && mount -o remount,bind,ro $M/bases"
ROOTLESS="buildah --root $M/c/root --runroot $M/c/run --storage-driver overlay"
ROOTLESS+=" --storage-opt overlay.imagestore=$M/bases build $FLAGS -f $M/c/src/Containerfile"
ROOTLESS+=" --iidfile $M/c/iid -t $HOST/bench/cf:variants $M/c/src"
ROOTBUILD="buildah --root $W/storage --runroot $W/runroot build $FLAGS"
AS_USER="setpriv --reuid $UID_B --regid $GID_B --init-groups env -i $ENVV"
SUBU=$(awk -F: -v u="$BU" '$1 == u {print $2 "," 1 "," $3; exit}' /etc/subuid)
SUBG=$(awk -F: -v u="$BU" '$1 == u {print $2 "," 1 "," $3; exit}' /etc/subgid)
USERNS="unshare --user --mount --map-root-user --map-users=$SUBU --map-groups=$SUBG env"
USERNS+=" _CONTAINERS_USERNS_CONFIGURED=done _CONTAINERS_ROOTLESS_UID=$UID_B _CONTAINERS_ROOTLESS_GID=$GID_B"

stamp() {  # prefixes each line with the ms since the build started
  local t0=$1 line
  while IFS= read -r line; do echo "$((($(date +%s%N) - t0) / 1000000)) $line"; done
}
phases() {
  awk '/\[1\/2\] STEP 1\//{s=$1} /\[1\/2\] STEP 3\//{c=$1} /\[1\/2\] STEP 4\//{r=$1}
       /\[2\/2\] STEP 1\//{f=$1} /\[2\/2\] STEP 2\//{c2=$1} /COMMIT/{m=$1} {e=$1}
       END{printf "start %d  from+workdir %d  copy %d  run %d  from2 %d  copy2 %d  commit %d", s, c-s, r-c, f-r, c2-f, m-c2, e-m}' "$1"
}

n=$(( $(date +%s) % 100000 ))
for round in $(seq 1 "$ROUNDS"); do
  for v in $VARIANTS; do
    n=$((n + 1))
    python3 "$ROOT/bench/gen_go_service.py" --out "$SRC" --mutate "$n" >/dev/null
    chmod -R a+rX "$SRC"
    log=$W/variants-logs/$v.$round
    t0=$(date +%s%N)
    case $v in
      kiln) unshare --pid --fork --mount --mount-proc --net sh -c \
              "ip link set lo up && $MOUNTS && exec $AS_USER $ROOTLESS" ;;
      kiln-userns) unshare --pid --fork --mount --mount-proc --net sh -c \
              "ip link set lo up && $MOUNTS && exec $AS_USER $USERNS $ROOTLESS" ;;
      root-conf) unshare --pid --fork --mount --mount-proc --net sh -c \
              "ip link set lo up && $MOUNTS && exec env -i $ENVV TMPDIR=$W/tmp-variants $ROOTBUILD -f $M/c/src/Containerfile -t $HOST/bench/bare:variants $M/c/src" ;;
      rl-noconf) unshare --mount sh -c "$MOUNTS && exec $AS_USER $ROOTLESS" ;;
      bare) env TMPDIR="$W/tmp-variants" $ROOTBUILD -f "$SRC/Containerfile" -t "$HOST/bench/bare:variants" "$SRC" ;;
      *) echo "buildah_variants.sh: unknown variant $v" >&2; exit 2 ;;
    esac 2>&1 | stamp "$t0" >"$log" || { echo "$v failed: see $log" >&2; exit 1; }
    printf '%-10s #%d %5d ms  %s\n' "$v" "$round" "$((($(date +%s%N) - t0) / 1000000))" "$(phases "$log")"
  done
done
