#!/usr/bin/env bash
# Writes tests/data/main-9f3d1d5.rdb: leases in several states, saved by a given build of the
# module. The committed file was made by the module built from commit 9f3d1d5 (main before
# the engine redesign) on Redis 7.0.15 (RDB version 10):
#   git worktree add /tmp/old 9f3d1d5 && (cd /tmp/old && cargo build -p redis-lease)
#   tests/data/make-rdb-fixture.sh /tmp/old/target/debug/libredis_lease.so
# It prints the facts tests/persistence_compat.rs asserts (tokens, grants, expiry).
set -euo pipefail
so=${1:?usage: make-rdb-fixture.sh path/to/libredis_lease.so}
out=$(cd "$(dirname "$0")" && pwd)/main-9f3d1d5.rdb
dir=$(mktemp -d)
port=${FIXTURE_PORT:-6411}
redis-server --port "$port" --bind 127.0.0.1 --save "" --dir "$dir" --logfile "$dir/log" \
  --daemonize yes --loadmodule "$so" lease.grace-ms 0 lease.max-ttl 2147483647
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
cli() { redis-cli -p "$port" "$@"; }
for _ in $(seq 50); do cli ping >/dev/null 2>&1 && break; sleep 0.1; done
# Raw RESP so an owner can carry NUL and non-UTF-8 bytes.
resp() { # args as printf-%b strings
  local msg="*$#\r\n" a
  for a in "$@"; do
    local bytes; bytes=$(printf '%b' "$a" | wc -c)
    msg+="\$$bytes\r\n$a\r\n"
  done
  local line
  exec 3<>/dev/tcp/127.0.0.1/"$port"; printf '%b' "$msg" >&3; read -r -t 5 line <&3; exec 3>&-
  echo "${line%$'\r'}"
}
echo "time_ms_before: $(cli TIME | paste -sd' ' | awk '{printf "%d%03d\n", $1, int($2/1000)}')"
echo "held: $(cli LEASE.ACQUIRE held holder-1 2147483647)"
t=$(cli LEASE.ACQUIRE released rel-owner 10000); echo "released: $t $(cli LEASE.RELEASE released rel-owner "$t")"
echo "expired: $(cli LEASE.ACQUIRE expired exp-owner 50)"
t=$(cli LEASE.ACQUIRE regranted first 10000); cli LEASE.RELEASE regranted first "$t" >/dev/null
echo "regranted: $t $(cli LEASE.ACQUIRE regranted second 2147483647)"
echo "binary: $(resp 'LEASE.ACQUIRE' 'binary' 'own\x00\xff\r\nx' '2147483647')"
echo "db3: $(cli -n 3 LEASE.ACQUIRE other db3-owner 2147483647)"
cli SET plain value >/dev/null
echo "time_ms_after: $(cli TIME | paste -sd' ' | awk '{printf "%d%03d\n", $1, int($2/1000)}')"
sleep 0.3 # `expired` lapses (its timer frees it)
for k in held released expired regranted binary; do echo "$k: $(cli LEASE.INFO $k | paste -sd' ')"; done
echo "other(db3): $(cli -n 3 LEASE.INFO other | paste -sd' ')"
cli SAVE >/dev/null
cp "$dir/dump.rdb" "$out"
echo "wrote $out ($(wc -c <"$out") bytes)"
