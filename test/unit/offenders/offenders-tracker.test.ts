import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../../src/config/load-config.js";
import type {
  RateLimit,
  RateLimitConfig,
} from "../../../src/config/rate-limit-config.js";
import type { Decision } from "../../../src/limiter/decision.js";
import { testDecision } from "../../helpers/decisions.js";
import { OffendersTracker } from "../../../src/offenders/offenders-tracker.js";
import {
  RateLimitDescriptorSchema,
  RateLimitResponse_Code as Code,
  RateLimitResponse_DescriptorStatusSchema,
  OverrideRateLimitUnit,
  type RateLimitDescriptor,
} from "../../../src/proto.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { FakeClock } from "../../helpers/fake-clock.js";
import { descriptor } from "../../helpers/requests.js";

const yaml = `
domain: rl
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: api_key
    detailed_metric: true
    rate_limit: { unit: hour, requests_per_unit: 100 }
  - key: tenant
    rate_limits:
      - { unit: second, requests_per_unit: 10 }
      - { unit: day, requests_per_unit: 1000 }
  - key: a
    value: "b*"
    rate_limit: { unit: minute, requests_per_unit: 5 }
  - key: path
    descriptors:
      - key: method
        rate_limit: { unit: minute, requests_per_unit: 5 }
`;

/** 2026-11-28T00:00:00Z: a multiple of a minute, an hour and a day. */
const t0 = 1_795_824_000;

function load(text = yaml): RateLimitConfig {
  return loadConfig([{ name: "rl.yaml", text }], {
    statsManager: createStatsManager(),
  });
}

/** A decided request of one or more descriptors, as the service publishes it. */
function decided(
  config: RateLimitConfig,
  descriptors: RateLimitDescriptor[],
  options: { codes?: Code[]; hits?: number[]; domain?: string } = {},
): Decision {
  const domain = options.domain ?? "rl";
  const limits: (RateLimit | undefined)[] = descriptors.map((d) =>
    config.getLimit(domain, d),
  );
  const codes = options.codes ?? descriptors.map(() => Code.OK);
  return testDecision(
    codes.map((code) =>
      create(RateLimitResponse_DescriptorStatusSchema, { code }),
    ),
    limits,
    undefined,
    {
      domain,
      descriptors,
      hitsAddends: options.hits ?? descriptors.map(() => 1),
      config,
    },
  );
}

function setup(
  options: { k?: number; maxRules?: number; countersPerOffender?: number } = {},
) {
  const clock = new FakeClock(t0 + 10);
  const tracker = new OffendersTracker({
    k: options.k ?? 3,
    clock,
    ...(options.maxRules !== undefined ? { maxRules: options.maxRules } : {}),
    ...(options.countersPerOffender !== undefined
      ? { countersPerOffender: options.countersPerOffender }
      : {}),
  });
  return { clock, tracker, config: load() };
}

describe("OffendersTracker", () => {
  it("counts hits and refused hits per rule, rules by stats key, heaviest first", () => {
    const { tracker, config } = setup();
    for (let i = 0; i < 3; i++)
      tracker.observe(decided(config, [descriptor(["user", "alice"])]));
    tracker.observe(
      decided(config, [descriptor(["user", "alice"])], {
        codes: [Code.OVER_LIMIT],
      }),
    );
    tracker.observe(decided(config, [descriptor(["user", "bob"])]));
    tracker.observe(
      decided(
        config,
        [
          descriptor(["path", "/a"], ["method", "GET"]),
          descriptor(["user", "bob"]),
        ],
        { hits: [4, 1], codes: [Code.OK, Code.OVER_LIMIT] },
      ),
    );
    expect(tracker.top("", 0)).toEqual([
      {
        domain: "rl",
        rule: "rl.path.method",
        sinceSeconds: t0 - 60,
        windowSeconds: 60,
        totalHits: 4,
        offenders: [
          { descriptor: "path=/a,method=GET", hits: 4, overLimit: 0, error: 0 },
        ],
      },
      {
        domain: "rl",
        rule: "rl.user",
        sinceSeconds: t0 - 60,
        windowSeconds: 60,
        totalHits: 6,
        offenders: [
          { descriptor: "user=alice", hits: 4, overLimit: 1, error: 0 },
          { descriptor: "user=bob", hits: 2, overLimit: 1, error: 0 },
        ],
      },
    ]);
    expect(tracker.rules).toBe(2);
  });

  it("skips descriptors without a limit, with no hits, or a refund", () => {
    const { tracker, config } = setup();
    tracker.observe(
      decided(
        config,
        [
          descriptor(["unknown", "x"]),
          descriptor(["user", "zero"]),
          descriptor(["user", "refund"]),
          descriptor(["user", "one"]),
        ],
        { hits: [1, 0, -3, 1] },
      ),
    );
    expect(tracker.top("rl", 0).map((r) => r.offenders)).toEqual([
      [{ descriptor: "user=one", hits: 1, overLimit: 0, error: 0 }],
    ]);
  });

  it("counts the values of a detailed_metric rule under the rule, not per value", () => {
    const { tracker, config } = setup();
    const a = descriptor(["api_key", "k1"]);
    // detailed_metric gives each value its own stats key …
    expect(config.getLimit("rl", a)?.stats.key).toBe("rl.api_key_k1");
    tracker.observe(decided(config, [a, descriptor(["api_key", "k2"])]));
    tracker.observe(decided(config, [a]));
    const rules = tracker.top("rl", 0);
    // … but the offenders are the rule's.
    expect(rules.map((r) => r.rule)).toEqual(["rl.api_key"]);
    expect(rules[0]!.windowSeconds).toBe(3600);
    expect(rules[0]!.offenders.map((o) => [o.descriptor, o.hits])).toEqual([
      ["api_key=k1", 2],
      ["api_key=k2", 1],
    ]);
  });

  it("reports a descriptor whose key differs from its rule's first one as sent", () => {
    const { tracker, config } = setup();
    // The wildcard rule a_b* matches key a (value b…) and key a_b (any value).
    const first = descriptor(["a", "bee"]);
    const other = descriptor(["a_b", "c"]);
    expect(config.getLimit("rl", other)?.fullKey).toBe(
      config.getLimit("rl", first)?.fullKey,
    );
    tracker.observe(decided(config, [first]));
    tracker.observe(decided(config, [other]));
    tracker.observe(decided(config, [other]));
    expect(tracker.top("rl", 0)[0]!.offenders.map((o) => o.descriptor)).toEqual(
      ["a_b=c", "a=bee"],
    );
  });

  it("names a rate_limits list's rule by its first limit's stats key and window", () => {
    const { tracker, config } = setup();
    tracker.observe(decided(config, [descriptor(["tenant", "t1"])]));
    expect(tracker.top("rl", 0).map((r) => [r.rule, r.windowSeconds])).toEqual([
      ["rl.tenant_per_second", 1],
    ]);
  });

  it("answers k offenders, TOP_OFFENDERS_K for 0 or more, and one domain or all", () => {
    const { tracker, config } = setup({ k: 3 });
    for (let i = 1; i <= 5; i++) {
      for (let j = 0; j < i; j++)
        tracker.observe(decided(config, [descriptor(["user", `u${i}`])]));
    }
    const other = load(yaml.replace("domain: rl", "domain: other"));
    tracker.observe(
      decided(other, [descriptor(["user", "x"])], { domain: "other" }),
    );
    const names = (k: number, domain = "rl") =>
      tracker
        .top(domain, k)
        .flatMap((r) => r.offenders.map((o) => `${r.domain}:${o.descriptor}`));
    expect(names(1)).toEqual(["rl:user=u5"]);
    expect(names(0)).toEqual(["rl:user=u5", "rl:user=u4", "rl:user=u3"]);
    expect(names(100)).toEqual(names(0));
    expect(names(0, "other")).toEqual(["other:user=x"]);
    expect(names(0, "")).toEqual([...names(0, "other"), ...names(0)]);
    expect(tracker.top("nope", 0)).toEqual([]);
  });

  it("rotates each rule's windows by the service clock", () => {
    const { tracker, config, clock } = setup();
    tracker.observe(decided(config, [descriptor(["user", "a"])]));
    clock.seconds = t0 + 60;
    tracker.observe(decided(config, [descriptor(["user", "b"])]));
    expect(tracker.top("rl", 0)[0]!.offenders.map((o) => o.descriptor)).toEqual(
      ["user=a", "user=b"],
    );
    clock.seconds = t0 + 120;
    expect(tracker.top("rl", 0)[0]!.offenders.map((o) => o.descriptor)).toEqual(
      ["user=b"],
    );
    expect(tracker.top("rl", 0)[0]!.sinceSeconds).toBe(t0 + 60);
    // Two windows without traffic: the rule is forgotten.
    clock.seconds = t0 + 180;
    expect(tracker.top("rl", 0)).toEqual([]);
    expect(tracker.rules).toBe(0);
  });

  it("keeps a rule's counts across a reload that keeps its window, and resets them when it changes", () => {
    const { tracker, config } = setup();
    tracker.observe(decided(config, [descriptor(["user", "a"])]));
    const same = load();
    tracker.observe(decided(same, [descriptor(["user", "a"])]));
    expect(tracker.top("rl", 0)[0]!.offenders[0]!.hits).toBe(2);
    const hourly = load(
      yaml.replace(
        "unit: minute, requests_per_unit: 2",
        "unit: hour, requests_per_unit: 2",
      ),
    );
    tracker.observe(decided(hourly, [descriptor(["user", "b"])]));
    const [rule] = tracker.top("rl", 0);
    expect(rule!.windowSeconds).toBe(3600);
    expect(rule!.offenders.map((o) => [o.descriptor, o.hits])).toEqual([
      ["user=b", 1],
    ]);
  });

  it("tracks at most maxRules rules and lets an idle one make room", () => {
    const { tracker, config, clock } = setup({ maxRules: 2 });
    tracker.observe(decided(config, [descriptor(["user", "a"])]));
    tracker.observe(
      decided(config, [descriptor(["path", "/"], ["method", "GET"])]),
    );
    tracker.observe(
      decided(config, [descriptor(["api_key", "k"])], { hits: [5] }),
    );
    expect(tracker.rules).toBe(2);
    expect(tracker.droppedHits).toBe(5);
    expect(tracker.top("rl", 0).map((r) => r.rule)).toEqual([
      "rl.path.method",
      "rl.user",
    ]);
    // Both minute rules idle for two windows; the hourly rule takes a slot.
    clock.seconds = t0 + 180;
    tracker.observe(decided(config, [descriptor(["api_key", "k"])]));
    expect(tracker.rules).toBe(1);
    expect(tracker.top("rl", 0).map((r) => r.rule)).toEqual(["rl.api_key"]);
  });

  it("frees an idle rule's slot for a new rule, never a busy one's", () => {
    const { tracker, config, clock } = setup({ maxRules: 1 });
    tracker.observe(decided(config, [descriptor(["user", "a"])]));
    clock.seconds = t0 + 180; // user is idle from here on
    // The first new rule at this second sweeps, frees the slot and takes it.
    tracker.observe(decided(config, [descriptor(["api_key", "k"])]));
    expect(tracker.top("rl", 0).map((r) => r.rule)).toEqual(["rl.api_key"]);
    // Full again with a busy rule: another new rule is not tracked.
    tracker.observe(decided(config, [descriptor(["tenant", "t"])]));
    expect(tracker.droppedHits).toBe(1);
  });

  it("reads the clock once per request and not at all when nothing counts", () => {
    const { config } = setup();
    let reads = 0;
    const tracker = new OffendersTracker({
      k: 2,
      clock: {
        nowSeconds: () => (reads++, t0),
        nowMs: () => t0 * 1000,
      },
    });
    tracker.observe(
      decided(config, [descriptor(["user", "a"]), descriptor(["user", "b"])]),
    );
    expect(reads).toBe(1);
    tracker.observe(decided(config, [descriptor(["unknown", "x"])]));
    expect(reads).toBe(1);
  });

  it("never throws into the decision: a failure is counted", () => {
    const { config } = setup();
    const tracker = new OffendersTracker({
      k: 2,
      clock: {
        nowSeconds: () => {
          throw new Error("clock broke");
        },
        nowMs: () => 0,
      },
    });
    expect(() => {
      tracker.observe(decided(config, [descriptor(["user", "a"])]));
    }).not.toThrow();
    expect(tracker.failures).toBe(1);
  });

  it("uses countersPerOffender × k counters per window", () => {
    const { tracker } = setup({ k: 4, countersPerOffender: 5 });
    expect(tracker.countersPerWindow).toBe(20);
    expect(setup({ k: 20 }).tracker.countersPerWindow).toBe(200);
  });

  it("refuses options out of range by name", () => {
    const clock = new FakeClock(t0);
    expect(() => new OffendersTracker({ k: 0, clock })).toThrow(
      "invalid k 0: expected an integer 1–1000",
    );
    expect(
      () => new OffendersTracker({ k: 1, clock, countersPerOffender: 0.5 }),
    ).toThrow("invalid countersPerOffender 0.5: expected an integer 1–100");
    expect(() => new OffendersTracker({ k: 1, clock, maxRules: 0 })).toThrow(
      /^invalid maxRules 0/,
    );
  });
});

describe("OffendersTracker with request-supplied limits", () => {
  it("tracks a rule per overridden descriptor, within maxRules", () => {
    const { tracker, config } = setup({ maxRules: 3 });
    for (let i = 0; i < 5; i++) {
      const d = create(RateLimitDescriptorSchema, {
        entries: [{ key: "user", value: `u${i}` }],
        limit: { requestsPerUnit: 1, unit: OverrideRateLimitUnit.HOUR },
      });
      tracker.observe(decided(config, [d]));
    }
    expect(tracker.rules).toBe(3);
    expect(tracker.droppedHits).toBe(2);
    expect(tracker.top("rl", 0).map((r) => [r.rule, r.windowSeconds])).toEqual([
      ["rl.user_u0", 3600],
      ["rl.user_u1", 3600],
      ["rl.user_u2", 3600],
    ]);
  });
});
