import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { settingsMarkdown } from "../../../src/settings/settings-markdown.js";

const root = join(import.meta.dirname, "..", "..", "..");

describe("documentation", () => {
  it("keeps docs/settings.md generated from the settings table (run `make docs`)", () => {
    expect(readFileSync(join(root, "docs", "settings.md"), "utf8")).toBe(
      settingsMarkdown(),
    );
  });

  it("lists every error code in the README troubleshooting table", () => {
    const readme = readFileSync(join(root, "README.md"), "utf8");
    for (const code of [
      "RLS_SETTINGS",
      "RLS_CONFIG",
      "RLS_REQUEST",
      "RLS_NOT_READY",
      "RLS_BACKEND",
    ]) {
      expect(readme).toContain(`\`${code}\``);
    }
  });
});
