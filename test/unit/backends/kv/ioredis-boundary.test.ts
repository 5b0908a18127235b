// House style §4: Redis is spoken only in src/backends/kv/ (the override store and the RLQS
// ledger reach it through interfaces of their own, app/ through the kv factories).

import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "../../../..");

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...sourceFiles(path));
    else if (/\.(ts|mts|cts|js|mjs)$/.test(entry.name)) out.push(path);
  }
  return out;
}

describe("the ioredis boundary", () => {
  it("has no file outside src/backends/kv/ import ioredis", () => {
    const importsIoredis =
      /(?:\bfrom\s*|\bimport\s*\(?\s*|\brequire\s*\(\s*)["']ioredis(?:\/[^"']*)?["']/;
    const offenders = sourceFiles(join(root, "src"))
      .map((file) => relative(root, file).split("\\").join("/"))
      .filter((file) => !file.startsWith("src/backends/kv/"))
      .filter((file) =>
        importsIoredis.test(readFileSync(join(root, file), "utf8")),
      );
    expect(offenders).toEqual([]);
  });

  it("finds the imports it looks for", () => {
    const text = readFileSync(
      join(root, "src/backends/kv/kv-state-client.ts"),
      "utf8",
    );
    expect(text).toMatch(/from "ioredis"/);
  });
});
