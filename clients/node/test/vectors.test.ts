// The shared decision vectors (conformance/vectors/*.json), loaded from the repository (never
// copied): every file, every case, against src/decide.ts. Fails on an empty folder, an unknown
// decision, an unknown key in `expect`; names file + case on each mismatch; compares `*_us`
// values after rounding to the nearest µs with a tolerance of 1 µs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { checkFile, vectorsDir, type VectorFile } from "./vectors-loader.js";

// quorum/: quorum mode's vectors (the membership id, Q9), named by their path under vectors/.
const files = [
  ...readdirSync(vectorsDir).filter((f) => f.endsWith(".json") && f !== "schema.json"),
  ...readdirSync(join(vectorsDir, "quorum")).filter((f) => f.endsWith(".json")).map((f) => `quorum/${f}`),
].sort();

test("the vector folder is not empty", () => {
  assert.ok(files.length > 0, `no vector files in ${vectorsDir}`);
});

for (const name of files) {
  test(`vectors: ${name}`, () => {
    const file = JSON.parse(readFileSync(join(vectorsDir, name), "utf8")) as VectorFile;
    const failures = checkFile(name, file);
    assert.deepEqual(failures, [], failures.join("\n"));
  });
}

// The loader itself must refuse what it does not understand (else a new rule is skipped).
const cfg = {
  ttl_ms: 1000, drift: 0.01, margin_us: 10000, stop_budget_us: 200000,
  renew_interval_us: 333333, op_timeout_us: 200000, block_timeout_us: 5000000,
  min_replicas: 0, wait_timeout_us: 100000, backoff_min_us: 50000, backoff_max_us: 5000000,
};

test("loader: an unknown decision fails", () => {
  const f = checkFile("x.json", {
    decision: "no_such_decision",
    defaults: { config: cfg },
    cases: [{ name: "c1", input: {}, expect: {} }],
  });
  assert.equal(f.length, 1);
  assert.match(f[0] ?? "", /x\.json \/ case "c1".*unknown decision/);
});

test("loader: an unknown key in expect fails", () => {
  const f = checkFile("r.json", {
    decision: "retry_interval",
    defaults: { config: cfg },
    cases: [{ name: "c2", input: {}, expect: { retry_us: 83333, new_rule: true } }],
  });
  assert.equal(f.length, 1);
  assert.match(f[0] ?? "", /r\.json \/ case "c2".*unknown key "new_rule"/);
});

test("loader: a mismatch names file and case; 1 µs tolerance, not 2", () => {
  const mk = (v: number) => ({ name: `v${v}`, input: {}, expect: { retry_us: v } });
  const f = checkFile("r.json", {
    decision: "retry_interval",
    defaults: { config: cfg },
    cases: [mk(83333), mk(83334), mk(83332), mk(83335)],
  });
  assert.deepEqual(f.length, 1);
  assert.match(f[0] ?? "", /r\.json \/ case "v83335".*retry_us: expected 83335/);
});

test("loader: an empty file fails", () => {
  assert.deepEqual(checkFile("e.json", { decision: "retry_interval", cases: [] }), ["e.json: no cases"]);
});
