import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../../src/config/load-config.js";
import type { RateLimitConfig } from "../../../src/config/rate-limit-config.js";
import {
  explainLimit,
  type MatchOutcome,
} from "../../../src/explain/descriptor-explanation.js";
import { explainConfig } from "../../../src/explain/explain-message.js";
import {
  DescriptorExplanation_Verdict as Verdict,
  OverrideRateLimitUnit,
  RateLimitDescriptorSchema,
  RateLimitRequestSchema,
} from "../../../src/proto.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { descriptor } from "../../helpers/requests.js";

function load(text: string, name = "config.yaml"): RateLimitConfig {
  return loadConfig([{ name, text }], { statsManager: createStatsManager() });
}

/** The outcomes of the walk and the config path of the limit found. */
function walk(
  config: RateLimitConfig,
  entries: [string, string][],
  domain = "d",
): { outcomes: MatchOutcome[]; nodes: string[]; limit: string | undefined } {
  const e = explainLimit(config.view!, domain, descriptor(...entries));
  // The recording walk and the hot-path lookup agree on the limit.
  const found = config.getLimit(domain, descriptor(...entries));
  expect(e.limit?.fullKey).toBe(found?.fullKey);
  expect(e.limit?.shareThresholdValues).toEqual(found?.shareThresholdValues);
  return {
    outcomes: e.path.map((s) => s.outcome),
    nodes: e.path.map((s) => s.node?.fullKey ?? "-"),
    limit: e.limit?.fullKey,
  };
}

// docs/reference-parity.md#matching, row by row.
const tree = `domain: d
descriptors:
  - key: k
    value: v
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: k
    value: v*
    rate_limit: { unit: second, requests_per_unit: 2 }
  - key: k
    rate_limit: { unit: second, requests_per_unit: 3 }
  - key: p
    value: a
    descriptors:
      - key: q
        rate_limit: { unit: minute, requests_per_unit: 4 }
  - key: leaf
    rate_limit: { unit: hour, requests_per_unit: 5 }
  - key: both
    rate_limit: { unit: day, requests_per_unit: 6 }
    descriptors:
      - key: child
        rate_limit: { unit: day, requests_per_unit: 7 }
`;

describe("match path (docs/reference-parity.md#matching)", () => {
  const config = load(tree);

  it("1. exact key_value beats a wildcard and the key-only default", () => {
    expect(walk(config, [["k", "v"]])).toEqual({
      outcomes: ["exact"],
      nodes: ["d.k_v"],
      limit: "d.k_v",
    });
  });

  it("2. the first matching wildcard beats the key-only default", () => {
    const e = explainLimit(config.view!, "d", descriptor(["k", "vvv"]));
    expect(e.path[0]!.outcome).toBe("wildcard");
    expect(e.path[0]!.wildcardsTried).toEqual([]);
    const miss = explainLimit(config.view!, "d", descriptor(["k", "zzz"]));
    expect(miss.path[0]!.wildcardsTried).toEqual(["k_v*"]);
    expect(e.limit?.fullKey).toBe("d.k_v*");
  });

  it("3. the key-only default when neither matches", () => {
    expect(walk(config, [["k", "other"]])).toEqual({
      outcomes: ["key-only"],
      nodes: ["d.k"],
      limit: "d.k",
    });
  });

  it("4. nothing: the walk stops with no such key", () => {
    expect(walk(config, [["nope", "x"]])).toEqual({
      outcomes: ["no-such-key"],
      nodes: ["-"],
      limit: undefined,
    });
  });

  it("depth: descends through nested rules to the last entry", () => {
    expect(
      walk(config, [
        ["p", "a"],
        ["q", "x"],
      ]),
    ).toEqual({
      outcomes: ["exact", "key-only"],
      nodes: ["d.p_a", "d.p_a.q"],
      limit: "d.p_a.q",
    });
  });

  it("depth: a rule without nested rules stops a longer request", () => {
    expect(
      walk(config, [
        ["leaf", "x"],
        ["more", "y"],
      ]),
    ).toEqual({
      outcomes: ["key-only", "deeper-than-config"],
      nodes: ["d.leaf", "-"],
      limit: undefined,
    });
  });

  it("depth: a request shorter than the config takes the limit it reached", () => {
    expect(walk(config, [["both", "x"]]).limit).toBe("d.both");
    expect(walk(config, [["p", "a"]])).toEqual({
      outcomes: ["exact"],
      nodes: ["d.p_a"],
      limit: undefined,
    });
  });

  it("depth: a nested miss is no such key at that level", () => {
    expect(
      walk(config, [
        ["p", "a"],
        ["zzz", "x"],
      ]).outcomes,
    ).toEqual(["exact", "no-such-key"]);
  });

  it("unknown domain: no limit, and no domain_not_found counted", () => {
    const stats = createStatsManager();
    const c = loadConfig([{ name: "c.yaml", text: tree }], {
      statsManager: stats,
    });
    const e = explainLimit(c.view!, "nope", descriptor(["k", "v"]));
    expect(e.domainFound).toBe(false);
    expect(e.path.map((s) => s.outcome)).toEqual(["unknown-domain"]);
    expect(
      stats.store.snapshot().counters.filter((x) => x.value() > 0),
    ).toEqual([]);
  });

  it("override: config matching is skipped", () => {
    const d = create(RateLimitDescriptorSchema, {
      entries: [{ key: "k", value: "v" }],
      limit: { requestsPerUnit: 42, unit: OverrideRateLimitUnit.HOUR },
    });
    const e = explainLimit(config.view!, "d", d);
    expect(e.fromOverride).toBe(true);
    expect(e.path.map((s) => s.outcome)).toEqual(["override"]);
    expect(e.limit?.requestsPerUnit).toBe(42);
  });

  it("records the source file and line of every matched rule", () => {
    const e = explainLimit(
      config.view!,
      "d",
      descriptor(["p", "a"], ["q", "x"]),
    );
    expect(e.path.map((s) => s.node?.source)).toEqual([
      { name: "config.yaml", line: 11, version: "" },
      { name: "config.yaml", line: 14, version: "" },
    ]);
    expect(e.source).toEqual({ name: "config.yaml", line: 14, version: "" });
  });
});

describe("whitelist, share_threshold, replaces, shadow, unlimited", () => {
  const config = load(`domain: d
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 10 }
  - key: user
    value: admin
  - key: files
    value: "docs/*"
    share_threshold: true
    rate_limit: { unit: hour, requests_per_unit: 3 }
  - key: a
    rate_limit: { name: small, unit: second, requests_per_unit: 1 }
  - key: b
    rate_limit:
      unit: second
      requests_per_unit: 100
      replaces: [{ name: small }]
  - key: s
    shadow_mode: true
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: u
    rate_limit: { unlimited: true }
`);

  it("a value without a rate limit next to a limited default is whitelisted", () => {
    expect(walk(config, [["user", "admin"]])).toEqual({
      outcomes: ["whitelisted"],
      nodes: ["d.user_admin"],
      limit: undefined,
    });
    expect(walk(config, [["user", "bob"]]).outcomes).toEqual(["key-only"]);
  });

  it("share_threshold: the pattern value replaces the request value", () => {
    const e = explainLimit(
      config.view!,
      "d",
      descriptor(["files", "docs/a.md"]),
    );
    expect(e.limit?.shareThresholdValues).toEqual(["docs/*"]);
    const request = create(RateLimitRequestSchema, {
      domain: "d",
      descriptors: [descriptor(["files", "docs/b.md"])],
    });
    const explained = explainConfig(
      (domain, d) => explainLimit(config.view!, domain, d),
      request,
    );
    expect(explained.descriptors[0]!.rule?.shareThreshold).toEqual([
      "files=docs/*",
    ]);
  });

  it("replaces: the named limit is dropped and says by which rule", () => {
    const request = create(RateLimitRequestSchema, {
      domain: "d",
      descriptors: [descriptor(["a", "1"]), descriptor(["b", "1"])],
    });
    const explained = explainConfig(
      (domain, d) => explainLimit(config.view!, domain, d),
      request,
    );
    expect(explained.limits[0]).toBeUndefined();
    expect(explained.limits[1]?.fullKey).toBe("d.b");
    expect(explained.descriptors[0]!.verdict).toBe(Verdict.REPLACED);
    expect(explained.descriptors[0]!.replacedBy).toBe("d.b");
    expect(explained.descriptors[1]!.replacedNames).toEqual(["small"]);
  });

  it("shadow and unlimited rules are reported as such", () => {
    const request = create(RateLimitRequestSchema, {
      domain: "d",
      descriptors: [descriptor(["s", "1"]), descriptor(["u", "1"])],
    });
    const explained = explainConfig(
      (domain, d) => explainLimit(config.view!, domain, d),
      request,
    );
    expect(explained.descriptors[0]!.rule?.shadowMode).toBe(true);
    expect(explained.descriptors[1]!.rule?.unlimited).toBe(true);
    expect(explained.descriptors[1]!.verdict).toBe(Verdict.UNLIMITED);
    expect(explained.unlimited).toEqual([false, true]);
    expect(explained.limits[1]).toBeUndefined();
  });
});
