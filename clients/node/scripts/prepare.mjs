// npm's `prepare`: build dist/. npm runs it after `npm install`/`npm ci` in this folder and
// when another project installs the folder (`npm install /path/to/clients/node`); in that case
// npm does not install our devDependencies, so the pinned ones (package-lock.json) are
// installed here first.
import { existsSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = join(dirname(fileURLToPath(import.meta.url)), "..");
const tsc = join(here, "node_modules", "typescript", "bin", "tsc");
if (!existsSync(tsc)) {
  execFileSync("npm", ["ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"], { cwd: here, stdio: "inherit" });
}
execFileSync(process.execPath, [tsc, "-p", "tsconfig.json"], { cwd: here, stdio: "inherit" });
