#!/usr/bin/env bash
# Fails when a tracked C++ file differs from .clang-format (run from scripts/test.sh, i.e. CI).
# Fix with: scripts/check_format.sh --fix
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
fix=0; [ "${1:-}" = "--fix" ] && fix=1
bad=()
while IFS= read -r f; do
  if [ "$fix" = 1 ]; then clang-format -i "$f"; continue; fi
  clang-format "$f" | cmp -s - "$f" || bad+=("$f")
done < <(git ls-files '*.cc' '*.h')
if [ "${#bad[@]}" -gt 0 ]; then
  echo "check_format: ${#bad[@]} file(s) differ from .clang-format (run scripts/check_format.sh --fix):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check_format: every C++ file matches .clang-format"
