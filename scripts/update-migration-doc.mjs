#!/usr/bin/env node
// Rewrites the generated block of docs/migration.md (the Go reference's variable names and
// ours) from src/settings/legacy-names.ts. Run by `make docs`; bundles the two source files
// with esbuild in memory, so it needs no build.
import { Buffer } from "node:buffer";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const bundled = await build({
  entryPoints: [join(root, "src", "settings", "legacy-names-markdown.ts")],
  bundle: true,
  format: "esm",
  platform: "node",
  write: false,
  logLevel: "warning",
});
const code = bundled.outputFiles[0].text;
const { withLegacyNamesBlock } = await import(
  `data:text/javascript;base64,${Buffer.from(code).toString("base64")}`
);
const path = join(root, "docs", "migration.md");
writeFileSync(path, withLegacyNamesBlock(readFileSync(path, "utf8")));
