#!/usr/bin/env bash
# The remote builder transport's round trip over loopback mutual TLS (issue 20; see
# pool/remote_builder_bench.cc). Makes throw-away certificates, runs N round trips.
#   BENCH=build/pool/remote_builder_bench N=200 bench/remote_builder_bench.sh
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BENCH="${BENCH:-$ROOT/build/pool/remote_builder_bench}"
PKI="$(mktemp -d)"
trap 'rm -rf "$PKI"' EXIT
cd "$PKI"
for pair in "scheduler-ca scheduler" "worker-ca worker"; do
  set -- $pair
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.crt" -subj "/CN=$1" -days 1 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout "$2.key" -out "$2.csr" -subj "/CN=$2" 2>/dev/null
  openssl x509 -req -in "$2.csr" -CA "$1.crt" -CAkey "$1.key" -CAcreateserial -out "$2.crt" -days 1 2>/dev/null
done
"$BENCH" "$PKI" "${N:-200}"
