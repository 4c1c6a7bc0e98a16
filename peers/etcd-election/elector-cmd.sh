#!/usr/bin/env bash
# Builds the etcd-election peer elector quietly (build output to stderr) and prints ONE line:
# the command that starts it (absolute path), for `--elector-cmd`.
#
#   peers/etcd-election/elector-cmd.sh
#
# The harness has no etcd backend yet: peers/hand-campaign drives it against peers/etcd/server
# (README.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
mkdir -p target
# A fresh binary per build: a running campaign keeps the one it started with (restarted
# electors exec the path anew).
go build -o target/etcd-election.new . >&2
mv -f target/etcd-election.new target/etcd-election
echo "$here/target/etcd-election"
