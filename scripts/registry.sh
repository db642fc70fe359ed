#!/usr/bin/env bash
# Runs a local docker-registry (distribution 2.8) for kiln's tests, demo and benchmarks.
#
#   scripts/registry.sh start  [--dir DIR] [--port PORT] [--tls]
#   scripts/registry.sh stop   [--dir DIR]
#   scripts/registry.sh status [--dir DIR]
#
# Binds 127.0.0.1:PORT (default 5000) only. htpasswd (bcrypt) auth for user `kiln` with a
# random password made on first start and kept only in DIR/password (mode 600). Writes
# DIR/auth.json (docker config.json, mode 600), DIR/registry.pid, DIR/registry.log and, with
# --tls, a CA (DIR/ca.pem) and a server certificate for IP 127.0.0.1 signed by it; also
# DIR/certs/ca.crt, usable as buildah/skopeo --cert-dir. Deletes are enabled.
# `start` returns once GET /v2/ answers 401; it is a no-op when already running.
# On success `start` and `status` print key=value lines: url, host, auth_file, ca_file, pid.
# The password is never printed.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

cmd=${1:-}; [ -n "$cmd" ] || usage; shift
DIR=${KILN_REGISTRY_DIR:-/var/tmp/kiln-registry}
PORT=5000; TLS=0; PORT_SET=0; TLS_SET=0
while [ $# -gt 0 ]; do
  case $1 in
    --dir) DIR=$2; shift 2 ;;
    --port) PORT=$2; PORT_SET=1; shift 2 ;;
    --tls) TLS=1; TLS_SET=1; shift ;;
    -h|--help) usage ;;
    *) die "unknown argument: $1" ;;
  esac
done
[[ "$PORT" =~ ^[0-9]+$ ]] && [ "$PORT" -ge 1 ] && [ "$PORT" -le 65535 ] || die "bad port: $PORT"
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
PIDFILE=$DIR/registry.pid
STATEFILE=$DIR/registry.state   # PORT=... TLS=... of the running instance

# Loads the running instance's port/tls into RUN_PORT/RUN_TLS.
load_state() {
  RUN_PORT=""; RUN_TLS=""
  [ -f "$STATEFILE" ] || return 0
  RUN_PORT=$(sed -n 's/^PORT=//p' "$STATEFILE")
  RUN_TLS=$(sed -n 's/^TLS=//p' "$STATEFILE")
}

print_info() {  # PORT TLS
  local scheme=http ca=""
  [ "$2" = 1 ] && { scheme=https; ca=$DIR/ca.pem; }
  echo "url=$scheme://127.0.0.1:$1"
  echo "host=127.0.0.1:$1"
  echo "auth_file=$DIR/auth.json"
  echo "ca_file=$ca"
  echo "pid=$(cat "$PIDFILE")"
}

probe() {  # PORT TLS -> prints HTTP code of GET /v2/
  if [ "$2" = 1 ]; then
    http_code "https://127.0.0.1:$1/v2/" --cacert "$DIR/ca.pem"
  else
    http_code "http://127.0.0.1:$1/v2/"
  fi
}

ensure_credentials() {
  umask 077
  if [ ! -s "$DIR/password" ]; then
    openssl rand -hex 24 >"$DIR/password"
  fi
  chmod 600 "$DIR/password"
  # htpasswd reads the password on stdin (-i), never from argv.
  htpasswd -B -i -c "$DIR/htpasswd" kiln <"$DIR/password" 2>/dev/null
  chmod 600 "$DIR/htpasswd"
  local auth
  auth=$( { printf 'kiln:'; tr -d '\n' <"$DIR/password"; } | base64 -w0)
  printf '{"auths":{"127.0.0.1:%s":{"auth":"%s"}}}\n' "$PORT" "$auth" >"$DIR/auth.json.tmp"
  chmod 600 "$DIR/auth.json.tmp"
  mv "$DIR/auth.json.tmp" "$DIR/auth.json"
  [ -s "$DIR/http_secret" ] || openssl rand -hex 16 >"$DIR/http_secret"
  chmod 600 "$DIR/http_secret"
}

ensure_tls() {
  umask 077
  local tls=$DIR/tls
  mkdir -p "$tls" "$DIR/certs"
  if [ ! -s "$tls/server.pem" ] || [ ! -s "$DIR/ca.pem" ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=kiln test CA" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -keyout "$tls/ca.key" -out "$DIR/ca.pem" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
      -keyout "$tls/server.key" -out "$tls/server.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' \
      >"$tls/server.ext"
    openssl x509 -req -in "$tls/server.csr" -CA "$DIR/ca.pem" -CAkey "$tls/ca.key" \
      -CAcreateserial -days 3650 -extfile "$tls/server.ext" -out "$tls/server.pem" 2>/dev/null
  fi
  chmod 644 "$DIR/ca.pem"
  cp "$DIR/ca.pem" "$DIR/certs/ca.crt"
}

write_config() {
  local tls_block=""
  if [ "$TLS" = 1 ]; then
    tls_block="  tls:
    certificate: $DIR/tls/server.pem
    key: $DIR/tls/server.key"
  fi
  umask 077
  cat >"$DIR/config.yml" <<EOF
version: 0.1
log:
  level: info
  formatter: text
storage:
  filesystem:
    rootdirectory: $DIR/data
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: 127.0.0.1:$PORT
  secret: $(cat "$DIR/http_secret")
$tls_block
auth:
  htpasswd:
    realm: kiln-registry
    path: $DIR/htpasswd
EOF
}

do_start() {
  require_cmd docker-registry htpasswd openssl curl base64
  load_state
  if pid_alive "$PIDFILE" docker-registry; then
    if { [ "$PORT_SET" = 1 ] && [ "$PORT" != "$RUN_PORT" ]; } ||
       { [ "$TLS_SET" = 1 ] && [ "$TLS" != "$RUN_TLS" ]; }; then
      die "registry in $DIR already runs on port $RUN_PORT tls=$RUN_TLS; stop it first"
    fi
    print_info "$RUN_PORT" "$RUN_TLS"
    return 0
  fi
  local t0; t0=$(now_ms)
  case $(probe "$PORT" 0)$(probe "$PORT" 1) in
    000000) ;;
    *) die "127.0.0.1:$PORT is already in use by another process" ;;
  esac
  mkdir -p "$DIR/data"
  ensure_credentials
  [ "$TLS" = 1 ] && ensure_tls
  write_config
  : >>"$DIR/registry.log"
  # The daemon outlives this script: it must not keep descriptors it inherited, such as the one
  # `flock /tmp/kiln-heavy.lock` holds the lock on (a registry left running would hold the lock).
  (
    for fd in /proc/$BASHPID/fd/*; do
      n=${fd##*/}
      if [[ $n -gt 2 ]]; then eval "exec $n>&-" 2>/dev/null || true; fi
    done
    exec setsid docker-registry serve "$DIR/config.yml" >>"$DIR/registry.log" 2>&1 </dev/null
  ) &
  echo $! >"$PIDFILE"
  printf 'PORT=%s\nTLS=%s\n' "$PORT" "$TLS" >"$STATEFILE"
  local code
  for _ in $(seq 1 150); do
    code=$(probe "$PORT" "$TLS")
    [ "$code" = 401 ] && break
    if ! pid_alive "$PIDFILE"; then
      tail -n 20 "$DIR/registry.log" >&2
      rm -f "$PIDFILE"
      die "docker-registry exited during start-up (log: $DIR/registry.log)"
    fi
    sleep 0.1
  done
  if [ "$code" != 401 ]; then
    do_stop >/dev/null 2>&1 || true
    die "registry did not answer 401 on /v2/ within 15 s (last code $code)"
  fi
  log "registry ready on 127.0.0.1:$PORT (tls=$TLS) in $(( $(now_ms) - t0 )) ms"
  print_info "$PORT" "$TLS"
}

do_stop() {
  if ! pid_alive "$PIDFILE" docker-registry; then
    rm -f "$PIDFILE"
    log "registry in $DIR not running"
    return 0
  fi
  local pid; pid=$(cat "$PIDFILE")
  kill "$pid"
  for _ in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  rm -f "$PIDFILE"
  log "registry stopped (pid $pid)"
}

do_status() {
  load_state
  if pid_alive "$PIDFILE" docker-registry; then
    local code; code=$(probe "$RUN_PORT" "$RUN_TLS")
    print_info "$RUN_PORT" "$RUN_TLS"
    echo "v2=$code"
    [ "$code" = 401 ]
  else
    echo "not running" >&2
    return 1
  fi
}

case $cmd in
  start) do_start ;;
  stop) do_stop ;;
  status) do_status ;;
  *) usage ;;
esac
