#!/usr/bin/env bash
# Hooks for scripts/conformance (docs/conformance.md):
#   conformance.sh vectors       run the shared vector tests (node --test)
#   conformance.sh elector-cmd   build quietly (output to stderr), print the elector command
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
ensure_deps() {
  if [ ! -d node_modules ]; then
    npm ci --no-audit --no-fund --loglevel=error >&2
  fi
}
case "${1:-}" in
  vectors)
    ensure_deps
    npx tsc -p tsconfig.test.json >&2
    node --test build/test/vectors.test.js
    ;;
  elector-cmd)
    ensure_deps
    npx tsc -p tsconfig.json >&2
    echo "$(command -v node) $here/dist/conformance.js"
    ;;
  *)
    echo "usage: $0 vectors|elector-cmd" >&2
    exit 2
    ;;
esac
