import { create } from "@bufbuild/protobuf";
import { silentLogger } from "../../helpers/silent-logger.js";
import { describe, expect, it } from "vitest";
import { ConfigError } from "../../../src/config/config-error.js";
import { HealthChecker } from "../../../src/health/health.js";
import { createDecider } from "../../../src/limiter/decide.js";
import {
  OverrideRateLimitUnit,
  RateLimitRequestSchema,
  RateLimitResponse_Code as Code,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../../../src/proto.js";
import { NotReadyError, RequestError } from "../../../src/service/errors.js";
import {
  createRateLimitService,
  type RateLimitServiceOptions,
} from "../../../src/service/rate-limit-service.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { FakeClock } from "../../helpers/fake-clock.js";
import { fakeConfig } from "../../helpers/fake-config.js";
import { testRateLimit } from "../../helpers/rate-limit.js";
import { memoryLimiter } from "../../helpers/limiters.js";
import { request } from "../../helpers/requests.js";

function setup(extra: Partial<RateLimitServiceOptions> = {}, stop = false) {
  const clock = new FakeClock(2222);
  const stats = createStatsManager();
  const cache = memoryLimiter({
    decider: createDecider({ clock }),
    clock,
    stopCacheKeyIncrementWhenOverlimit: stop,
  });
  const service = createRateLimitService({
    cache,
    statsManager: stats,
    clock,
    logger: silentLogger(),
    ...extra,
  });
  const limits = {
    a: testRateLimit(stats, "d.a", 2),
    b: testRateLimit(stats, "d.b", 10, Unit.HOUR, { name: "b" }),
    c: testRateLimit(stats, "d.c", 5, Unit.MINUTE, { replaces: ["b"] }),
    u: testRateLimit(stats, "d.u", 0, Unit.UNKNOWN, {
      unlimited: true,
      unitSeconds: 0,
    }),
    q: testRateLimit(stats, "d.q", 1, Unit.MINUTE, { quotaMode: true }),
  };
  service.applyConfigUpdate({
    ok: true,
    config: fakeConfig("d", {
      "a=1": limits.a,
      "b=1": limits.b,
      "c=1": limits.c,
      "u=1": limits.u,
      "q=1": limits.q,
    }),
  });
  return { clock, stats, service, cache, limits };
}

describe("createRateLimitService shouldRateLimit", () => {
  it("rejects invalid requests with messages naming the field", async () => {
    const { service } = setup();
    await expect(
      service.shouldRateLimit(request("", [["a", "1"]])),
    ).rejects.toThrow(new RequestError("rate limit domain must not be empty"));
    await expect(service.shouldRateLimit(request("d"))).rejects.toThrow(
      "rate limit descriptor list must not be empty",
    );
    await expect(
      service.shouldRateLimit(request("d", [["a", "1"]], [])),
    ).rejects.toThrow("descriptors[1].entries must not be empty");
    await expect(
      service.shouldRateLimit(
        request("d", [
          ["a", "1"],
          ["", "x"],
        ]),
      ),
    ).rejects.toThrow("descriptors[0].entries[1].key must not be empty");
    const badOverride = create(RateLimitRequestSchema, {
      domain: "d",
      descriptors: [
        {
          entries: [{ key: "a", value: "1" }],
          limit: { requestsPerUnit: 1, unit: OverrideRateLimitUnit.UNKNOWN },
        },
      ],
    });
    await expect(service.shouldRateLimit(badOverride)).rejects.toThrow(
      "descriptors[0].limit.unit must be one of SECOND, MINUTE, HOUR, DAY, MONTH, YEAR (got UNKNOWN)",
    );
  });

  it("refuses to decide before a config has loaded", async () => {
    const clock = new FakeClock(0);
    const service = createRateLimitService({
      cache: memoryLimiter({
        decider: createDecider({ clock }),
        clock,
      }),
      statsManager: createStatsManager(),
      clock,
      logger: silentLogger(),
    });
    await expect(
      service.shouldRateLimit(request("d", [["a", "1"]])),
    ).rejects.toBeInstanceOf(NotReadyError);
  });

  it("counts down, then goes over limit, and ORs descriptors", async () => {
    const { service } = setup();
    const first = await service.shouldRateLimit(
      request("d", [["a", "1"]], [["x", "y"]]),
    );
    expect(first.overallCode).toBe(Code.OK);
    expect(first.statuses.map((s) => [s.code, s.limitRemaining])).toEqual([
      [Code.OK, 1],
      [Code.OK, 0],
    ]);
    expect(first.statuses[1]!.currentLimit).toBeUndefined();
    await service.shouldRateLimit(request("d", [["a", "1"]]));
    const third = await service.shouldRateLimit(
      request("d", [["a", "1"]], [["x", "y"]]),
    );
    expect(third.overallCode).toBe(Code.OVER_LIMIT);
    expect(third.statuses[0]!.code).toBe(Code.OVER_LIMIT);
    expect(third.statuses[0]!.durationUntilReset?.seconds).toBe(58n);
  });

  it("answers unlimited descriptors with max uint32 and counts their hits", async () => {
    const { service, stats } = setup();
    const response = await service.shouldRateLimit(
      request({ domain: "d", hitsAddend: 3 }, [["u", "1"]]),
    );
    expect(response.statuses[0]!.code).toBe(Code.OK);
    expect(response.statuses[0]!.limitRemaining).toBe(4294967295);
    expect(response.statuses[0]!.currentLimit).toBeUndefined();
    expect(stats.rateLimitStats("d.u").totalHits.value()).toBe(3);
    expect(stats.rateLimitStats("d.u").withinLimit.value()).toBe(3);
  });

  it("skips a replaced limit when the replacing one matches in the same request", async () => {
    const { service, stats } = setup();
    const both = await service.shouldRateLimit(
      request("d", [["b", "1"]], [["c", "1"]]),
    );
    expect(both.statuses[0]!.currentLimit).toBeUndefined();
    expect(both.statuses[1]!.limitRemaining).toBe(4);
    expect(stats.rateLimitStats("d.b").totalHits.value()).toBe(0);
    const alone = await service.shouldRateLimit(request("d", [["b", "1"]]));
    expect(alone.statuses[0]!.currentLimit?.name).toBe("b");
    expect(alone.statuses[0]!.limitRemaining).toBe(9);
  });

  it("flips only the overall code in global shadow mode and counts it", async () => {
    const { service, stats } = setup({ globalShadowMode: true });
    for (let i = 0; i < 2; i++)
      await service.shouldRateLimit(request("d", [["a", "1"]]));
    const over = await service.shouldRateLimit(request("d", [["a", "1"]]));
    expect(over.overallCode).toBe(Code.OK);
    expect(over.statuses[0]!.code).toBe(Code.OVER_LIMIT);
    expect(stats.service.globalShadowMode.value()).toBe(1);
  });

  it("adds rate-limit headers from the most constrained descriptor", async () => {
    const { service } = setup({
      responseHeaders: {
        limit: "RateLimit-Limit",
        remaining: "RateLimit-Remaining",
        reset: "RateLimit-Reset",
      },
    });
    const response = await service.shouldRateLimit(
      request("d", [["b", "1"]], [["a", "1"]]),
    );
    expect(response.responseHeadersToAdd.map((h) => [h.key, h.value])).toEqual([
      ["RateLimit-Limit", "2"],
      ["RateLimit-Remaining", "1"],
      ["RateLimit-Reset", "58"],
    ]);
    const none = await service.shouldRateLimit(request("d", [["x", "1"]]));
    expect(none.responseHeadersToAdd).toEqual([]);
  });

  it("makes quota descriptors over limit only when all of them are", async () => {
    const { service } = setup();
    await service.shouldRateLimit(request("d", [["q", "1"]]));
    const over = await service.shouldRateLimit(
      request("d", [["q", "1"]], [["a", "1"]]),
    );
    expect(over.statuses[0]!.code).toBe(Code.OVER_LIMIT);
    expect(over.overallCode).toBe(Code.OVER_LIMIT);
    const globalQuota = setup({ globalQuotaMode: true });
    await globalQuota.service.shouldRateLimit(request("d", [["q", "1"]]));
    const mixed = await globalQuota.service.shouldRateLimit(
      request("d", [["q", "1"]], [["a", "1"]]),
    );
    expect(mixed.overallCode).toBe(Code.OK);
  });

  it("increments only the keys that would go over with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", async () => {
    // docs/reference-parity.md#stop-increment: key b (10/h) and key a (2/min) together; once a goes
    // over, b stays.
    const { service } = setup({}, true);
    for (let i = 0; i < 2; i++)
      await service.shouldRateLimit(request("d", [["b", "1"]], [["a", "1"]]));
    const over = await service.shouldRateLimit(
      request("d", [["b", "1"]], [["a", "1"]]),
    );
    expect(over.statuses[1]!.code).toBe(Code.OVER_LIMIT);
    expect(over.statuses[0]!.limitRemaining).toBe(8);
    const again = await service.shouldRateLimit(request("d", [["b", "1"]]));
    expect(again.statuses[0]!.limitRemaining).toBe(7);
  });

  it("starts new counters in the next window", async () => {
    const { service, clock } = setup();
    for (let i = 0; i < 3; i++)
      await service.shouldRateLimit(request("d", [["a", "1"]]));
    clock.seconds = 2280;
    const next = await service.shouldRateLimit(request("d", [["a", "1"]]));
    expect(next.overallCode).toBe(Code.OK);
    expect(next.statuses[0]!.limitRemaining).toBe(1);
  });
});

describe("createRateLimitService applyConfigUpdate", () => {
  it("keeps the last good config on a failed update and counts both outcomes", async () => {
    const { service, stats } = setup();
    service.applyConfigUpdate({
      ok: false,
      error: new ConfigError("bad.yaml: invalid rate limit unit 'foo'"),
    });
    expect(stats.service.configLoadSuccess.value()).toBe(1);
    expect(stats.service.configLoadError.value()).toBe(1);
    const response = await service.shouldRateLimit(request("d", [["a", "1"]]));
    expect(response.statuses[0]!.limitRemaining).toBe(1);
  });

  it("drives the config health component when it is enabled", () => {
    const health = new HealthChecker([{ name: "config", healthy: false }]);
    const { service } = setup({ health });
    expect(health.isHealthy()).toBe(true);
    service.applyConfigUpdate({
      ok: true,
      config: {
        getLimit: () => undefined,
        dump: () => "",
        domainCount: 0,
        domains: [],
      },
    });
    expect(health.isHealthy()).toBe(false);
  });
});
