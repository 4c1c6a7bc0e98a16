#!/usr/bin/env bash
# Builds the Redisson peer elector quietly (all build output to stderr) and prints ONE line:
# the command that starts it (absolute paths), for `lease-harness run --elector-cmd`.
#
#   peers/redisson/elector-cmd.sh rlock|fenced
#
# e.g. CHAOS_PROFILE=debug scripts/chaos --elector-cmd "$(peers/redisson/elector-cmd.sh rlock)" \
#        --no-fence --runs 2 --seconds 15 --ttl-ms 2000
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lock=${1:-}
case "$lock" in
  rlock|fenced) ;;
  *) echo "usage: $0 rlock|fenced" >&2; exit 2 ;;
esac
cd "$here"
out="$here/target/elector"
{
  mvn -B -q -DskipTests package
  mvn -B -q dependency:build-classpath -Dmdep.outputFile="$here/target/classpath.txt" -Dmdep.includeScope=runtime
  # A snapshot jar of the compiled classes: a later build must not change the code under a
  # running campaign (restarted electors load their classes anew).
  rm -rf "$out" && mkdir -p "$out"
  jar cf "$out/elector.jar" -C "$here/target/classes" .
} >&2
# C1 only, serial GC, a small heap: five JVMs start at once on a busy 2-core machine. These are
# the harness's resource choices, not Redisson settings.
opts="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xmx128m -Dorg.slf4j.simpleLogger.showDateTime=true -Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS"
echo "java $opts -cp $out/elector.jar:$(cat "$here/target/classpath.txt") io.redislease.peers.redisson.RedissonElector --lock $lock"
