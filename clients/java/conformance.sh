#!/usr/bin/env bash
# Conformance hooks of the Java client (called by scripts/conformance java):
#   conformance.sh vectors       run the shared decision vectors (JUnit 5, VectorsTest)
#   conformance.sh elector-cmd   build quietly (output to stderr), print ONE line: the command
#                                that starts the conformance elector (absolute paths)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
case "${1:-}" in
  vectors)
    mvn -B -q test -Dtest=VectorsTest -Dsurefire.failIfNoSpecifiedTests=false
    ;;
  elector-cmd)
    {
      mvn -B -q -DskipTests package
      mvn -B -q dependency:build-classpath -Dmdep.outputFile="$here/target/classpath.txt" -Dmdep.includeScope=test
    } >&2
    # A snapshot of the compiled classes: a later build (mvn test) must not change the code
    # under an already running campaign (restarted electors load classes anew).
    snap="$here/target/conformance-classes"
    rm -rf "$snap" && mkdir -p "$snap"
    cp -r "$here/target/classes/." "$here/target/test-classes/." "$snap/"
    cp="$snap:$(cat "$here/target/classpath.txt")"
    # C1 only and a small heap: several electors start on a busy 2-core machine.
    echo "java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xmx96m -Dorg.slf4j.simpleLogger.showDateTime=true -Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS -cp $cp io.redislease.ConformanceElector"
    ;;
  *)
    echo "usage: $0 vectors|elector-cmd" >&2
    exit 2
    ;;
esac
