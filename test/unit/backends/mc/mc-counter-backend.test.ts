import { silentLogger } from "../../../helpers/silent-logger.js";
import { describe, expect, it } from "vitest";
import { createDecider, type Decider } from "../../../../src/limiter/decide.js";
import { CacheKeyError } from "../../../../src/limiter/cache-key-error.js";
import { createLocalCache } from "../../../../src/limiter/local-cache.js";
import { RateLimitResponse_Code as Code } from "../../../../src/proto.js";
import { createStatsManager } from "../../../../src/stats/stats-manager.js";
import { FakeClock } from "../../../helpers/fake-clock.js";
import { testRateLimit } from "../../../helpers/rate-limit.js";
import { mcLimiter } from "../../../helpers/limiters.js";
import { LimitRequest } from "../../../../src/limiter/limit-request.js";
import { descriptor } from "../../../helpers/requests.js";

// No test here reaches a socket: each returns or throws before any memcached operation, or
// uses an SRV backend that has not resolved any node yet.
const clock = new FakeClock(1_800_000_000);

function newCache(
  options: { decider?: Decider; prefix?: string; srv?: boolean } = {},
) {
  return mcLimiter({
    decider:
      options.decider ??
      createDecider({
        clock,
        ...(options.prefix !== undefined
          ? { cacheKeyPrefix: options.prefix }
          : {}),
      }),
    clock,
    logger: silentLogger(),
    ...(options.srv === true
      ? { srv: "_mc._tcp.unresolved.test" }
      : { hostPorts: ["127.0.0.1:1"] }),
  });
}

async function rejection(promise: Promise<unknown>): Promise<CacheKeyError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(CacheKeyError);
  return err as CacheKeyError;
}

describe("McCounterBackend", () => {
  const stats = createStatsManager();
  const limit = testRateLimit(stats, "d.k", 5);

  it("names the entry whose key or value holds whitespace or control characters", async () => {
    const cache = newCache();
    const err = await rejection(
      cache.doLimit(
        new LimitRequest(
          "d",
          [descriptor(["k", "ok"]), descriptor(["k", "ok"], ["bad key", "v"])],
          [limit, limit],
          [1, 1],
        ),
      ),
    );
    expect(err.code).toBe("RLS_CACHE_KEY");
    expect(err.descriptorIndex).toBe(1);
    expect(err.message).toBe(
      'descriptors[1].entries[1].key "bad key" contains whitespace or control characters, which the memcached-protocol backend cannot store in a cache key',
    );
    const control = await rejection(
      cache.doLimit(
        new LimitRequest("d", [descriptor(["k", "line\nbreak"])], [limit], [1]),
      ),
    );
    expect(control.message).toMatch(
      /^descriptors\[0\]\.entries\[0\]\.value "line\\nbreak" contains/,
    );
    await cache.close();
  });

  it("names the domain when it is the culprit", async () => {
    const cache = newCache();
    const err = await rejection(
      cache.doLimit(
        new LimitRequest("my domain", [descriptor(["k", "v"])], [limit], [1]),
      ),
    );
    expect(err.message).toMatch(
      /^descriptors\[0\]: domain "my domain" contains whitespace/,
    );
    await cache.close();
  });

  it("names the longest part of a key over 250 bytes", async () => {
    const cache = newCache({ prefix: "p:" });
    const err = await rejection(
      cache.doLimit(
        new LimitRequest(
          "d",
          [descriptor(["k", "v"], ["k2", "x".repeat(240)])],
          [limit],
          [1],
        ),
      ),
    );
    // p: + d_ + k_v_ + k2_ + 240 + _ + 10 window digits
    expect(err.message).toBe(
      "descriptors[0]: its cache key is 262 bytes, over the 250 the memcached-protocol backend allows (longest part: descriptors[0].entries[1].value, 240 bytes)",
    );
    await cache.close();
  });

  it("answers descriptors without a limit and local-cache hits without memcached", async () => {
    const localCache = createLocalCache({ maxBytes: 1 << 20, clock });
    const decider = createDecider({ clock, localCache });
    const cache = newCache({ decider });
    const one = testRateLimit(stats, "d.one", 1);
    // An earlier over-limit decision put the key in the local cache.
    decider.descriptorStatus(
      `d_k_v_${clock.seconds - (clock.seconds % 60)}`,
      one,
      2,
      2,
      clock.seconds,
    );
    const statuses = await cache.doLimit(
      new LimitRequest(
        "d",
        [descriptor(["k", "v"]), descriptor(["other", "x"])],
        [one, undefined],
        [1, 1],
      ),
    );
    expect(statuses.map((s) => s.code)).toEqual([Code.OVER_LIMIT, Code.OK]);
    expect(statuses[1]!.currentLimit).toBeUndefined();
    expect(cache.backend.stats.keysRequested.value()).toBe(0);
    await cache.close();
  });

  it("fails open with no node: counters read 0 and the errors are counted", async () => {
    const cache = newCache({ srv: true });
    const [status] = await cache.doLimit(
      new LimitRequest("d", [descriptor(["k", "v"])], [limit], [2]),
    );
    expect(status!.code).toBe(Code.OK);
    expect(status!.limitRemaining).toBe(3);
    await cache.flush();
    expect(cache.backend.stats.multigetError.value()).toBe(1);
    expect(cache.backend.stats.incrementError.value()).toBe(1);
    await cache.close();
  });

  it("fails open for all-or-nothing with no node: admitted, nothing compensated", async () => {
    const cache = newCache({ srv: true });
    const aon = testRateLimit(createStatsManager(), "d.k", 5, undefined, {
      allOrNothing: true,
    });
    const [status] = await cache.doLimit(
      new LimitRequest("d", [descriptor(["k", "v"])], [aon], [2]),
    );
    expect(status!.code).toBe(Code.OK);
    expect(status!.limitRemaining).toBe(3);
    expect(cache.backend.stats.multigetError.value()).toBe(1);
    // The increment failed before the answer (no background work is left).
    expect(cache.backend.stats.incrementError.value()).toBe(1);
    await cache.close();
  });
});
