import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { projectVersion, versionLine } from "../../../src/util/version.js";

const packageJson = JSON.parse(
  readFileSync(
    join(import.meta.dirname, "..", "..", "..", "package.json"),
    "utf8",
  ),
) as { version: string };

describe("projectVersion", () => {
  it("is package.json's version, a semver", () => {
    expect(projectVersion()).toBe(packageJson.version);
    expect(projectVersion()).toMatch(/^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$/);
  });

  it("prefixes the command name for --version", () => {
    expect(versionLine("ratelimit")).toBe(`ratelimit ${packageJson.version}`);
  });
});
