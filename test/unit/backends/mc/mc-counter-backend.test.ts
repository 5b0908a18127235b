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
import {
  countersAfterIncrements,
  McCounterBackend,
} from "../../../../src/backends/mc/mc-counter-backend.js";
import { BackendError } from "../../../../src/limiter/backend-error.js";
import { limitRequest } from "../../../helpers/limit-request.js";
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
        limitRequest(
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
        limitRequest("d", [descriptor(["k", "line\nbreak"])], [limit], [1]),
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
        limitRequest("my domain", [descriptor(["k", "v"])], [limit], [1]),
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
        limitRequest(
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
      limitRequest(
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
      limitRequest("d", [descriptor(["k", "v"])], [limit], [2]),
    );
    expect(status!.code).toBe(Code.OK);
    expect(status!.limitRemaining).toBe(3);
    // The decision is the increment itself: no multi-get is sent.
    expect(cache.backend.stats.multigetError.value()).toBe(0);
    expect(cache.backend.stats.incrementError.value()).toBe(1);
    await cache.close();
  });

  it("rejects with BackendError with no node when failOpen is false", async () => {
    const backend = new McCounterBackend({
      clock,
      logger: silentLogger(),
      srv: "_mc._tcp.unresolved.test",
      failOpen: false,
    });
    const slot = {
      cacheKey: "d_k_v_0",
      previousCacheKey: undefined,
      perSecond: false,
      expirationSeconds: 60,
      windowSeconds: 60,
      windowEndSeconds: 60,
      sliding: false,
      requestsPerUnit: 5,
      shadowMode: false,
      increment: 1,
      current: 0,
      previous: 0,
    };
    await expect(backend.increment([slot], clock.seconds)).rejects.toThrow(
      BackendError,
    );
    expect(backend.stats.incrementError.value()).toBe(1);
    await backend.close();
  });

  it("fails open for all-or-nothing with no node: admitted, nothing compensated", async () => {
    const cache = newCache({ srv: true });
    const aon = testRateLimit(createStatsManager(), "d.k", 5, undefined, {
      allOrNothing: true,
    });
    const [status] = await cache.doLimit(
      limitRequest("d", [descriptor(["k", "v"])], [aon], [2]),
    );
    expect(status!.code).toBe(Code.OK);
    expect(status!.limitRemaining).toBe(3);
    expect(cache.backend.stats.multigetError.value()).toBe(1);
    // The increment failed before the answer (no background work is left).
    expect(cache.backend.stats.incrementError.value()).toBe(1);
    await cache.close();
  });
});

describe("countersAfterIncrements (the exact charge's answers)", () => {
  const slot = (cacheKey: string, increment: number) => ({
    cacheKey,
    increment,
  });

  it("answers the value memcached returned for a key charged once", () => {
    expect(
      countersAfterIncrements([slot("a", 1), slot("b", 3)], [7, 3]),
    ).toEqual([7, 3]);
  });

  it("answers stored + own hits for repeated keys, as the reference's single read does", () => {
    // "a" held 10: the increments return 12, 15, 16 in order; the reference reads 10 once.
    expect(
      countersAfterIncrements(
        [slot("a", 2), slot("b", 1), slot("a", 3), slot("a", 1)],
        [12, 1, 15, 16],
      ),
    ).toEqual([12, 1, 13, 11]);
  });

  it("counts concurrent hits landed between this call's increments on one key", () => {
    // Another caller's 4 hits landed between the two increments of "a" (held 0).
    expect(
      countersAfterIncrements([slot("a", 1), slot("a", 1)], [1, 6]),
    ).toEqual([1, 5]);
  });

  it("answers the hits alone where an increment failed, and skips it for later slots", () => {
    expect(
      countersAfterIncrements(
        [slot("a", 2), slot("x", 5), slot("a", 1)],
        [undefined, undefined, 9],
      ),
    ).toEqual([2, 5, 9]);
  });

  it("keeps a zero increment's answer at the stored value", () => {
    expect(countersAfterIncrements([slot("a", 0)], [42])).toEqual([42]);
  });

  it("reads a base over 2^31 - 1 as 0 (the reference's int32 parse) and reports it", () => {
    const tooLarge: [string, number][] = [];
    expect(
      countersAfterIncrements(
        [slot("big", 1), slot("ok", 1)],
        [2_147_483_649, 2_147_483_647],
        (key, base) => tooLarge.push([key, base]),
      ),
    ).toEqual([1, 2_147_483_647]);
    expect(tooLarge).toEqual([["big", 2_147_483_648]]);
  });
});
