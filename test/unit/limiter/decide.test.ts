import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { createDecider } from "../../../src/limiter/decide.js";
import { generateCacheKeys } from "../../helpers/decisions.js";
import { createLocalCache } from "../../../src/limiter/local-cache.js";
import {
  RateLimitDescriptorSchema,
  RateLimitResponse_Code as Code,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../../../src/proto.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { FakeClock } from "../../helpers/fake-clock.js";
import { testRateLimit } from "../../helpers/rate-limit.js";

function counts(stats: ReturnType<typeof createStatsManager>, key: string) {
  const s = stats.rateLimitStats(key);
  return {
    over: s.overLimit.value(),
    near: s.nearLimit.value(),
    within: s.withinLimit.value(),
    shadow: s.shadowMode.value(),
  };
}

describe("createDecider descriptorStatus", () => {
  // Worked examples of docs/reference-parity.md#stat-arithmetic (ratio 0.8), plus the edges of each
  // branch.
  const cases = [
    {
      limit: 8,
      hits: 2,
      after: 7,
      over: 0,
      near: 1,
      within: 2,
      code: Code.OK,
      remaining: 1,
    },
    {
      limit: 20,
      hits: 3,
      after: 19,
      over: 0,
      near: 3,
      within: 3,
      code: Code.OK,
      remaining: 1,
    },
    {
      limit: 20,
      hits: 3,
      after: 22,
      over: 2,
      near: 1,
      within: 0,
      code: Code.OVER_LIMIT,
      remaining: 0,
    },
    {
      limit: 20,
      hits: 7,
      after: 22,
      over: 2,
      near: 4,
      within: 0,
      code: Code.OVER_LIMIT,
      remaining: 0,
    },
    {
      limit: 10,
      hits: 3,
      after: 30,
      over: 3,
      near: 0,
      within: 0,
      code: Code.OVER_LIMIT,
      remaining: 0,
    },
    {
      limit: 10,
      hits: 1,
      after: 5,
      over: 0,
      near: 0,
      within: 1,
      code: Code.OK,
      remaining: 5,
    },
    {
      limit: 10,
      hits: 1,
      after: 10,
      over: 0,
      near: 1,
      within: 1,
      code: Code.OK,
      remaining: 0,
    },
    {
      limit: 0,
      hits: 1,
      after: 1,
      over: 1,
      near: 0,
      within: 0,
      code: Code.OVER_LIMIT,
      remaining: 0,
    },
    {
      limit: 5,
      hits: 0,
      after: 3,
      over: 0,
      near: 0,
      within: 0,
      code: Code.OK,
      remaining: 2,
    },
  ];
  for (const c of cases) {
    it(`splits limit ${c.limit}, +${c.hits} → ${c.after} into over ${c.over}, near ${c.near}, within ${c.within}`, () => {
      const stats = createStatsManager();
      const base = createDecider({
        clock: new FakeClock(1000),
        nearLimitRatio: 0.8,
      });
      const limit = testRateLimit(stats, "d.k", c.limit);
      const status = base.descriptorStatus("key", limit, c.after, c.hits, 1000);
      expect(status.code).toBe(c.code);
      expect(status.limitRemaining).toBe(c.remaining);
      expect(counts(stats, "d.k")).toEqual({
        over: c.over,
        near: c.near,
        within: c.within,
        shadow: 0,
      });
    });
  }

  it("fills currentLimit with the rule's name and the reset as whole seconds", () => {
    const stats = createStatsManager();
    const base = createDecider({ clock: new FakeClock(0) });
    const limit = testRateLimit(stats, "d.k", 10, Unit.MINUTE, {
      name: "named",
    });
    const status = base.descriptorStatus("key", limit, 1, 1, 2222);
    expect(status.currentLimit?.name).toBe("named");
    expect(status.currentLimit?.requestsPerUnit).toBe(10);
    expect(status.currentLimit?.unit).toBe(Unit.MINUTE);
    expect(status.durationUntilReset?.seconds).toBe(58n);
  });

  it("reports shadow-mode over-limit as OK with remaining 0 and counts shadow_mode", () => {
    const stats = createStatsManager();
    const base = createDecider({ clock: new FakeClock(0) });
    const limit = testRateLimit(stats, "d.s", 2, Unit.MINUTE, {
      shadowMode: true,
    });
    const crossing = base.descriptorStatus("key", limit, 4, 3, 0);
    expect(crossing.code).toBe(Code.OK);
    expect(crossing.limitRemaining).toBe(0);
    expect(counts(stats, "d.s").shadow).toBe(2);
    base.descriptorStatus("key", limit, 6, 2, 0);
    expect(counts(stats, "d.s")).toEqual({
      over: 4,
      near: 1,
      within: 0,
      shadow: 4,
    });
  });

  it("uses float32 for the near-limit threshold", () => {
    // In float32, 90 × 0.7 rounds to 63 (float64 gives 62.99…), so reaching 63 is not near.
    const stats = createStatsManager();
    const base = createDecider({
      clock: new FakeClock(0),
      nearLimitRatio: 0.7,
    });
    base.descriptorStatus("key", testRateLimit(stats, "d.f", 90), 63, 1, 0);
    expect(counts(stats, "d.f").near).toBe(0);
    base.descriptorStatus("key", testRateLimit(stats, "d.f", 90), 64, 1, 0);
    expect(counts(stats, "d.f").near).toBe(1);
  });
});

describe("createDecider plan: cache keys", () => {
  it("builds upstream cache keys and counts total_hits", () => {
    const stats = createStatsManager();
    const clock = new FakeClock(0);
    const base = createDecider({ clock, cacheKeyPrefix: "prefix:" });
    const descriptor = create(RateLimitDescriptorSchema, {
      entries: [
        { key: "key2", value: "value2" },
        { key: "subkey2", value: "" },
      ],
    });
    const limit = testRateLimit(stats, "d.k", 10, Unit.MINUTE);
    const keys = generateCacheKeys(
      base,
      clock,
      "domain",
      [descriptor, descriptor],
      [limit, undefined],
      [3, 1],
      1234,
    );
    expect(keys[0]).toEqual({
      key: "prefix:domain_key2_value2_subkey2__1200",
      perSecond: false,
    });
    expect(keys[1]).toBeUndefined();
    expect(stats.rateLimitStats("d.k").totalHits.value()).toBe(3);
  });

  it("marks SECOND limits per-second and substitutes share_threshold values", () => {
    const stats = createStatsManager();
    const clock = new FakeClock(0);
    const base = createDecider({ clock });
    const descriptor = create(RateLimitDescriptorSchema, {
      entries: [
        { key: "files", value: "files/a.txt" },
        { key: "method", value: "GET" },
      ],
    });
    const limit = testRateLimit(stats, "d.files", 1, Unit.SECOND, {
      shareThresholdValues: ["files/*", undefined],
    });
    const [key] = generateCacheKeys(
      base,
      clock,
      "domain",
      [descriptor],
      [limit],
      [1],
      1234,
    );
    expect(key).toEqual({
      key: "domain_files_files/*_method_GET_1234",
      perSecond: true,
    });
  });

  it("adds jitter below the maximum to the expiration", () => {
    const base = createDecider({
      clock: new FakeClock(0),
      expirationJitterMaxSeconds: 300,
      random: () => 0.999,
    });
    const limit = testRateLimit(createStatsManager(), "d.k", 1, Unit.MINUTE);
    expect(base.expirationSeconds(limit)).toBe(60 + 299);
    const noJitter = createDecider({
      clock: new FakeClock(0),
      expirationJitterMaxSeconds: 0,
    });
    expect(noJitter.expirationSeconds(limit)).toBe(60);
  });
});

describe("createDecider with a local cache", () => {
  it("remembers over-limit keys for the unit and answers them without counters", () => {
    const clock = new FakeClock(1000);
    const stats = createStatsManager();
    const localCache = createLocalCache({
      maxBytes: 1 << 20,
      clock,
      statsStore: stats.store,
    });
    const base = createDecider({ clock, localCache });
    const limit = testRateLimit(stats, "d.k", 1, Unit.MINUTE);
    expect(localCache.has("d_k_v_960")).toBe(false);
    base.descriptorStatus("d_k_v_960", limit, 2, 1, 1000);
    expect(localCache.has("d_k_v_960")).toBe(true);
    const status = base.localCacheStatus(limit, 3, 1000);
    expect(status.code).toBe(Code.OVER_LIMIT);
    expect(stats.rateLimitStats("d.k").overLimitWithLocalCache.value()).toBe(3);
    expect(stats.rateLimitStats("d.k").overLimit.value()).toBe(4);
    expect(stats.store.gauge("ratelimit.localcache.hitCount").value()).toBe(1);
    clock.seconds = 1061;
    expect(localCache.has("d_k_v_960")).toBe(false);
  });

  it("stays within its byte budget by dropping the least recently used keys", () => {
    const clock = new FakeClock(0);
    const localCache = createLocalCache({ maxBytes: 10_000, clock });
    for (let i = 0; i < 10_000; i++)
      localCache.add(`domain_key_value${i}_0`, 60);
    expect(localCache.size).toBeGreaterThan(10);
    expect(localCache.size).toBeLessThan(100);
    expect(localCache.has("domain_key_value9999_0")).toBe(true);
    expect(localCache.has("domain_key_value0_0")).toBe(false);
  });

  it("reports shadow-mode local-cache hits as OK", () => {
    const clock = new FakeClock(0);
    const stats = createStatsManager();
    const base = createDecider({ clock });
    const status = base.localCacheStatus(
      testRateLimit(stats, "d.s", 1, Unit.MINUTE, { shadowMode: true }),
      2,
      0,
    );
    expect(status.code).toBe(Code.OK);
    expect(stats.rateLimitStats("d.s").shadowMode.value()).toBe(2);
  });
});
