# shellcheck shell=bash
# Shared shell helpers for kiln's scripts. Source it: `. "$(dirname "$0")/lib.sh"`.
# Nothing here prints secrets; helpers that handle a password read it from a file or stdin.

KILN_SCRIPTS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export KILN_REPO_ROOT; KILN_REPO_ROOT="$(cd "$KILN_SCRIPTS_DIR/.." && pwd)"

log() { printf '%s %s\n' "[$(date +%H:%M:%S)]" "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# now_ms: wall clock in milliseconds.
now_ms() { date +%s%3N; }

# require_cmd CMD...: fail with a clear message if a command is missing.
require_cmd() {
  local c
  for c in "$@"; do
    command -v "$c" >/dev/null 2>&1 || die "missing command '$c' (run scripts/setup.sh)"
  done
}

# pid_alive PIDFILE [NAME]: true if the pid in PIDFILE runs (and its comm is NAME, when given).
pid_alive() {
  local pidfile=$1 name=${2:-} pid
  [ -s "$pidfile" ] || return 1
  pid=$(cat "$pidfile")
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  # A killed process that its new parent has not reaped yet is a zombie: not alive.
  local state
  state=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ] || return 1
  if [ -n "$name" ]; then
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ] || return 1
  fi
  return 0
}

# http_code URL [CURL_ARGS...]: prints the HTTP status code (000 when unreachable).
http_code() {
  local url=$1; shift
  curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$@" "$url" 2>/dev/null || true
}

# median: reads numbers (one per line) on stdin, prints the median ("n/a" if none).
median() {
  sort -g | awk '{a[NR]=$1} END {
    if (NR == 0) { print "n/a"; exit }
    if (NR % 2) printf "%.3f\n", a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2 }'
}
