#!/usr/bin/env node
// Bundles the built service (dist/src/main.js, from tsc) into dist/bundle/ with esbuild: one
// ES module for the entry point plus one chunk per dynamically imported part (key-value and
// memcached backends, statistics sinks, xDS), so those still load only when the settings use
// them. `bin/ratelimit` runs the bundle when it exists. Run by `make build`.
//
// Why: loading ~420 separate modules costs module records, resolution and per-file source
// strings on the V8 heap, and the resolver's work at start-up is hot enough for V8 to compile
// optimised code for it; one bundle saves 4–9 MiB of idle RSS (docs/performance.md "Idle
// RSS"). Not minified: stack traces keep their names.
//
// Left outside the bundle and loaded from node_modules at run time: OpenTelemetry (its SDK
// patches modules as they are required, which needs them to be real modules; it loads only
// with TRACING_ENABLED).
import { mkdirSync, readdirSync, rmSync, statSync } from "node:fs";
import { stdout } from "node:process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const out = join(root, "dist", "bundle");
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
await build({
  entryPoints: { main: join(root, "dist", "src", "main.js") },
  outdir: out,
  bundle: true,
  splitting: true,
  format: "esm",
  platform: "node",
  target: "node22",
  external: ["@opentelemetry/*"],
  // CommonJS dependencies call require() for Node's built-in modules.
  banner: {
    js: 'import { createRequire as __rlsCreateRequire } from "node:module";\nconst require = __rlsCreateRequire(import.meta.url);',
  },
  legalComments: "none",
  logLevel: "warning",
});
const files = readdirSync(out);
const bytes = files.reduce((sum, f) => sum + statSync(join(out, f)).size, 0);
stdout.write(
  `service bundled: dist/bundle/main.js and ${files.length - 1} chunks, ${bytes} B\n`,
);
