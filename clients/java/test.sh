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
# The jar names its JPMS module (issue 28): module-path users depend on `io.redislease`.
jar=$(ls target/redis-lease-client-*.jar | grep -v -e sources -e javadoc | head -1)
unzip -p "$jar" META-INF/MANIFEST.MF | tr -d '\r' | grep -qx 'Automatic-Module-Name: io.redislease' \
  || { echo "test.sh: $jar has no Automatic-Module-Name: io.redislease" >&2; exit 1; }
