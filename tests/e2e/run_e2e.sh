#!/usr/bin/env bash
# Runs the end-to-end suite: installs the official MCP SDK (npm) if needed, then node --test.
#   tests/e2e/run_e2e.sh [path/to/kiln] [test file, default kiln_e2e.test.mjs]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export KILN="${1:-${KILN:-$here/../../build/app/kiln}}"
cd "$here"
[ -d node_modules/@modelcontextprotocol/sdk ] && [ -d node_modules/@modelcontextprotocol/client ] || npm install --no-audit --no-fund --loglevel=error
exec node --test --test-concurrency=1 "${2:-kiln_e2e.test.mjs}"
