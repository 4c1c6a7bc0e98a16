#!/usr/bin/env bash
# Builds the Curator LeaderLatch peer elector quietly (all build output to stderr) and prints ONE line:
# the command that starts it (absolute paths), for `lease-harness run --elector-cmd`.
#
#   peers/curator/elector-cmd.sh
#
# The harness has no ZooKeeper backend yet: peers/hand-campaign drives it against
# peers/zookeeper/server (README.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
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
# the harness's resource choices, not Curator settings.
opts="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xmx128m -Dorg.slf4j.simpleLogger.showDateTime=true -Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS"
echo "java $opts -cp $out/elector.jar:$(cat "$here/target/classpath.txt") io.redislease.peers.curator.CuratorElector"
