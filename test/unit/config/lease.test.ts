// Issue 33 item 2 on the config side: `lease: true` and `lease_max:` from YAML text through the
// real loader to the built RateLimit (defaults, statistics, the dump) and every error with its
// line, field path and hint. The lease logic itself is tested in test/unit/limiter/lease-table.
import { describe, expect, it } from "vitest";
import { ConfigError } from "../../../src/config/config-error.js";
import { defaultLeaseMax } from "../../../src/config/lease.js";
import { loadConfig } from "../../../src/config/load-config.js";
import type { RateLimit } from "../../../src/config/rate-limit-config.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { descriptor } from "../../helpers/requests.js";

function load(text: string) {
  const statsManager = createStatsManager();
  return {
    config: loadConfig([{ name: "limits.yaml", text }], { statsManager }),
    statsManager,
  };
}

function loadError(text: string): ConfigError {
  try {
    load(text);
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  throw new Error("loaded without error");
}

function rule(...lines: string[]): string {
  return [
    "domain: d",
    "descriptors:",
    "  - key: k",
    ...lines.map((l) => `    ${l}`),
    "",
  ].join("\n");
}

function limitOf(text: string): RateLimit {
  const limit = load(text).config.getLimit("d", descriptor(["k", "v"]));
  if (limit === undefined) throw new Error("no limit");
  return limit;
}

describe("config: lease", () => {
  it("defaults lease_max to 1 % of requests_per_unit, at least 1", () => {
    expect(defaultLeaseMax(0)).toBe(1);
    expect(defaultLeaseMax(99)).toBe(1);
    expect(defaultLeaseMax(250)).toBe(2);
    expect(defaultLeaseMax(100000)).toBe(1000);
    const limit = limitOf(
      rule(
        "rate_limit:",
        "  unit: minute",
        "  requests_per_unit: 5000",
        "  lease: true",
      ),
    );
    expect(limit.lease?.max).toBe(50);
  });

  it("takes lease_max as written, on fixed, sliding and calendar windows", () => {
    for (const extra of [
      [],
      ["  algorithm: sliding_window"],
      ["  unit_multiplier: 5"],
    ]) {
      const limit = limitOf(
        rule(
          "rate_limit:",
          "  unit: minute",
          "  requests_per_unit: 5000",
          ...extra,
          "  lease: true",
          "  lease_max: 7",
        ),
      );
      expect(limit.lease?.max).toBe(7);
    }
    const calendar = limitOf(
      rule(
        "rate_limit:",
        "  unit: day",
        "  requests_per_unit: 10",
        "  time_zone: Europe/Berlin",
        "  lease: true",
      ),
    );
    expect(calendar.lease?.max).toBe(1);
  });

  it("creates the lease statistics under the rule's stats key, only for leased rules", () => {
    const { statsManager } = load(
      rule("rate_limit: {unit: second, requests_per_unit: 100, lease: true}") +
        [
          "  - key: plain",
          "    rate_limit: {unit: second, requests_per_unit: 100}",
          "",
        ].join("\n"),
    );
    const names = statsManager.store
      .snapshot()
      .counters.map((c) => c.name)
      .filter((name) => name.includes("lease"));
    expect(names.sort()).toEqual([
      "ratelimit.service.rate_limit.d.k.lease_taken",
      "ratelimit.service.rate_limit.d.k.lease_unused",
    ]);
  });

  it("leaves a rule without lease exactly as before (no lease field, same dump)", () => {
    const text = rule("rate_limit: {unit: minute, requests_per_unit: 3}");
    const limit = limitOf(text);
    expect("lease" in limit).toBe(false);
    expect(load(text).config.dump()).toBe(
      "d.k: unit=MINUTE requests_per_unit=3, shadow_mode: false, quota_mode: false\n",
    );
    expect(
      limitOf(
        rule("rate_limit: {unit: minute, requests_per_unit: 3, lease: false}"),
      ),
    ).not.toHaveProperty("lease");
  });

  it("dumps lease and lease_max", () => {
    expect(
      load(
        rule("rate_limit: {unit: minute, requests_per_unit: 300, lease: true}"),
      ).config.dump(),
    ).toBe(
      "d.k: unit=MINUTE requests_per_unit=300, shadow_mode: false, quota_mode: false, lease: true, lease_max: 3\n",
    );
  });
});

describe("config: errors of lease", () => {
  /** [what, rule lines, message after `limits.yaml: `, line, field path, hint] */
  const cases: [string, string[], string, number, string, string | RegExp][] = [
    [
      "lease_max without lease",
      [
        "rate_limit:",
        "  unit: second",
        "  requests_per_unit: 100",
        "  lease_max: 5",
      ],
      "lease_max is only allowed with lease: true",
      7,
      "descriptors[0].rate_limit.lease_max",
      "add lease: true, or remove lease_max",
    ],
    [
      "lease on an unlimited rule",
      ["rate_limit:", "  unlimited: true", "  lease: true"],
      "lease cannot be used with unlimited",
      6,
      "descriptors[0].rate_limit.lease",
      /an unlimited rule never counts/,
    ],
    [
      "lease on a token bucket",
      [
        "rate_limit:",
        "  unit: second",
        "  requests_per_unit: 100",
        "  algorithm: token_bucket",
        "  lease: true",
      ],
      "lease cannot be used with algorithm token_bucket",
      8,
      "descriptors[0].rate_limit.lease",
      /cannot be split into leases/,
    ],
    [
      "lease_max above requests_per_unit",
      [
        "rate_limit:",
        "  unit: second",
        "  requests_per_unit: 10",
        "  lease: true",
        "  lease_max: 11",
      ],
      "invalid lease_max '11' (expected an integer from 1 to requests_per_unit 10)",
      8,
      "descriptors[0].rate_limit.lease_max",
      /lower lease_max/,
    ],
  ];

  it.each(cases)(
    "refuses %s, with line, field path and hint",
    (_, lines, message, line, fieldPath, hint) => {
      const error = loadError(rule(...lines));
      expect(error.message).toBe(`limits.yaml: ${message}`);
      expect(error.line).toBe(line);
      expect(error.fieldPath).toBe(fieldPath);
      if (typeof hint === "string") expect(error.hint).toBe(hint);
      else expect(error.hint).toMatch(hint);
    },
  );

  it.each([
    ["lease_max: 0", "invalid lease_max '0' (expected an integer >= 1)"],
    ["lease_max: 1.5", "invalid lease_max '1.5' (expected an integer >= 1)"],
    ["lease_max: many", "invalid lease_max 'many' (expected an integer >= 1)"],
  ])("refuses %s when decoding, naming its line", (field, problem) => {
    const error = loadError(
      rule(
        "rate_limit:",
        "  unit: second",
        "  requests_per_unit: 100",
        "  lease: true",
        `  ${field}`,
      ),
    );
    expect(error.message).toBe(`limits.yaml: config error, line 8: ${problem}`);
    expect(error.fieldPath).toBe("descriptors[0].rate_limit.lease_max");
  });

  it("refuses a lease that is not a boolean", () => {
    const error = loadError(
      rule("rate_limit:", "  unit: second", "  lease: yes please"),
    );
    expect(error.fieldPath).toBe("descriptors[0].rate_limit.lease");
  });
});
