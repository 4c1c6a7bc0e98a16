// The CommonJS entry of redis-lease, an ES module: on a Node whose require() loads ES modules
// (20.19+, 22.12+) this returns the package itself; on an older one it says what to do instead
// of Node's misleading "No exports main defined".
"use strict";
try {
  module.exports = require("../dist/index.js");
} catch (e) {
  if (e && e.code === "ERR_REQUIRE_ESM") {
    throw new Error(
      'redis-lease is ESM only on this Node version: use `const { Elector } = await import("redis-lease")` ' +
        "(or Node >= 20.19 / 22.12, whose require() loads ES modules)",
      { cause: e },
    );
  }
  throw e;
}
