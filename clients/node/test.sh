#!/usr/bin/env bash
# Build, type-check and test the Node.js client (run from anywhere, e.g. the repo root:
# clients/node/test.sh). Integration tests start their own redis-server processes with the
# module (LEASE_MODULE, else target/debug, else target/release); without them the tests skip
# locally and FAIL under CI=true.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
echo "== node client: npm ci (from package-lock.json)"
npm ci --no-audit --no-fund --loglevel=error
echo "== node client: tsc build (dist/, with .d.ts)"
npx tsc -p tsconfig.json
echo "== node client: tsc --noEmit (strict, src + tests)"
npx tsc -p tsconfig.test.json --noEmit
echo "== node client: node --test"
rm -rf build
npx tsc -p tsconfig.test.json
# One test file at a time: the integration tests measure timing on a busy 2-core machine.
node --test --test-concurrency=1 --test-timeout=120000 build/test/*.test.js
