/**
 * The conformance elector's `redis+sentinel://` URLs (docs/conformance.md): under
 * `--topology sentinel` the harness hands every elector
 *
 *   redis+sentinel://[[user]:password@]host:port[,host:port...]/master-name[/db]
 *
 * the scheme of the Rust client (client/src/sentinel.rs), which ioredis does not parse. This
 * turns it into ioredis' own Sentinel options (`sentinels` + `name`, transport.ts). Part of
 * the conformance elector only: not shipped (package.json "files" leaves out
 * dist/conformance*), not an API of the package.
 */
import type { RedisOptions } from "ioredis";

export const SENTINEL_SCHEME = "redis+sentinel://";

/**
 * ioredis options for a `redis+sentinel://` URL; `null` for a URL of any other scheme (used
 * as before, as a URL). Throws an Error whose message is one line for a malformed one.
 *
 * Credentials and db apply to the primary, as in the Rust client: the Sentinels are asked
 * without credentials (ioredis takes theirs from `sentinelPassword`, which stays unset).
 */
export function sentinelOptions(url: string): RedisOptions | null {
  if (!url.startsWith(SENTINEL_SCHEME)) return null;
  const rest = url.slice(SENTINEL_SCHEME.length);
  const slash = rest.indexOf("/");
  if (slash < 0) throw new Error(`sentinel url needs /master-name after the hosts (${SENTINEL_SCHEME}h:p,h:p/name)`);
  const authority = rest.slice(0, slash);
  const path = rest.slice(slash + 1);
  // The last '@': a password may itself contain '@' (written as is, like the Rust parser).
  const at = authority.lastIndexOf("@");
  const userinfo = at < 0 ? null : authority.slice(0, at);
  const hosts = at < 0 ? authority : authority.slice(at + 1);
  const sentinels: { host: string; port: number }[] = [];
  for (const h of hosts.split(",").filter((h) => h !== "")) {
    const colon = h.lastIndexOf(":");
    if (colon < 0) throw new Error(`sentinel address ${JSON.stringify(h)} needs host:port`);
    const portText = h.slice(colon + 1);
    const port = /^\d{1,5}$/.test(portText) ? Number(portText) : NaN;
    if (!(port >= 0 && port <= 65535)) throw new Error(`sentinel address ${JSON.stringify(h)}: bad port`);
    // `[::1]:26379`: ioredis wants the bare IPv6 address.
    const host = h.slice(0, colon).replace(/^\[(.*)\]$/, "$1");
    if (host === "") throw new Error(`sentinel address ${JSON.stringify(h)}: empty host`);
    sentinels.push({ host, port });
  }
  if (sentinels.length === 0) throw new Error("sentinel url names no sentinel");
  const [name = "", db, ...extra] = path.replace(/\/+$/, "").split("/");
  if (name === "") throw new Error("sentinel url needs a master name");
  if (extra.length > 0) throw new Error(`sentinel url: unexpected path after the db: ${JSON.stringify(path)}`);
  const out: RedisOptions = { sentinels, name };
  if (db !== undefined && db !== "") {
    if (!/^\d+$/.test(db)) throw new Error(`sentinel url: bad db ${JSON.stringify(db)}`);
    out.db = Number(db);
  }
  if (userinfo !== null) {
    // The scheme's form is `[user]:password@`; `name@` alone (a URL's user without password)
    // would silently connect unauthenticated, so it is refused.
    const c = userinfo.indexOf(":");
    if (c < 0) throw new Error("sentinel url: credentials are [user]:password@ (no ':' before the '@')");
    const user = userinfo.slice(0, c);
    const password = userinfo.slice(c + 1);
    try {
      if (user !== "") out.username = decodeURIComponent(user);
      out.password = decodeURIComponent(password);
    } catch {
      throw new Error("sentinel url: bad percent-encoding in the credentials");
    }
  }
  return out;
}
