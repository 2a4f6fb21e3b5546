#!/usr/bin/env bash
# Installs the locked dependencies on a fresh checkout (no node_modules yet). An existing node_modules is
# trusted: after pulling dependency changes run `npm ci` yourself.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ ! -d node_modules ]]; then
  echo "ensure-deps: no node_modules; running npm ci" >&2
  npm ci --no-audit --no-fund >&2
fi
