#!/usr/bin/env bash
# Hooks for scripts/conformance go (docs/conformance.md):
#   conformance.sh vectors       run the shared decision vectors with go test
#   conformance.sh elector-cmd   build the conformance elector (output to stderr), print its
#                                command line (one line, absolute path) on stdout
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
export GOFLAGS="-buildvcs=false ${GOFLAGS:-}"
case "${1:-}" in
  vectors)
    go test -count=1 -run '^TestVector' -v .
    ;;
  elector-cmd)
    go build -o "$here/bin/lease-elector" ./cmd/lease-elector >&2
    echo "$here/bin/lease-elector"
    ;;
  *)
    echo "usage: $0 vectors|elector-cmd" >&2
    exit 2
    ;;
esac
