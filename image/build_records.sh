#!/bin/sh
# Runs in the build stage of image/Containerfile: build_records.sh BINARY OUTDIR
#   OUTDIR/runtime-packages.txt  the Debian packages that provide the binary's shared libraries
#   OUTDIR/build-versions.txt    the library versions the binary was compiled against
#                                (Debian package versions and the headers' own version macros)
set -eu
bin=$1; out=$2
mkdir -p "$out"
# ldd -> library paths -> owning packages. bookworm still ships libraries under /lib and
# /usr/lib (merged /usr): ask dpkg for the path as ldd prints it, then the other spelling.
ldd "$bin" | awk '/=> \//{print $3}' | while read -r lib; do
  real=$(dirname "$lib")/$(basename "$(readlink -f "$lib")")
  for p in "$lib" "$real" "${lib#/usr}" "/usr$lib" "${real#/usr}" "/usr$real"; do
    pkg=$(dpkg-query -S "$p" 2>/dev/null | head -n1 | cut -d: -f1) && [ -n "$pkg" ] && { echo "$pkg"; break; }
  done || true
done | sort -u >"$out/runtime-packages.txt"
[ -s "$out/runtime-packages.txt" ] || { echo "no runtime packages found for $bin" >&2; exit 1; }
# The headers' own version macros, MACRO=value as the preprocessor sees them, from ONE
# preprocessor run: each name goes in as a string literal after a marker so that only the value
# is macro-expanded.
macros() {  # HEADER:MACRO[,MACRO...]...
  for spec in "$@"; do printf '#include <%s>\n' "${spec%%:*}"; done
  for spec in "$@"; do
    for m in $(echo "${spec#*:}" | tr ',' ' '); do printf 'kiln_macro_value "%s"=%s\n' "$m" "$m"; done
  done
}
{
  echo "[compiled against]"
  dpkg-query -W -f '${Package}=${Version}\n' libcaf-dev libboost1.81-dev libssl-dev \
    nlohmann-json3-dev libspdlog-dev libfmt-dev zlib1g-dev libzstd-dev g++ libstdc++-12-dev libc6-dev
  macros caf/config.hpp:CAF_VERSION boost/version.hpp:BOOST_LIB_VERSION \
    openssl/opensslv.h:OPENSSL_VERSION_TEXT \
    nlohmann/json.hpp:NLOHMANN_JSON_VERSION_MAJOR,NLOHMANN_JSON_VERSION_MINOR,NLOHMANN_JSON_VERSION_PATCH \
    spdlog/version.h:SPDLOG_VER_MAJOR,SPDLOG_VER_MINOR,SPDLOG_VER_PATCH zlib.h:ZLIB_VERSION |
    g++ -std=c++17 -E -P -x c++ - | sed -n 's/^kiln_macro_value "\([A-Za-z0-9_]*\)"=/\1=/p'
  echo "[runtime libraries]"
  sed 's/^/package /' "$out/runtime-packages.txt"
} >"$out/build-versions.txt"
