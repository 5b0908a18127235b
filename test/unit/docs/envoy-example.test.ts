import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..", "..", "..");

describe("README's Envoy snippet", () => {
  it("is examples/envoy/envoy.yaml verbatim (the config the end-to-end test runs)", () => {
    const readme = readFileSync(join(root, "README.md"), "utf8");
    const example = readFileSync(
      join(root, "examples", "envoy", "envoy.yaml"),
      "utf8",
    );
    expect(readme).toContain("```yaml\n" + example + "```\n");
  });
});
