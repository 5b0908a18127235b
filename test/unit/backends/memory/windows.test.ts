import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { RateLimit } from "../../../../src/config/rate-limit-config.js";
import { createDecider } from "../../../../src/limiter/decide.js";
import { createLocalCache } from "../../../../src/limiter/local-cache.js";
import {
  RateLimitResponse_Code as Code,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../../../../src/proto.js";
import { createStatsManager } from "../../../../src/stats/stats-manager.js";
import { FakeClock } from "../../../helpers/fake-clock.js";
import { windowedRateLimit } from "../../../helpers/rate-limit.js";
import { memoryLimiter } from "../../../helpers/limiters.js";
import type { MemoryCounterBackend } from "../../../../src/backends/memory/memory-counter-backend.js";
import type { RateLimitPipeline } from "../../../../src/limiter/pipeline.js";
import { limitRequest } from "../../../helpers/limit-request.js";
import { descriptor } from "../../../helpers/requests.js";

function memoryCache(
  clock: FakeClock,
): RateLimitPipeline<MemoryCounterBackend> {
  return memoryLimiter({
    decider: createDecider({ clock }),
    clock,
    sweepIntervalMs: 60_000,
  });
}

/** Sends `hits` for one descriptor; returns whether it was admitted. */
async function admit(
  cache: RateLimitPipeline<MemoryCounterBackend>,
  limit: RateLimit,
  hits: number,
  value = "v",
): Promise<boolean> {
  const [status] = await cache.doLimit(
    limitRequest("d", [descriptor(["k", value])], [limit], [hits]),
  );
  return status!.code === Code.OK;
}

describe("memory backend: unit_multiplier", () => {
  it("counts one window of N units, aligned to multiples of N units", async () => {
    const clock = new FakeClock(300 * 100);
    const cache = memoryCache(clock);
    const limit = windowedRateLimit(
      createStatsManager(),
      "d.k",
      3,
      Unit.MINUTE,
      {
        unitMultiplier: 5,
      },
    );
    for (let i = 0; i < 3; i++) expect(await admit(cache, limit, 1)).toBe(true);
    clock.seconds += 299; // still the same 5-minute window
    const [over] = await cache.doLimit(
      limitRequest("d", [descriptor(["k", "v"])], [limit], [1]),
    );
    expect(over!.code).toBe(Code.OVER_LIMIT);
    expect(over!.durationUntilReset?.seconds).toBe(1n);
    clock.seconds += 1; // next window
    expect(await admit(cache, limit, 1)).toBe(true);
    await cache.close();
  });
});

describe("memory backend: sliding windows", () => {
  it("weighs the previous window's count by its share of the sliding window", async () => {
    const clock = new FakeClock(6000);
    const cache = memoryCache(clock);
    const limit = windowedRateLimit(
      createStatsManager(),
      "d.k",
      10,
      Unit.MINUTE,
      {
        sliding: true,
      },
    );
    for (let i = 0; i < 10; i++)
      expect(await admit(cache, limit, 1)).toBe(true);
    expect(await admit(cache, limit, 1)).toBe(false); // counted: 11 in window 6000
    clock.seconds = 6060; // e = 0: the previous 11 weigh fully
    expect(await admit(cache, limit, 1)).toBe(false);
    clock.seconds = 6090; // ceil(11 × 30/60) = 6, current 1 (the rejected hit above)
    const statuses: boolean[] = [];
    for (let i = 0; i < 5; i++) statuses.push(await admit(cache, limit, 1));
    expect(statuses).toEqual([true, true, true, false, false]);
    clock.seconds = 6180; // two windows later: nothing weighs
    expect(await admit(cache, limit, 1)).toBe(true);
    await cache.close();
  });

  it("keeps a sliding counter for two windows", async () => {
    const clock = new FakeClock(6000);
    const cache = memoryCache(clock);
    const limit = windowedRateLimit(
      createStatsManager(),
      "d.k",
      10,
      Unit.MINUTE,
      {
        sliding: true,
      },
    );
    await admit(cache, limit, 1);
    cache.backend.sweep(6060);
    expect(cache.backend.size).toBe(1);
    cache.backend.sweep(6120);
    expect(cache.backend.size).toBe(0);
    await cache.close();
  });
});

describe("memory backend: all-or-nothing charging", () => {
  for (let n = 1; n <= 5; n++) {
    for (let k = 0; k <= n; k++) {
      it(`${n} descriptors, ${k} over: ${k === 0 ? "charges all" : "charges none"}`, async () => {
        const clock = new FakeClock(6000);
        const cache = memoryCache(clock);
        const stats = createStatsManager();
        const limits = Array.from({ length: n }, (_, i) =>
          windowedRateLimit(stats, `d.k${i}`, 5, Unit.MINUTE, {
            allOrNothing: true,
          }),
        );
        const descriptors = limits.map((_, i) => descriptor(["k", `v${i}`]));
        // The first k descriptors' windows are full.
        for (let i = 0; i < k; i++) {
          await cache.doLimit(
            limitRequest("d", [descriptors[i]!], [limits[i]!], [5]),
          );
        }
        // The others have used 2.
        for (let i = k; i < n; i++) {
          await cache.doLimit(
            limitRequest("d", [descriptors[i]!], [limits[i]!], [2]),
          );
        }
        const statuses = await cache.doLimit(
          limitRequest(
            "d",
            descriptors,
            limits,
            limits.map(() => 1),
          ),
        );
        for (let i = 0; i < n; i++) {
          const status = statuses[i]!;
          if (i < k) {
            expect(status.code).toBe(Code.OVER_LIMIT);
          } else {
            expect(status.code).toBe(Code.OK);
            // Charged: 5 − 3; not charged: the budget is untouched, 5 − 2.
            expect(status.limitRemaining).toBe(k === 0 ? 2 : 3);
          }
        }
        // Peek with 0 hits: counters as the request left them.
        const peek = await cache.doLimit(
          limitRequest(
            "d",
            descriptors,
            limits,
            limits.map(() => 0),
          ),
        );
        for (let i = 0; i < n; i++) {
          const used = i < k ? 5 : k === 0 ? 3 : 2;
          if (i >= k) expect(peek[i]!.limitRemaining).toBe(5 - used);
        }
        await cache.close();
      });
    }
  }

  it("charges everything when only a shadow-mode descriptor is over", async () => {
    const clock = new FakeClock(6000);
    const cache = memoryCache(clock);
    const stats = createStatsManager();
    const shadow = windowedRateLimit(stats, "d.s", 1, Unit.MINUTE, {
      allOrNothing: true,
      shadowMode: true,
    });
    const plain = windowedRateLimit(stats, "d.p", 5, Unit.MINUTE, {
      allOrNothing: true,
    });
    await cache.doLimit(
      limitRequest("d", [descriptor(["k", "s"])], [shadow], [1]),
    );
    const statuses = await cache.doLimit(
      limitRequest(
        "d",
        [descriptor(["k", "s"]), descriptor(["k", "p"])],
        [shadow, plain],
        [1, 1],
      ),
    );
    expect(statuses.map((s) => s.code)).toEqual([Code.OK, Code.OK]);
    expect(statuses[1]!.limitRemaining).toBe(4);
    await cache.close();
  });
});

/** A request sequence: seconds to wait before each request, and its hits. */
const sequence = fc.array(
  fc.record({
    wait: fc.integer({ min: 0, max: 3 }),
    hits: fc.integer({ min: 1, max: 3 }),
  }),
  { minLength: 1, maxLength: 120 },
);

describe("memory backend: properties", () => {
  it("fixed windows of N units admit at most the limit per aligned window", async () => {
    await fc.assert(
      fc.asyncProperty(
        sequence,
        fc.integer({ min: 1, max: 12 }),
        fc.integer({ min: 1, max: 10 }),
        fc.integer({ min: 0, max: 1000 }),
        async (requests, multiplier, requestsPerUnit, start) => {
          const clock = new FakeClock(1_000_000 + start);
          const cache = memoryCache(clock);
          const limit = windowedRateLimit(
            createStatsManager(),
            "d.k",
            requestsPerUnit,
            Unit.SECOND,
            { unitMultiplier: multiplier },
          );
          const admitted = new Map<number, number>();
          for (const { wait, hits } of requests) {
            clock.seconds += wait;
            if (await admit(cache, limit, hits)) {
              const window = clock.seconds - (clock.seconds % multiplier);
              admitted.set(window, (admitted.get(window) ?? 0) + hits);
            }
          }
          await cache.close();
          for (const count of admitted.values()) {
            expect(count).toBeLessThanOrEqual(requestsPerUnit);
          }
        },
      ),
      { numRuns: 200 },
    );
  });

  it("sliding windows admit at most limit × (1 + (W − 2)/W) in any interval of one window", async () => {
    await fc.assert(
      fc.asyncProperty(
        sequence,
        fc.integer({ min: 2, max: 12 }),
        fc.integer({ min: 1, max: 10 }),
        fc.integer({ min: 0, max: 1000 }),
        async (requests, window, requestsPerUnit, start) => {
          const clock = new FakeClock(1_000_000 + start);
          const cache = memoryCache(clock);
          const limit = windowedRateLimit(
            createStatsManager(),
            "d.k",
            requestsPerUnit,
            Unit.SECOND,
            { unitMultiplier: window, sliding: true },
          );
          const admittedAt: { t: number; hits: number }[] = [];
          for (const { wait, hits } of requests) {
            clock.seconds += wait;
            if (await admit(cache, limit, hits))
              admittedAt.push({ t: clock.seconds, hits });
          }
          await cache.close();
          // The documented bound (docs/configuration.md "Sliding windows").
          const bound = Math.floor(
            (requestsPerUnit * (2 * window - 2)) / window,
          );
          for (const { t: from } of admittedAt) {
            let inInterval = 0;
            for (const { t, hits } of admittedAt) {
              if (t >= from && t < from + window) inInterval += hits;
            }
            expect(inInterval).toBeLessThanOrEqual(bound);
          }
          // And never more than the limit in one aligned window.
          const perWindow = new Map<number, number>();
          for (const { t, hits } of admittedAt) {
            const w = t - (t % window);
            perWindow.set(w, (perWindow.get(w) ?? 0) + hits);
          }
          for (const count of perWindow.values())
            expect(count).toBeLessThanOrEqual(requestsPerUnit);
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe("docs/configuration.md worked examples", () => {
  const answer = async (
    cache: RateLimitPipeline<MemoryCounterBackend>,
    limits: RateLimit[],
    values: string[],
  ): Promise<string> =>
    (
      await cache.doLimit(
        limitRequest(
          "api",
          values.map((v) => descriptor(["k", v])),
          limits,
          limits.map(() => 1),
        ),
      )
    )
      .map(
        (s) =>
          `${Code[s.code]}/${s.limitRemaining}/${s.durationUntilReset?.seconds}`,
      )
      .join(" ");

  it("unit_multiplier", async () => {
    const clock = new FakeClock(1000);
    const cache = memoryCache(clock);
    const limit = windowedRateLimit(
      createStatsManager(),
      "api.k",
      3,
      Unit.SECOND,
      {
        unitMultiplier: 10,
      },
    );
    const seen: string[] = [];
    for (const t of [1000, 1004, 1004, 1009, 1010]) {
      clock.seconds = t;
      seen.push(await answer(cache, [limit], ["v"]));
    }
    expect(seen).toEqual([
      "OK/2/10",
      "OK/1/6",
      "OK/0/6",
      "OVER_LIMIT/0/1",
      "OK/2/10",
    ]);
    await cache.close();
  });

  it("sliding window", async () => {
    const clock = new FakeClock(600);
    const cache = memoryCache(clock);
    const limit = windowedRateLimit(
      createStatsManager(),
      "api.k",
      10,
      Unit.MINUTE,
      {
        sliding: true,
      },
    );
    for (let i = 0; i < 11; i++) await answer(cache, [limit], ["v"]);
    const seen: string[] = [];
    for (const t of [660, 690, 690, 690, 690, 720]) {
      clock.seconds = t;
      seen.push(await answer(cache, [limit], ["v"]));
    }
    expect(seen).toEqual([
      "OVER_LIMIT/0/6",
      "OK/2/3",
      "OK/1/3",
      "OK/0/3",
      "OVER_LIMIT/0/3",
      "OK/4/12",
    ]);
    await cache.close();
  });

  it("all-or-nothing", async () => {
    const clock = new FakeClock(6000);
    const cache = memoryCache(clock);
    const stats = createStatsManager();
    const user = windowedRateLimit(stats, "api.user", 5, Unit.MINUTE, {
      allOrNothing: true,
    });
    const ip = windowedRateLimit(stats, "api.ip", 3, Unit.MINUTE, {
      allOrNothing: true,
    });
    const seen: string[] = [];
    for (let i = 0; i < 5; i++)
      seen.push(await answer(cache, [user, ip], ["u", "i"]));
    expect(seen).toEqual([
      "OK/4/60 OK/2/60",
      "OK/3/60 OK/1/60",
      "OK/2/60 OK/0/60",
      "OK/2/60 OVER_LIMIT/0/60",
      "OK/2/60 OVER_LIMIT/0/60",
    ]);
    await cache.close();
  });
});

describe("memory backend: extensions with the local over-limit cache", () => {
  function cachedMemory(clock: FakeClock) {
    const localCache = createLocalCache({ maxBytes: 100_000, clock });
    const cache = memoryLimiter({
      decider: createDecider({ clock, localCache }),
      clock,
      sweepIntervalMs: 60_000,
    });
    return { cache, localCache };
  }

  it("remembers a sliding key until its weighted count falls by one", async () => {
    const clock = new FakeClock(6030);
    const { cache, localCache } = cachedMemory(clock);
    const limit = windowedRateLimit(
      createStatsManager(),
      "d.k",
      2,
      Unit.MINUTE,
      {
        sliding: true,
      },
    );
    for (let i = 0; i < 3; i++) await admit(cache, limit, 1);
    expect(localCache.has("d_k_v_6000_s60")).toBe(true);
    // Nothing weighs from the previous window: the count falls ceil(60/3) = 20 s into the
    // next window, 50 s from now; the cache forgets the key once those 50 s have passed.
    clock.seconds = 6030 + 50;
    expect(localCache.has("d_k_v_6000_s60")).toBe(true);
    clock.seconds = 6030 + 51;
    expect(localCache.has("d_k_v_6000_s60")).toBe(false);
    await cache.close();
  });

  it("all-or-nothing: a local-cache hit refuses the request without charging the others", async () => {
    const clock = new FakeClock(6000);
    const { cache } = cachedMemory(clock);
    const stats = createStatsManager();
    const full = windowedRateLimit(stats, "d.full", 1, Unit.MINUTE, {
      allOrNothing: true,
    });
    const other = windowedRateLimit(stats, "d.other", 10, Unit.MINUTE, {
      allOrNothing: true,
    });
    await cache.doLimit(
      limitRequest("d", [descriptor(["k", "f"])], [full], [1]),
    ); // fills the window
    // Over, with a full window: enters the local cache (not charged).
    await cache.doLimit(
      limitRequest("d", [descriptor(["k", "f"])], [full], [1]),
    );
    const statuses = await cache.doLimit(
      limitRequest(
        "d",
        [descriptor(["k", "f"]), descriptor(["k", "o"])],
        [full, other],
        [1, 1],
      ),
    );
    expect(statuses.map((s) => Code[s.code])).toEqual(["OVER_LIMIT", "OK"]);
    expect(statuses[1]!.limitRemaining).toBe(10);
    expect(full.stats.overLimitWithLocalCache.value()).toBe(1);
    // A request that would go over a window that is not full does not enter the cache.
    const big = await cache.doLimit(
      limitRequest("d", [descriptor(["k", "o"])], [other], [11]),
    );
    expect(big[0]!.code).toBe(Code.OVER_LIMIT);
    const small = await cache.doLimit(
      limitRequest("d", [descriptor(["k", "o"])], [other], [1]),
    );
    expect(small[0]!.code).toBe(Code.OK);
    await cache.close();
  });
});
