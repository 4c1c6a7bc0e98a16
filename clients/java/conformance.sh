#!/usr/bin/env bash
# Conformance hooks of the Java client (called by scripts/conformance java):
#   conformance.sh vectors       run the shared decision vectors (JUnit 5, VectorsTest)
#   conformance.sh elector-cmd   build quietly (all output to stderr), print ONE line: the command
#                                that starts the conformance elector (absolute paths)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$here"
case "${1:-}" in
  vectors)
    mvn -B -q test -Dtest=VectorsTest -Dsurefire.failIfNoSpecifiedTests=false
    ;;
  elector-cmd)
    out="$here/target/conformance"
    stamp="$out/.built"
    # Reused while no source or the pom changed since it was built: scripts/test starts the
    # elector of each campaign anew, and every build (mvn package + the CDS training run)
    # costs about a minute on the 2-core machine.
    if [ -e "$stamp" ] && [ -s "$out/elector.cmd" ] && \
       [ -z "$(find "$here/pom.xml" "$here/src" -newer "$stamp" -print -quit)" ]; then
      cat "$out/elector.cmd"
      exit 0
    fi
    {
      mvn -B -q -DskipTests package
      mvn -B -q dependency:build-classpath -Dmdep.outputFile="$here/target/classpath.txt" -Dmdep.includeScope=test
      # A snapshot jar of the compiled classes: a later build (mvn test) must not change the
      # code under an already running campaign (restarted electors load classes anew).
      rm -rf "$out" && mkdir -p "$out/classes"
      cp -r "$here/target/classes/." "$here/target/test-classes/." "$out/classes/"
      jar cf "$out/elector.jar" -C "$out/classes" .
    } >&2
    cp="$out/elector.jar:$(cat "$here/target/classpath.txt")"
    # C1 only and a small heap: several electors start at once on a busy 2-core machine.
    opts="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xmx96m -Dorg.slf4j.simpleLogger.showDateTime=true -Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS"
    # Class-data sharing archive from a short training run against a throw-away redis-server:
    # a cold JVM with Lettuce/Netty needs ~1-2 s to its first grant, CDS cuts ~40 % of that.
    # Without redis-server or the module the elector simply runs without the archive.
    module=${LEASE_MODULE:-}
    for m in "$root/target/release/libredis_lease.so" "$root/target/debug/libredis_lease.so"; do
      [ -n "$module" ] || { [ -f "$m" ] && module=$m; }
    done
    jsa="$out/elector.jsa"
    if [ -n "$module" ] && command -v redis-server >/dev/null; then
      {
        port=$((30000 + RANDOM % 20000))
        redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$out" \
          --loadmodule "$module" lease.grace-ms 0 --daemonize no >"$out/train-redis.log" 2>&1 &
        rpid=$!
        sleep 0.5
        # shellcheck disable=SC2086
        java -XX:ArchiveClassesAtExit="$jsa" -Xlog:cds=off -Xlog:cds+dynamic=off $opts -cp "$cp" \
          io.redislease.ConformanceElector --id train --redis "redis://127.0.0.1:$port/" \
          --resource 127.0.0.1:9 --out "$out/train.jsonl" --ttl-ms 1000 --key train \
          --mode safe 2>"$out/train.log" &
        jpid=$!
        sleep 4
        kill -TERM "$jpid" 2>/dev/null || true
        wait "$jpid" || true
        kill "$rpid" 2>/dev/null || true
        wait "$rpid" 2>/dev/null || true
      } >&2
    fi
    if [ -s "$jsa" ]; then
      opts="-XX:SharedArchiveFile=$jsa -Xlog:cds=off -Xlog:cds+dynamic=off $opts"
    fi
    echo "java $opts -cp $cp io.redislease.ConformanceElector" >"$out/elector.cmd"
    touch "$stamp"
    cat "$out/elector.cmd"
    ;;
  *)
    echo "usage: $0 vectors|elector-cmd" >&2
    exit 2
    ;;
esac
