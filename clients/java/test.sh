#!/usr/bin/env bash
# The Java client's full check: resolves the pinned dependencies (first run downloads them into
# ~/.m2), compiles with -Xlint:all -Werror (main and tests), runs every test: the shared
# decision vectors and the integration tests against real redis-server processes with the
# module loaded (skipped when the module or redis-server is missing, failing under CI=true).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
# -ntp: no download progress; the Surefire summary ("Tests run: ...") stays visible.
mvn -B -ntp verify
