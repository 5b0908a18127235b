import { describe, expect, it } from "vitest";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { StatsStore } from "../../../src/stats/stats-store.js";

describe("createStatsManager", () => {
  it("names the six rate-limit counters after the sanitized stats key", () => {
    const m = createStatsManager();
    const s = m.rateLimitStats("d.addr_10.0.0.1");
    expect(s.key).toBe("d.addr_10_0_0_1");
    expect(s.totalHits.name).toBe(
      "ratelimit.service.rate_limit.d.addr_10_0_0_1.total_hits",
    );
    expect(s.overLimitWithLocalCache.name).toBe(
      "ratelimit.service.rate_limit.d.addr_10_0_0_1.over_limit_with_local_cache",
    );
    expect(m.rateLimitStats("d.addr_10.0.0.1")).toBe(s);
  });

  it("bounds request-derived stats keys and sends the rest to the domain's overflow key", () => {
    const store = new StatsStore();
    const m = createStatsManager(store, { maxRequestDerivedStatsKeys: 2 });
    const config = m.rateLimitStats("d.user");
    expect(m.requestRateLimitStats("d", "d.user")).toBe(config);
    const a = m.requestRateLimitStats("d", "d.user_a");
    const b = m.requestRateLimitStats("d", "d.user_b");
    const c = m.requestRateLimitStats("d", "d.user_c");
    const e = m.requestRateLimitStats("d", "d.user_e");
    expect(a.key).toBe("d.user_a");
    expect(b.key).toBe("d.user_b");
    expect(c.key).toBe("d.stats_overflow");
    expect(e).toBe(c);
    expect(m.requestRateLimitStats("d", "d.user_a")).toBe(a);
    expect(m.requestDerivedStatsKeys).toBe(2);
    const before = store.size;
    for (let i = 0; i < 1000; i++) m.requestRateLimitStats("d", `d.user_${i}x`);
    expect(store.size).toBe(before);
  });

  it("bounds unknown domains in domain_not_found", () => {
    const m = createStatsManager(new StatsStore(), { maxUnknownDomains: 1 });
    expect(m.domainNotFound("x").name).toBe(
      "ratelimit.service.rate_limit.x.domain_not_found",
    );
    expect(m.domainNotFound("y").name).toBe(
      "ratelimit.service.rate_limit.stats_overflow.domain_not_found",
    );
    expect(m.domainNotFound("x")).toBe(m.domainNotFound("x"));
  });

  it("rejects a negative cap", () => {
    expect(() =>
      createStatsManager(new StatsStore(), { maxUnknownDomains: -1 }),
    ).toThrow(/maxUnknownDomains/);
  });
});
