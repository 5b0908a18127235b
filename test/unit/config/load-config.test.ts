import { describe, expect, it } from "vitest";
import { ConfigError } from "../../../src/config/config-error.js";
import {
  loadConfig,
  loadConfigFromRoots,
} from "../../../src/config/load-config.js";
import type {
  YamlDescriptor,
  YamlRoot,
} from "../../../src/config/yaml-types.js";
import {
  OverrideRateLimitUnit,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../../../src/proto.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { fixture, loadFixtures } from "./config-fixtures.js";
import { descriptor } from "../../helpers/requests.js";

function loadError(
  names: readonly string[],
  mergeDomainConfig = false,
): ConfigError {
  try {
    loadFixtures(names, mergeDomainConfig);
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  throw new Error(`${names.join(", ")} loaded without error`);
}

function rule(
  key: string,
  extra: Partial<YamlDescriptor> = {},
): YamlDescriptor {
  return {
    key,
    value: "",
    descriptors: [],
    shadowMode: false,
    quotaMode: false,
    detailedMetric: false,
    valueToMetric: false,
    shareThreshold: false,
    ...extra,
  };
}

describe("loadConfig validation", () => {
  // docs/reference-parity.md#config-errors, one fixture per message.
  const cases = [
    [
      ["empty-domain.yaml"],
      "empty-domain.yaml: config file cannot have empty domain",
    ],
    [
      ["empty-domain-quoted.yaml"],
      "empty-domain-quoted.yaml: config file cannot have empty domain",
    ],
    [
      ["duplicate-domain-a.yaml", "duplicate-domain-b.yaml"],
      "duplicate-domain-b.yaml: duplicate domain 'test-domain' in config file",
    ],
    [["empty-key.yaml"], "empty-key.yaml: descriptor has empty key"],
    [
      ["empty-key-nested.yaml"],
      "empty-key-nested.yaml: descriptor has empty key",
    ],
    [
      ["duplicate-key.yaml"],
      "duplicate-key.yaml: duplicate descriptor composite key 'test-domain.key1_value1'",
    ],
    [
      ["duplicate-key-nested.yaml"],
      "duplicate-key-nested.yaml: duplicate descriptor composite key 'test-domain.key1.subkey1'",
    ],
    [
      ["duplicate-key-composite.yaml"],
      "duplicate-key-composite.yaml: duplicate descriptor composite key 'test-domain.a_b'",
    ],
    [["bad-unit.yaml"], "bad-unit.yaml: invalid rate limit unit 'foo'"],
    [
      ["unit-unknown.yaml"],
      "unit-unknown.yaml: invalid rate limit unit 'unknown'",
    ],
    [
      ["empty-rate-limit.yaml"],
      "empty-rate-limit.yaml: invalid rate limit unit ''",
    ],
    [
      ["unlimited-with-unit.yaml"],
      "unlimited-with-unit.yaml: should not specify rate limit unit when unlimited",
    ],
    [
      ["empty-replaces.yaml"],
      "empty-replaces.yaml: should not have an empty replaces entry",
    ],
    [
      ["replaces-own-name.yaml"],
      "replaces-own-name.yaml: replaces should not contain name of same descriptor",
    ],
    [
      ["share-threshold-no-wildcard.yaml"],
      "share-threshold-no-wildcard.yaml: share_threshold can only be used with wildcard values (containing '*'), but found key 'key1_files'",
    ],
    // Order per rule: unit before replaces before share_threshold.
    [
      ["validation-order.yaml"],
      "validation-order.yaml: invalid rate limit unit 'fortnight'",
    ],
    [
      ["validation-order-replaces.yaml"],
      "validation-order-replaces.yaml: should not have an empty replaces entry",
    ],
    // Depth-first: the nested rule fails before the later duplicate sibling is seen.
    [
      ["validation-depth-first.yaml"],
      "validation-depth-first.yaml: invalid rate limit unit 'parsec'",
    ],
  ] as const;
  for (const [names, message] of cases) {
    it(`rejects ${names.join(" + ")}`, () => {
      expect(loadError(names).message).toBe(message);
    });
  }

  it("parses every file before loading any", () => {
    expect(loadError(["bad-unit.yaml", "unknown-key.yaml"]).message).toBe(
      "unknown-key.yaml: config error, unknown key 'ratelimit'",
    );
  });

  it("accepts share_threshold with a `*` in the middle", () => {
    expect(
      loadFixtures(["share-threshold-middle-wildcard.yaml"]).config.domains,
    ).toEqual(["test-domain"]);
  });

  it("accepts requests_per_unit: 0", () => {
    const { config } = loadFixtures(["zero-limit.yaml"]);
    expect(
      config.getLimit("test-domain", descriptor(["key1", "x"]))
        ?.requestsPerUnit,
    ).toBe(0);
  });

  it("accepts unlimited with requests_per_unit or unit 'unknown', giving unit UNKNOWN", () => {
    const { config } = loadFixtures(["unlimited-with-requests.yaml"]);
    for (const key of ["key1", "key2"]) {
      const limit = config.getLimit("test-domain", descriptor([key, "x"]));
      expect(limit).toMatchObject({
        unlimited: true,
        unit: Unit.UNKNOWN,
        unitSeconds: 0,
      });
    }
  });

  it("creates the stats of every limit at load time", () => {
    const { stats } = loadFixtures(["duplicate-domain-a.yaml"]);
    const names = stats.store.snapshot().counters.map((c) => c.name);
    expect(names).toContain(
      "ratelimit.service.rate_limit.test-domain.key1.total_hits",
    );
  });
});

describe("loadConfigFromRoots", () => {
  const statsManager = createStatsManager();

  it("loads decoded roots without the YAML key check", () => {
    const roots: { name: string; root: YamlRoot }[] = [
      {
        name: "resource-a",
        root: {
          domain: "xds",
          descriptors: [
            rule("k1", {
              value: "v1",
              rateLimit: {
                unit: "MINUTE",
                requestsPerUnit: 3,
                unlimited: false,
                name: "",
                replaces: [],
              },
              metadata: { team: "x", nested: { n: 1 } },
            }),
          ],
        },
      },
    ];
    const config = loadConfigFromRoots(roots, { statsManager });
    const limit = config.getLimit("xds", descriptor(["k1", "v1"]));
    expect(limit).toMatchObject({
      requestsPerUnit: 3,
      unit: Unit.MINUTE,
      metadata: { team: "x" },
    });
    expect(Object.isFrozen(limit?.metadata)).toBe(true);
  });

  it("names the resource in errors", () => {
    const roots = [
      {
        name: "resource-b",
        root: {
          domain: "xds",
          descriptors: [
            rule("k1", {
              rateLimit: {
                unit: "UNKNOWN",
                requestsPerUnit: 1,
                unlimited: false,
                name: "",
                replaces: [],
              },
            }),
          ],
        },
      },
    ];
    expect(() => loadConfigFromRoots(roots, { statsManager })).toThrow(
      new ConfigError("resource-b: invalid rate limit unit 'UNKNOWN'"),
    );
  });

  it("rejects metadata a protobuf Struct cannot hold, after the other checks of the rule", () => {
    const roots = [
      {
        name: "resource-c",
        root: {
          domain: "xds",
          descriptors: [rule("k1", { metadata: { bad: "\uD800" } })],
        },
      },
    ];
    expect(() => loadConfigFromRoots(roots, { statsManager })).toThrow(
      'resource-c: error parsing metadata: invalid UTF-8 in string: "\\ud800"',
    );
    const shareFirst = [
      {
        name: "resource-d",
        root: {
          domain: "xds",
          descriptors: [
            rule("k1", { shareThreshold: true, metadata: { bad: "\uD800" } }),
          ],
        },
      },
    ];
    expect(() => loadConfigFromRoots(shareFirst, { statsManager })).toThrow(
      "resource-d: share_threshold can only be used",
    );
  });

  it("loads an empty list as a config without domains", () => {
    const config = loadConfigFromRoots([], { statsManager });
    expect(config.domainCount).toBe(0);
    expect(config.domains).toEqual([]);
    expect(config.dump()).toBe("");
  });
});

describe("loadConfig domain merge", () => {
  it("rejects a second file for a domain when merging is off", () => {
    expect(loadError(["merge-a.yaml", "merge-b.yaml"]).message).toBe(
      "merge-b.yaml: duplicate domain 'test-domain' in config file",
    );
  });

  it("adds the top-level rules of later files to the domain", () => {
    const { config } = loadFixtures(["merge-a.yaml", "merge-b.yaml"], true);
    expect(config.domainCount).toBe(1);
    expect(
      config.getLimit("test-domain", descriptor(["key1", "x"]))
        ?.requestsPerUnit,
    ).toBe(1);
    expect(
      config.getLimit("test-domain", descriptor(["key2", "x"]))
        ?.requestsPerUnit,
    ).toBe(2);
  });

  it("keeps the wildcards of earlier files first", () => {
    const { config } = loadFixtures(["merge-a.yaml", "merge-b.yaml"], true);
    // `wild_a*` (merge-a) matches `abc` before `wild_ab*` (merge-b) is tried.
    expect(
      config.getLimit("test-domain", descriptor(["wild", "abc"]))
        ?.requestsPerUnit,
    ).toBe(10);
  });

  it("names the later file for the same top-level key in two files", () => {
    expect(
      loadError(["merge-a.yaml", "merge-conflict.yaml"], true).message,
    ).toBe(
      "merge-conflict.yaml: duplicate descriptor composite key 'test-domain.key1'",
    );
  });
});

describe("RateLimitConfig dump", () => {
  it("prints one line per rule with a limit, unlimited included", () => {
    const { config } = loadFixtures(["dump.yaml", "dump-other-domain.yaml"]);
    expect(config.dump()).toBe(
      "bar.path_/api/*: unit=SECOND requests_per_unit=1, shadow_mode: false, quota_mode: false\n" +
        "foo.k1_v1: unit=MINUTE requests_per_unit=3, shadow_mode: false, quota_mode: false\n" +
        "foo.k1_v1.k2: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false\n" +
        "foo.k1_v1.k3: unit=WEEK requests_per_unit=7, shadow_mode: true, quota_mode: true\n",
    );
  });

  it("lists domains sorted and counts a domain without rules", () => {
    const { config } = loadFixtures([
      "dump.yaml",
      "no-descriptors.yaml",
      "dump-other-domain.yaml",
    ]);
    expect(config.domains).toEqual(["bar", "foo", "lonely-domain"]);
    expect(config.domainCount).toBe(3);
  });
});

describe("RateLimitConfig getLimit domain and override", () => {
  it("counts domain_not_found once per call for an unknown domain", () => {
    const { config, stats } = loadFixtures(["matching.yaml"]);
    const counter = stats.domainNotFound("other-domain");
    expect(
      config.getLimit("other-domain", descriptor(["route", "exact"])),
    ).toBeUndefined();
    expect(
      config.getLimit("other-domain", descriptor(["leaf", "x"])),
    ).toBeUndefined();
    expect(counter.name).toBe(
      "ratelimit.service.rate_limit.other-domain.domain_not_found",
    );
    expect(counter.value()).toBe(2);
  });

  it("ignores an override for an unknown domain", () => {
    const { config, stats } = loadFixtures(["matching.yaml"]);
    const request = descriptor({
      entries: [["route", "exact"]],
      limit: {
        requestsPerUnit: 42,
        unit: OverrideRateLimitUnit.HOUR,
      },
    });
    expect(config.getLimit("other-domain", request)).toBeUndefined();
    expect(stats.domainNotFound("other-domain").value()).toBe(1);
  });

  it("replaces config matching with a request override", () => {
    const { config, stats } = loadFixtures(["matching.yaml"]);
    const request = descriptor({
      entries: [
        ["key1", "value1"],
        ["subkey1", "something"],
      ],
      limit: { requestsPerUnit: 42, unit: OverrideRateLimitUnit.HOUR },
    });
    const limit = config.getLimit("test-domain", request);
    expect(limit?.stats).toBe(
      stats.rateLimitStats("test-domain.key1_value1.subkey1_something"),
    );
    expect(limit).toEqual({
      fullKey: "test-domain.key1_value1.subkey1_something",
      stats: limit?.stats,
      requestsPerUnit: 42,
      unit: Unit.HOUR,
      unitSeconds: 3600,
      unitMultiplier: 1,
      windowSeconds: 3600,
      algorithm: {
        kind: "fixed_window",
        window: { kind: "epoch", seconds: 3600 },
      },
      cacheKeySuffix: "",
      extraLimits: undefined,
      statsKeySuffix: "",
      allOrNothing: false,
      unlimited: false,
      shadowMode: false,
      quotaMode: false,
      name: "",
      replaces: [],
      detailedMetric: false,
      metadata: undefined,
      shareThresholdValues: undefined,
    });
  });

  it("overrides even a rule with shadow mode, and leaves out empty values from the stats key", () => {
    const { config, stats } = loadFixtures(["matching.yaml"]);
    const request = descriptor({
      entries: [
        ["shadow", ""],
        ["b", "c"],
      ],
      limit: { requestsPerUnit: 1, unit: OverrideRateLimitUnit.YEAR },
    });
    const limit = config.getLimit("test-domain", request);
    expect(limit?.shadowMode).toBe(false);
    expect(limit?.unit).toBe(Unit.YEAR);
    expect(limit?.stats).toBe(stats.rateLimitStats("test-domain.shadow.b_c"));
  });

  it("keeps the same stats when only the override values change", () => {
    const { config } = loadFixtures(["matching.yaml"]);
    const entries = [["k", "v"]] as const;
    const first = config.getLimit(
      "test-domain",
      descriptor({
        entries,
        limit: {
          requestsPerUnit: 1,
          unit: OverrideRateLimitUnit.SECOND,
        },
      }),
    );
    const second = config.getLimit(
      "test-domain",
      descriptor({
        entries,
        limit: {
          requestsPerUnit: 2,
          unit: OverrideRateLimitUnit.DAY,
        },
      }),
    );
    expect(second?.stats).toBe(first?.stats);
    expect(second?.unitSeconds).toBe(86400);
  });

  it("reads files through loadConfig with the names it was given", () => {
    const file = fixture("bad-unit.yaml");
    expect(() =>
      loadConfig([{ name: "config.bad-unit.yaml", text: file.text }], {
        statsManager: createStatsManager(),
      }),
    ).toThrow("config.bad-unit.yaml: invalid rate limit unit 'foo'");
  });
});
