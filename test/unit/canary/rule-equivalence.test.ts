import { describe, expect, it } from "vitest";
import {
  hasReplaces,
  ruleCorrespondence,
  sameCounter,
  sameLimit,
  unchangedDomains,
  type CandidateRule,
} from "../../../src/canary/rule-equivalence.js";
import { loadConfig } from "../../../src/config/load-config.js";
import type {
  RateLimit,
  RateLimitConfig,
} from "../../../src/config/rate-limit-config.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";

function config(...files: string[]): RateLimitConfig {
  return loadConfig(
    files.map((text, i) => ({ name: `f${i}.yaml`, text })),
    { statsManager: createStatsManager() },
  );
}

const rule = (key: string, limit: string, extra = ""): string =>
  `  - key: ${key}\n    rate_limit: { ${limit} }\n${extra}`;

function limitOf(c: RateLimitConfig, key: string): RateLimit {
  const limit = c.view?.domainRules("d")?.nodes.get(key)?.limit;
  if (limit === undefined) throw new Error(`no rule ${key}`);
  return limit;
}

describe("rule equivalence", () => {
  const base = `domain: d\ndescriptors:\n${rule("a", "unit: minute, requests_per_unit: 5")}`;

  it("finds unchanged domains: same rules, whatever the stats handles", () => {
    const live = config(base, "domain: e\ndescriptors: []\n");
    const same = config(base);
    const other = config(
      `domain: d\ndescriptors:\n${rule("a", "unit: minute, requests_per_unit: 6")}`,
    );
    expect([...unchangedDomains(live, same)]).toEqual(["d"]);
    expect([...unchangedDomains(live, other)]).toEqual([]);
  });

  it.each([
    [
      "requests_per_unit",
      "unit: minute, requests_per_unit: 6",
      "",
      false,
      true,
    ],
    ["unit", "unit: hour, requests_per_unit: 5", "", false, false],
    [
      "shadow mode",
      "unit: minute, requests_per_unit: 5",
      "    shadow_mode: true\n",
      false,
      true,
    ],
    [
      "algorithm",
      "unit: minute, requests_per_unit: 5, algorithm: sliding_window",
      "",
      false,
      false,
    ],
    [
      "multiplier",
      "unit: minute, requests_per_unit: 5, unit_multiplier: 2",
      "",
      false,
      false,
    ],
    ["nothing", "unit: minute, requests_per_unit: 5", "", true, true],
  ])(
    "tells a change of %s: same limit %s, same counter %s",
    (_what, limit, extra, same, counter) => {
      const a = limitOf(config(base), "a");
      const b = limitOf(
        config(`domain: d\ndescriptors:\n${rule("a", limit, extra)}`),
        "a",
      );
      expect(sameLimit(a, b)).toBe(same);
      expect(sameCounter(a, b)).toBe(counter);
    },
  );

  it("pairs each live rule with the candidate's at its place when the trees have the same shape", () => {
    const live = config(
      `domain: d\ndescriptors:\n${rule("a", "unit: minute, requests_per_unit: 5")}  - key: b\n    descriptors:\n${rule("c", "unit: second, requests_per_unit: 1").replace(/^/gm, "    ")}`,
    );
    const candidate = config(
      `domain: d\ndescriptors:\n${rule("a", "unit: minute, requests_per_unit: 7")}  - key: b\n    descriptors:\n      - key: c\n`,
    );
    const into = new Map<RateLimit, CandidateRule>();
    expect(
      ruleCorrespondence(
        live.view?.domainRules("d"),
        candidate.view?.domainRules("d"),
        into,
      ),
    ).toBe(true);
    expect(into.get(limitOf(live, "a"))?.limit?.requestsPerUnit).toBe(7);
    const c = live.view
      ?.domainRules("d")
      ?.nodes.get("b")
      ?.children?.nodes.get("c")?.limit;
    expect(c !== undefined && into.has(c)).toBe(true);
    expect(c === undefined ? "missing" : into.get(c)?.limit).toBeUndefined();

    const reshaped = config(
      `domain: d\ndescriptors:\n${rule("a", "unit: minute, requests_per_unit: 5")}${rule("z", "unit: minute, requests_per_unit: 1")}`,
    );
    const none = new Map<RateLimit, CandidateRule>();
    expect(
      ruleCorrespondence(
        live.view?.domainRules("d"),
        reshaped.view?.domainRules("d"),
        none,
      ),
    ).toBe(false);
    expect(none.size).toBe(0);
  });

  it("finds `replaces` anywhere in a domain's rules", () => {
    expect(hasReplaces(config(base).view?.domainRules("d"))).toBe(false);
    const replacing = config(
      `domain: d\ndescriptors:\n${rule("a", "name: x, unit: minute, requests_per_unit: 5")}  - key: b\n    descriptors:\n${rule("c", "unit: minute, requests_per_unit: 5, replaces: [{ name: x }]").replace(/^/gm, "    ")}`,
    );
    expect(hasReplaces(replacing.view?.domainRules("d"))).toBe(true);
  });
});
