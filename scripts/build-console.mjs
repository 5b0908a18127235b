#!/usr/bin/env node
// Builds the debug console (src/console) into dist/console with esbuild: one bundled,
// minified ES module (app.js) and the stylesheet (app.css). Run by `make build`.
import { copyFileSync, mkdirSync, statSync } from "node:fs";
import { stdout } from "node:process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const out = join(root, "dist", "console");
mkdirSync(out, { recursive: true });
await build({
  entryPoints: [join(root, "src", "console", "main.ts")],
  outfile: join(out, "app.js"),
  bundle: true,
  format: "esm",
  platform: "browser",
  target: "es2022",
  minify: true,
  legalComments: "none",
  logLevel: "warning",
});
copyFileSync(join(root, "src", "console", "app.css"), join(out, "app.css"));
const size = (name) => statSync(join(out, name)).size;
stdout.write(
  `console built: dist/console/app.js ${size("app.js")} B, app.css ${size("app.css")} B\n`,
);
