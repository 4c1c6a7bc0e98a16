// Peer elector: npm `redlock` 4.2.0 (what `npm install redlock` installs: the `latest` tag; 5.x
// is still a beta) on ioredis, written as its README shows "Locking and Extending"
// (peers/node-redlock/README.md says exactly what this adapter does).
//
//   node elector.js --id ID --redis URL --resource HOST:PORT --out PATH --ttl-ms N --key KEY
//
// One reign: `redlock.lock(key, ttl)` (library defaults: 10 retries, 200 ms +- 100 ms apart)
// -> leader; every TTL/3 `lock.extend(ttl)`; the first extend that rejects ends the reign. The
// work loop's check is the library's own lock state: `lock.expiration > Date.now()` (the
// README: "extend the lock as long as you never let it expire") and no failed extend.
//
// History and resource protocol: docs/conformance.md. The token is synthetic
// (peers/README.md, "Tokens"): CLOCK_MONOTONIC in microseconds at the grant.
'use strict';

const fs = require('fs');
const net = require('net');
const Redis = require('ioredis');
const Redlock = require('redlock');

const PREP_MS = 15; // check -> write window (where a pause turns a write stale)
const PERIOD_MS = 25;

/** @returns {bigint} CLOCK_MONOTONIC nanoseconds */
const monoNs = () => process.hrtime.bigint();

/** @param {string[]} argv */
function parseArgs(argv) {
  /** @type {Record<string, string>} */
  const a = { 'ttl-ms': '2000', key: 'chaos:leader', mode: 'safe' };
  for (let i = 0; i < argv.length; i += 2) {
    const k = argv[i];
    if (!k.startsWith('--') || i + 1 >= argv.length) {
      fail(`unexpected argument ${k}`);
    }
    a[k.slice(2)] = argv[i + 1];
  }
  for (const k of ['id', 'redis', 'resource', 'out']) {
    if (!a[k]) fail(`--${k} is required`);
  }
  if (a.mode !== 'safe') fail(`--mode ${a.mode}: a peer elector runs only mode safe`);
  const ttl = Number(a['ttl-ms']);
  if (!Number.isInteger(ttl) || ttl <= 0) fail(`--ttl-ms ${a['ttl-ms']}: not a positive integer`);
  return { id: a.id, redis: a.redis, resource: a.resource, out: a.out, ttl, key: a.key, mode: a.mode };
}

/** @param {string} msg @returns {never} */
function fail(msg) {
  process.stderr.write(`node-redlock elector: ${msg}\n`);
  process.exit(2);
}

/** @param {number} ms */
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

class Recorder {
  /** @param {string} path */
  constructor(path) {
    this.fd = fs.openSync(path, 'a');
  }

  /** @param {string} ev @param {Record<string, unknown>} fields */
  write(ev, fields = {}) {
    const line = JSON.stringify({ ev, t: monoNs(), ...fields }, (_k, v) =>
      typeof v === 'bigint' ? Number(v) : v,
    );
    try {
      fs.writeSync(this.fd, line + '\n');
    } catch (e) {
      process.stderr.write(`record ${ev}: ${e}\n`);
    }
  }
}

/** Client of the fencing resource: `W <token> <writer> <seq>` -> `OK` | `FENCED n`. */
class Resource {
  /** @param {string} addr */
  constructor(addr) {
    const i = addr.lastIndexOf(':');
    this.host = addr.slice(0, i) || '127.0.0.1';
    this.port = Number(addr.slice(i + 1));
    /** @type {net.Socket | null} */
    this.sock = null;
    this.buf = '';
    /** @type {((line: string | null) => void) | null} */
    this.waiter = null;
  }

  /** @returns {Promise<net.Socket>} */
  connect() {
    return new Promise((resolve, reject) => {
      const s = net.createConnection({ host: this.host, port: this.port }, () => resolve(s));
      s.setNoDelay(true);
      s.setEncoding('utf8');
      s.on('data', (d) => {
        this.buf += d;
        const i = this.buf.indexOf('\n');
        if (i >= 0 && this.waiter) {
          const line = this.buf.slice(0, i);
          this.buf = this.buf.slice(i + 1);
          const w = this.waiter;
          this.waiter = null;
          w(line);
        }
      });
      const broken = () => {
        if (this.sock === s) this.sock = null;
        if (this.waiter) {
          const w = this.waiter;
          this.waiter = null;
          w(null);
        }
      };
      s.on('error', (e) => {
        broken();
        reject(e);
      });
      s.on('close', broken);
    });
  }

  /** @param {bigint} token @param {string} writer @param {number} seq @returns {Promise<boolean>} */
  async write(token, writer, seq) {
    try {
      if (!this.sock) {
        this.buf = '';
        this.sock = await this.connect();
      }
      const sock = this.sock;
      const reply = new Promise((resolve) => {
        this.waiter = resolve;
      });
      const timer = setTimeout(() => sock.destroy(), 2000);
      sock.write(`W ${token} ${writer} ${seq}\n`);
      const line = await reply;
      clearTimeout(timer);
      return typeof line === 'string' && line.trim() === 'OK';
    } catch (_e) {
      if (this.sock) this.sock.destroy();
      this.sock = null;
      return false;
    }
  }
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const rec = new Recorder(a.out);
  const owner = `${a.id}-${process.pid}-${Math.floor(Math.random() * 2 ** 32).toString(16).padStart(8, '0')}`;
  rec.write('start', { elector: a.id, pid: process.pid, owner, mode: a.mode });

  // ioredis with its defaults; redlock with its defaults (README "Configuration").
  const client = new Redis(a.redis);
  client.on('error', (e) => process.stderr.write(`ioredis: ${e.message}\n`));
  const redlock = new Redlock([client]);
  redlock.on('clientError', (e) => process.stderr.write(`redlock clientError: ${e.message}\n`));

  let stopping = false;
  let leading = false;
  /** @type {(() => void) | null} */
  let wake = null;
  const exit = () => {
    rec.write('exit', { why: 'resigned' });
    process.exit(0);
  };
  process.on('SIGTERM', () => {
    rec.write('resign');
    stopping = true;
    if (wake) wake();
    // A pending redlock.lock() cannot be cancelled: not leading, nothing to release.
    if (!leading) exit();
  });
  /** Sleeps `ms`, or less when SIGTERM came. @param {number} ms */
  const pause = (ms) =>
    new Promise((resolve) => {
      const t = setTimeout(() => {
        wake = null;
        resolve(undefined);
      }, ms);
      wake = () => {
        clearTimeout(t);
        wake = null;
        resolve(undefined);
      };
    });

  const res = new Resource(a.resource);
  while (!stopping) {
    let lock;
    try {
      lock = await redlock.lock(a.key, a.ttl);
    } catch (e) {
      process.stderr.write(`lock: ${e instanceof Error ? e.message : e}\n`);
      continue;
    }
    if (stopping) break;
    leading = true;
    const token = monoNs() / 1000n;
    const deadline = () => monoNs() + BigInt(Math.round((lock.expiration - Date.now()) * 1e6));
    rec.write('grant', { token, deadline: deadline() });
    let lost = false;
    let reignOver = false;
    const extender = (async () => {
      while (!reignOver) {
        await sleep(a.ttl / 3);
        if (reignOver) return;
        try {
          lock = await lock.extend(a.ttl);
        } catch (e) {
          process.stderr.write(`extend failed, leadership lost: ${e instanceof Error ? e.message : e}\n`);
          lost = true;
          if (wake) wake();
          return;
        }
      }
    })();
    let why = 'cancelled';
    for (let seq = 1; ; seq++) {
      if (stopping) break;
      if (lost) {
        why = 'extend failed';
        break;
      }
      if (!(lock.expiration > Date.now())) {
        why = 'not leader at check (lock.expiration passed)';
        break;
      }
      rec.write('check', { token, seq, deadline: deadline() });
      await sleep(PREP_MS);
      const ok = await res.write(token, a.id, seq);
      rec.write('ack', { token, seq, ok });
      await pause(PERIOD_MS);
    }
    rec.write('stop', { token, why });
    reignOver = true;
    if (!lost) {
      // The README's `lock.unlock()` when done; its errors are only logged there too.
      await Promise.race([lock.unlock().catch((e) => process.stderr.write(`unlock: ${e.message}\n`)), sleep(1000)]);
    }
    leading = false;
    void extender;
  }
  exit();
}

main().catch((e) => {
  process.stderr.write(`node-redlock elector: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
