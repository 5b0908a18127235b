import { describe, expect, it } from "vitest";
import { compileWildcard } from "../../../src/config/descriptor-compile.js";
import { matchesWildcard } from "../../../src/config/descriptor-lookup.js";
import { loadConfig } from "../../../src/config/load-config.js";
import { RateLimitResponse_RateLimit_Unit as Unit } from "../../../src/proto.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { loadFixtures } from "./config-fixtures.js";
import { descriptor } from "../../helpers/requests.js";

type Entries = readonly (readonly [string, string])[];

describe("matchesWildcard", () => {
  // docs/reference-parity.md#wildcards: each `*` matches zero or more characters, anywhere, several
  // times.
  const cases = [
    ["wild_foo*", "wild_foo", true],
    ["wild_foo*", "wild_foobar", true],
    ["wild_foo*", "wild_fo", false],
    ["bar*b", "barb", true],
    ["bar*b", "barXb", true],
    ["bar*b", "barXc", false],
    ["path_/api/*/action", "path_/api/v1/action", true],
    ["path_/api/*/action", "path_/api//action", true],
    ["path_/api/*/action", "path_/api/action", false],
    ["path_/api/*/action", "path_/api/v1/other", false],
    ["k_a*b*c", "k_abc", true],
    ["k_a*b*c", "k_aXbYc", true],
    ["k_a*b*c", "k_ac", false],
    ["k_a*b*c", "k_acb", false],
    ["x*ab*ab*y", "xababy", true],
    ["x*ab*ab*y", "xaby", false],
    ["a*a", "a", false],
    ["a*a", "aa", true],
    ["k_**", "k_", true],
    ["*", "", true],
    ["*.example.com", "www.example.com", true],
    ["*.example.com", "example.com", false],
  ] as const;
  for (const [pattern, text, expected] of cases) {
    it(`${expected ? "matches" : "does not match"} '${text}' against '${pattern}'`, () => {
      expect(matchesWildcard(compileWildcard(pattern), text)).toBe(expected);
    });
  }

  it("pre-splits the pattern into prefix, middles and suffix", () => {
    expect(compileWildcard("path_/api/*/v*/action")).toEqual({
      pattern: "path_/api/*/v*/action",
      prefix: "path_/api/",
      suffix: "/action",
      middles: ["/v"],
      minLength: 19,
    });
  });
});

describe("RateLimitConfig getLimit matching", () => {
  const { config } = loadFixtures(["matching.yaml"]);
  const limitOf = (entries: Entries) =>
    config.getLimit("test-domain", descriptor(...entries));

  // docs/reference-parity.md#lookup-order and #depth-rule; the number is the matched rule's
  // requests_per_unit.
  const cases: readonly [string, Entries, number | undefined][] = [
    ["exact key_value beats wildcard and key-only", [["route", "exact"]], 1],
    ["a wildcard beats the key-only default", [["route", "exactly"]], 2],
    ["the key-only default matches any other value", [["route", "other"]], 3],
    [
      "an empty request value falls back to the key-only default",
      [["route", ""]],
      3,
    ],
    ["matching is case-sensitive", [["Route", "exact"]], undefined],
    [
      "a placeholder without its own limit gives no limit",
      [["parent", "x"]],
      undefined,
    ],
    [
      "a placeholder leads to its nested rules",
      [
        ["parent", "x"],
        ["child", "y"],
      ],
      4,
    ],
    [
      "a node with limit and children serves the shorter request",
      [["both", "x"]],
      5,
    ],
    [
      "a node with limit and children serves the longer request",
      [
        ["both", "x"],
        ["inner", "x"],
      ],
      6,
    ],
    [
      "a nested value that matches nothing gives no limit",
      [
        ["both", "x"],
        ["inner", "y"],
      ],
      undefined,
    ],
    ["a leaf matches at the last entry", [["leaf", "x"]], 7],
    [
      "extra entries beyond a leaf give no limit",
      [
        ["leaf", "x"],
        ["extra", "y"],
      ],
      undefined,
    ],
    [
      "extra entries beyond the config depth give no limit",
      [
        ["parent", "x"],
        ["child", "y"],
        ["grandchild", "z"],
      ],
      undefined,
    ],
    [
      "a rule without limit or children is whitelisted",
      [["whitelisted", "x"]],
      undefined,
    ],
    ["an unknown key gives no limit", [["nothing", "x"]], undefined],
    [
      "an unmatched first entry stops the walk",
      [
        ["nothing", "x"],
        ["child", "y"],
      ],
      undefined,
    ],
    ["a request (a, b) matches the config key a_b", [["a", "b"]], 10],
    ["an empty descriptor gives no limit", [], undefined],
  ];
  for (const [behaviour, entries, expected] of cases) {
    it(behaviour, () => {
      expect(limitOf(entries)?.requestsPerUnit).toBe(expected);
    });
  }

  it("returns the frozen limit built at load for a plain match", () => {
    const first = limitOf([["route", "exact"]]);
    expect(first).toBe(limitOf([["route", "exact"]]));
    expect(Object.isFrozen(first)).toBe(true);
    expect(first).toMatchObject({
      fullKey: "test-domain.route_exact",
      unit: Unit.SECOND,
      unitSeconds: 1,
      shareThresholdValues: undefined,
    });
    expect(first?.stats.key).toBe("test-domain.route_exact");
  });

  it("gives unlimited rules unit UNKNOWN and window 0", () => {
    expect(limitOf([["free", "x"]])).toMatchObject({
      unlimited: true,
      unit: Unit.UNKNOWN,
      unitSeconds: 0,
    });
  });

  it("carries shadow_mode and quota_mode", () => {
    expect(limitOf([["shadow", "x"]])).toMatchObject({
      shadowMode: true,
      quotaMode: true,
    });
    expect(limitOf([["leaf", "x"]])).toMatchObject({
      shadowMode: false,
      quotaMode: false,
    });
  });

  it("carries name and replaces for the service to resolve", () => {
    expect(limitOf([["named", "v"]])).toMatchObject({
      name: "special",
      replaces: ["general", "other"],
    });
  });

  it("carries the metadata of the rule holding the limit", () => {
    expect(limitOf([["meta", "x"]])?.metadata).toEqual({
      team: "payments",
      tier: 2,
    });
  });
});

describe("RateLimitConfig getLimit wildcards", () => {
  const { config } = loadFixtures(["wildcard.yaml"]);
  const limitOf = (entries: Entries) =>
    config.getLimit("test-domain", descriptor(...entries));

  const cases: readonly [string, Entries, number | undefined][] = [
    ["`*` at the end matches the empty rest", [["trailing", "foo"]], 1],
    ["`*` at the end matches any rest", [["trailing", "foobar"]], 1],
    ["`*` at the end needs the whole prefix", [["trailing", "fo"]], undefined],
    ["`*` in the middle matches a segment", [["path", "/api/v1/action"]], 2],
    [
      "`*` in the middle needs the suffix",
      [["path", "/api/v1/other"]],
      undefined,
    ],
    ["several `*` match in order", [["multi", "aXbYc"]], 3],
    ["several `*` need every literal", [["multi", "ac"]], undefined],
    [
      "`*` at the start matches any beginning",
      [["leading", "www.example.com"]],
      4,
    ],
    ["the first wildcard in config order wins", [["order", "abc"]], 5],
    ["a later wildcard matches what earlier ones miss", [["order", "axc"]], 6],
    ["a bare `*` beats the key-only default", [["any", "whatever"]], 7],
    ["a bare `*` matches an empty value", [["any", ""]], 7],
    [
      "wildcards work on nested levels",
      [
        ["nested", "top1"],
        ["inner", "aaz"],
      ],
      9,
    ],
    [
      "a nested wildcard needs its suffix",
      [
        ["nested", "top1"],
        ["inner", "a"],
      ],
      undefined,
    ],
  ];
  for (const [behaviour, entries, expected] of cases) {
    it(behaviour, () => {
      expect(limitOf(entries)?.requestsPerUnit).toBe(expected);
    });
  }

  it("keeps the pattern in the stats key without value_to_metric", () => {
    const limit = limitOf([["path", "/api/v1/action"]]);
    expect(limit?.stats.key).toBe("test-domain.path_/api/*/action");
    expect(limit).toBe(limitOf([["path", "/api/v2/action"]]));
  });
});

describe("RateLimitConfig getLimit detailed_metric", () => {
  const { config } = loadFixtures(["detailed-metric.yaml"]);
  const limitOf = (entries: Entries) =>
    config.getLimit("d", descriptor(...entries));

  // docs/reference-parity.md#stats-key: `<domain>` + `.key_value` for every request entry.
  const cases: readonly [Entries, string][] = [
    [[["route", "abc"]], "d.route_abc"],
    [[["route", ""]], "d.route_"],
    [[["path", "/api/x"]], "d.path_/api/x"],
    [[["both", ""]], "d.both_"],
    [
      [
        ["outer", "a"],
        ["inner", "b"],
      ],
      "d.outer.inner",
    ],
  ];
  for (const [entries, statsKey] of cases) {
    it(`uses stats key ${statsKey} for ${JSON.stringify(entries)}`, () => {
      expect(limitOf(entries)?.stats.key).toBe(statsKey);
    });
  }

  it("has no effect on an intermediate node", () => {
    const limit = limitOf([
      ["outer", "a"],
      ["inner", "b"],
    ]);
    expect(limit).toBe(
      limitOf([
        ["outer", "z"],
        ["inner", "y"],
      ]),
    );
  });

  it("keeps the config path as fullKey", () => {
    expect(limitOf([["route", "abc"]])?.fullKey).toBe("d.route");
  });

  it("drops the metadata of a leaf, like the reference's rebuilt limit", () => {
    expect(limitOf([["leaf", "l"]])).toMatchObject({
      metadata: undefined,
      detailedMetric: true,
    });
  });

  it("keeps the metadata of a node with nested rules", () => {
    const limit = limitOf([["parent", "p"]]);
    expect(limit?.metadata).toEqual({ owner: "parent" });
    expect(limit?.stats.key).toBe("d.parent_p");
  });
});

describe("RateLimitConfig getLimit value_to_metric", () => {
  const { config } = loadFixtures(["value-to-metric.yaml"]);
  const limitOf = (entries: Entries) =>
    config.getLimit("domain", descriptor(...entries));
  const draw = (method: string): Entries => [
    ["route", "draw"],
    ["http_method", method],
    ["subject_id", "123"],
  ];

  it("puts the request value of a key-only rule into the stats key", () => {
    expect(limitOf(draw("GET"))?.stats.key).toBe(
      "domain.route_draw.http_method_GET.subject_id",
    );
  });

  it("returns the prebuilt limit when the request value is empty", () => {
    const limit = limitOf(draw(""));
    expect(limit?.stats.key).toBe("domain.route_draw.http_method.subject_id");
    expect(Object.isFrozen(limit)).toBe(true);
  });

  it("sanitizes the stats name but not the lookup", () => {
    expect(limitOf(draw("10.0.0.1:80"))?.stats.key).toBe(
      "domain.route_draw.http_method_10_0_0_1_80.subject_id",
    );
  });

  it("puts the full request value of a wildcard rule into the stats key", () => {
    expect(limitOf([["path", "/api/users"]])?.stats.key).toBe(
      "domain.path_/api/users",
    );
  });

  it("keeps the pattern of a wildcard rule without value_to_metric", () => {
    expect(limitOf([["static", "/static/x"]])?.stats.key).toBe(
      "domain.static_/static/*",
    );
  });

  it("drops the metadata when the stats key changes, like the reference", () => {
    expect(limitOf([["path", "/api/users"]])?.metadata).toBeUndefined();
    expect(limitOf([["plain", "abc"]])?.metadata).toBeUndefined();
    expect(limitOf([["plain", ""]])?.metadata).toEqual({ owner: "plain" });
  });

  it("gives each value its own stats", () => {
    const a = limitOf([["plain", "a"]]);
    const b = limitOf([["plain", "b"]]);
    expect(a?.stats.key).toBe("domain.plain_a");
    expect(b?.stats.key).toBe("domain.plain_b");
    expect(a?.stats).toBe(limitOf([["plain", "a"]])?.stats);
  });
});

describe("RateLimitConfig getLimit share_threshold", () => {
  const { config } = loadFixtures(["share-threshold.yaml"]);
  const limitOf = (entries: Entries) =>
    config.getLimit("test-domain", descriptor(...entries));

  it("gives the pattern value for the cache key of a matching entry", () => {
    const limit = limitOf([["files", "files/a.txt"]]);
    expect(limit?.shareThresholdValues).toEqual(["files/*"]);
    expect(limit?.stats.key).toBe("test-domain.files_files/*");
  });

  it("shares one stats object between matching values", () => {
    expect(limitOf([["files", "files/a"]])?.stats).toBe(
      limitOf([["files", "files/b"]])?.stats,
    );
  });

  it("tracks share_threshold on every level of a nested match", () => {
    const limit = limitOf([
      ["top", "top/a"],
      ["files", "nested/b"],
    ]);
    expect(limit?.shareThresholdValues).toEqual(["top/*", "nested/*"]);
    expect(limit?.stats.key).toBe("test-domain.top_top/*.files_nested/*");
  });

  // docs/reference-parity.md#stats-key: with detailed_metric, `key_<pattern>` for shared entries,
  // else `key_value` (or `key` for an empty value).
  const detailed: readonly [string, string][] = [
    ["", "test-domain.route_api/*.method"],
    ["GET", "test-domain.route_api/*.method_GET"],
  ];
  for (const [method, statsKey] of detailed) {
    it(`uses ${statsKey} with detailed_metric for method '${method}'`, () => {
      const limit = limitOf([
        ["route", "api/v1"],
        ["method", method],
      ]);
      expect(limit?.stats.key).toBe(statsKey);
      expect(limit?.shareThresholdValues).toEqual(["api/*", undefined]);
    });
  }

  it("beats value_to_metric on its own level", () => {
    const limit = limitOf([["shared", "sX"]]);
    expect(limit?.stats.key).toBe("test-domain.shared_s*");
    expect(limit?.shareThresholdValues).toEqual(["s*"]);
  });

  it("leaves wildcard rules without share_threshold alone", () => {
    const limit = limitOf([["unshared", "uX"]]);
    expect(limit?.shareThresholdValues).toBeUndefined();
    expect(Object.isFrozen(limit)).toBe(true);
  });
});

describe("RateLimitConfig getLimit with `*` in a config key", () => {
  it("writes the request key before the pattern in the metric path, like the reference", () => {
    const statsManager = createStatsManager();
    const text =
      "domain: d\ndescriptors:\n  - key: fo*\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    const config = loadConfig([{ name: "k.yaml", text }], { statsManager });
    const limit = config.getLimit("d", descriptor(["foo", "bar"]));
    expect(limit?.requestsPerUnit).toBe(1);
    expect(limit?.stats.key).toBe("d.foo_fo*");
  });
});
