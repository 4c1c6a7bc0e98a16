#!/usr/bin/env bash
# Install the Node client the way a user would, outside the repository, and use it:
#   1. `npm pack` (prepack builds dist/), then for each ioredis version in IOREDIS_VERSIONS: a
#      fresh project installs the tarball + that ioredis, type-checks the README's examples
#      with tsc --strict, imports the package (ESM import and CommonJS require), and runs a
#      smoke test against a real redis-server with the module (lead, fenced write, release);
#   2. a fresh project installs the FOLDER as the README says (`npm install --install-links
#      /path/to/clients/node ioredis`: prepare builds it) and runs the same checks;
#   3. an ioredis outside the supported range (installed with --force) fails with an error that
#      names ioredis, at import or at construction, never later.
# Needs redis-server and the module (LEASE_MODULE, else target/debug|release); without them
# the smoke test is skipped locally and FAILS under CI=true. Network: the npm registry.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# Keep in step with SUPPORTED_IOREDIS (src/transport.ts) and peerDependencies.
versions=${IOREDIS_VERSIONS:-"5.3.0 5.6.0 5.8.0 5.10.0 5.11.1 6.0.0"}
refused=${IOREDIS_REFUSED:-"5.2.0"}
ts_version=$(node -p "require('$here/package.json').devDependencies.typescript")
types_version=$(node -p "require('$here/package.json').devDependencies['@types/node']")
work=$(mktemp -d "${TMPDIR:-/tmp}/redis-lease-install.XXXXXX")
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
npmq() { npm --no-audit --no-fund --loglevel=error "$@"; }

# --- the license shipped with the package is the repository's
cmp -s "$here/LICENSE" "$root/LICENSE" || { echo "clients/node/LICENSE differs from the repository's LICENSE" >&2; exit 1; }

# --- a server with the module for the smoke test
module=${LEASE_MODULE:-}
if [ -z "$module" ]; then
  for p in "$root/target/debug/libredis_lease.so" "$root/target/release/libredis_lease.so"; do
    [ -f "$p" ] && { module=$p; break; }
  done
fi
url=""
if command -v redis-server >/dev/null && [ -n "$module" ] && [ -f "$module" ]; then
  port=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
    --logfile "$work/redis.log" --loadmodule "$module" lease.grace-ms 0 &
  server_pid=$!
  for _ in $(seq 1 200); do
    redis-cli -p "$port" PING 2>/dev/null | grep -q PONG && break
    sleep 0.05
  done
  redis-cli -p "$port" PING | grep -q PONG || { echo "redis-server did not start" >&2; cat "$work/redis.log" >&2; exit 1; }
  url="redis://127.0.0.1:$port/"
elif [ "${CI:-}" = "true" ]; then
  echo "CI=true but redis-server or the module is missing" >&2
  exit 1
else
  echo "== no redis-server/module: the smoke test is skipped" >&2
fi

echo "== npm pack"
(cd "$here" && npmq pack --pack-destination "$work" >/dev/null)
tarball=$(ls "$work"/redis-lease-*.tgz)
tar -tzf "$tarball" | sort > "$work/contents"
for f in package/dist/index.js package/dist/index.d.ts package/cjs/index.cjs package/LICENSE package/README.md; do
  grep -qx "$f" "$work/contents" || { echo "tarball lacks $f" >&2; exit 1; }
done
if grep -E 'conformance|/test/|\.test\.' "$work/contents"; then echo "tarball ships test/conformance files" >&2; exit 1; fi

# The README's ```ts blocks, each a module, with declarations for the names they leave to the app.
node - "$here/README.md" "$work/examples" <<'EOF'
const fs = require("fs");
const [readme, out] = process.argv.slice(2);
const blocks = [...fs.readFileSync(readme, "utf8").matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]);
if (blocks.length < 2) throw new Error("README: fewer than 2 ts blocks");
fs.mkdirSync(out, { recursive: true });
const decls = [
  "declare function buildPart(step: number, o: { signal: AbortSignal }): Promise<string>;",
  "declare function build(lease: import('redis-lease').LeaderContext): Promise<string>;",
  "declare const redis: import('ioredis').Redis;",
  "declare const key: string;",
  "declare const ttlMs: number;",
  "declare const registry: import('prom-client').Registry;",
];
blocks.forEach((b, i) => {
  // A block that makes its own `redis` must not get the declared one.
  const own = /\bconst redis\b/.test(b);
  const d = decls.filter((l) => !(own && l.includes("const redis"))).filter((l) => !new RegExp(`\\b(const|function) ${l.match(/(?:const|function) (\w+)/)[1]}\\b`).test(b));
  fs.writeFileSync(`${out}/readme-${i}.ts`, d.join("\n") + "\n" + b + "\nexport {};\n");
});
EOF

write_project() { # dir
  mkdir -p "$1"
  cat > "$1/package.json" <<'EOF'
{ "name": "fresh-app", "version": "1.0.0", "private": true, "type": "module" }
EOF
  cat > "$1/tsconfig.json" <<'EOF'
{ "compilerOptions": { "target": "ES2022", "module": "NodeNext", "moduleResolution": "NodeNext",
  "strict": true, "noEmit": true, "skipLibCheck": false, "types": ["node"] }, "include": ["*.ts"] }
EOF
  cat > "$1/smoke.mjs" <<'EOF'
// Lead once with the application's own ioredis instance, write through the fence, release.
import { Redis } from "ioredis";
import { Elector, FencedError } from "redis-lease";
const url = process.argv[2];
const redis = new Redis(url);
const key = `install-test:${process.pid}`;
const quiet = { debug() {}, info() {}, warn() {}, error() {} };
const e = new Elector({ redis, key, ttlMs: 2000, logger: quiet });
const timer = setTimeout(() => { console.error("smoke: no leadership within 10 s"); process.exit(1); }, 10_000);
const out = await e.run(async (lease) => {
  const r = await lease.fence(redis, "SET", `${key}:res`, "v");
  if (r !== "OK") throw new Error(`fenced SET replied ${r}`);
  return lease.token;
});
clearTimeout(timer);
if (out.kind !== "task_finished") throw new Error(`run ended ${out.kind}`);
await e.close();
try {
  await (await import("redis-lease")).fence(redis, key, out.value, "SET", `${key}:res`, "stale");
  throw new Error("a stale token was not fenced");
} catch (err) {
  if (!(err instanceof FencedError)) throw err;
}
if ((await redis.get(`${key}:res`)) !== "v") throw new Error("the stale write was applied");
redis.disconnect();
console.log("smoke ok");
EOF
  cat > "$1/require.cjs" <<'EOF'
// CommonJS: require() either loads the package (Node with require(esm)) or says to use import().
try {
  const m = require("redis-lease");
  if (typeof m.Elector !== "function") throw new Error("require('redis-lease') has no Elector");
  console.log("require ok");
} catch (e) {
  if (!/ESM only.*import\(\)/.test(String(e && e.message))) throw e;
  console.log("require refused clearly:", e.message);
}
EOF
}

check_project() { # dir
  (cd "$1" && cp "$work"/examples/*.ts . && npx tsc -p tsconfig.json)
  (cd "$1" && node -e 'import("redis-lease").then((m) => { if (typeof m.Elector !== "function") process.exit(1); })')
  (cd "$1" && node require.cjs)
  if [ -n "$url" ]; then (cd "$1" && node smoke.mjs "$url"); fi
}

for v in $versions; do
  echo "== tarball + ioredis@$v"
  d="$work/app-$v"
  write_project "$d"
  (cd "$d" && npmq install "$tarball" "ioredis@$v" "prom-client@15" "typescript@$ts_version" "@types/node@$types_version")
  got=$(cd "$d" && node -p 'require("ioredis/package.json").version')
  [ "$got" = "$v" ] || { echo "installed ioredis $got, not $v" >&2; exit 1; }
  check_project "$d"
done

echo "== folder install (npm install --install-links $here ioredis)"
d="$work/app-folder"
write_project "$d"
(cd "$d" && npmq install --install-links "$here" ioredis "prom-client@15" "typescript@$ts_version" "@types/node@$types_version")
[ -f "$d/node_modules/redis-lease/dist/index.js" ] || { echo "folder install: dist/ not built" >&2; exit 1; }
check_project "$d"

for v in $refused; do
  echo "== ioredis@$v is refused (at import or construction)"
  d="$work/app-refused-$v"
  write_project "$d"
  (cd "$d" && npmq install --force "$tarball" "ioredis@$v")
  (cd "$d" && node -e '
    const named = (e) => /ioredis/.test(String(e && e.message));
    import("redis-lease").then(({ Elector }) => {
      try { new Elector({ redis: "redis://127.0.0.1:1/", key: "k", ttlMs: 1000 }); }
      catch (e) { if (named(e)) { console.log("refused at construction:", e.message); return; } throw e; }
      throw new Error("an unsupported ioredis was accepted");
    }, (e) => { if (!named(e)) throw e; console.log("refused at import:", e.message.split("\n")[0]); })')
done
echo "install-test: ok"
