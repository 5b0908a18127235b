import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { pullStatNames, statNames } from "../../../src/stats/names.js";

const doc = readFileSync(
  join(import.meta.dirname, "..", "..", "..", "docs", "statistics.md"),
  "utf8",
);

describe("docs/statistics.md", () => {
  it("names every statistic part and every built-in pull metric", () => {
    for (const name of [
      ...Object.values(statNames),
      ...Object.values(pullStatNames).filter((n) => !n.endsWith("_")),
    ]) {
      expect(doc, name).toContain(name);
    }
  });

  it("documents every statistics setting", () => {
    for (const variable of [
      "DISABLE_STATS",
      "STATS_FLUSH_INTERVAL",
      "EXTRA_TAGS",
      "USE_PUSHSTATS",
      "PUSHSTATS_HOST",
      "PUSHSTATS_PORT",
      "PUSHSTATS_PROTOCOL",
      "USE_TAGGED_PUSHSTATS",
      "TAGGED_PUSHSTATS_MOGRIFIERS",
      "USE_TAGGED_PUSHSTATS_MOGRIFIERS",
      "TAGGED_PUSHSTATS_MOGRIFIERS_<M>_PATTERN",
      "TAGGED_PUSHSTATS_MOGRIFIER_<M>_PATTERN",
      "TAGGED_PUSHSTATS_MOGRIFIERS_<M>_NAME",
      "TAGGED_PUSHSTATS_MOGRIFIERS_<M>_TAGS",
      "USE_PULLSTATS",
      "PULLSTATS_ADDR",
      "PULLSTATS_PATH",
      "PULLSTATS_MAPPER_YAML",
      "PULLSTATS_RESPONSE_TIME_AS_MILLISECONDS",
    ]) {
      expect(doc, variable).toContain(`\`${variable}\``);
    }
  });
});
