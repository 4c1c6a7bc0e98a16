#!/usr/bin/env bash
# The Go client's full check, as CI runs it from the repo root: clients/go/test.sh
# Downloads the pinned modules (go.sum), runs go vet and go test -race on the module: package
# lease (shared vectors, real redis-server processes with the module loaded), the optional
# Prometheus package leaseprom and the conformance elector. Integration tests find the module
# .so via $LEASE_MODULE or the repo's target/{debug,release}/libredis_lease.so; without it
# they skip locally and fail with CI=true.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
export GOFLAGS="-buildvcs=false ${GOFLAGS:-}"
go version
LEASE_MEASURE_FILE=$(mktemp)
export LEASE_MEASURE_FILE
trap 'rm -f "$LEASE_MEASURE_FILE"' EXIT
echo "== go client"
go mod download
go vet ./...
go test -race -count=1 ./...
echo "== go client: measured"
cat "$LEASE_MEASURE_FILE"
