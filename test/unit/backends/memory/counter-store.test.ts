import { create } from "@bufbuild/protobuf";
import { describe, expect, it, onTestFinished, vi } from "vitest";
import { CounterStore } from "../../../../src/backends/memory/counter-store.js";
import { memoryStatNames } from "../../../../src/backends/memory/memory-counter-backend.js";
import { createDecider } from "../../../../src/limiter/decide.js";
import {
  RateLimitDescriptorSchema,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../../../../src/proto.js";
import { createStatsManager } from "../../../../src/stats/stats-manager.js";
import { FakeClock } from "../../../helpers/fake-clock.js";
import { testRateLimit } from "../../../helpers/rate-limit.js";
import { memoryLimiter } from "../../../helpers/limiters.js";
import { limitRequest } from "../../../helpers/limit-request.js";

describe("CounterStore", () => {
  it("reads 0 for absent keys, adds hits, creates a counter for 0 hits", () => {
    const store = new CounterStore();
    expect(store.count("a")).toBe(0);
    expect(store.add("a", 3, 60)).toBe(3);
    expect(store.add("a", 0, 60)).toBe(3);
    expect(store.add("b", 0, 60)).toBe(0);
    expect(store.size).toBe(2);
    expect(store.count("a")).toBe(3);
    // Counts past 2^31 stay exact.
    expect(store.add("a", 2 ** 40, 60)).toBe(2 ** 40 + 3);
  });

  it("drops the windows that ended at or before now, and only those", () => {
    const store = new CounterStore();
    store.add("m1", 1, 120);
    store.add("m2", 1, 120);
    store.add("h", 1, 3600);
    expect(store.sweep(119)).toBe(0);
    expect(store.sweep(120)).toBe(2);
    expect(store.count("m1")).toBe(0);
    expect(store.count("h")).toBe(1);
    expect(store.sweep(7200)).toBe(1);
    expect(store.size).toBe(0);
  });

  it("keeps at most maxKeys, dropping the windows that end soonest, oldest first", () => {
    const evicted: number[] = [];
    const store = new CounterStore({
      maxKeys: 3,
      onEvict: (n) => evicted.push(n),
    });
    store.add("hour", 1, 3600);
    store.add("min-old", 1, 60);
    store.add("min-new", 1, 60);
    store.add("again", 1, 120); // full: drops min-old
    expect(store.count("min-old")).toBe(0);
    expect(store.count("min-new")).toBe(1);
    store.add("more", 1, 120); // drops min-new (its window ends first)
    expect(store.count("min-new")).toBe(0);
    expect(store.count("hour")).toBe(1);
    store.add("again", 5, 120); // existing key: nothing dropped
    store.add("last", 1, 120); // drops "again" (oldest key of the soonest window)
    expect(store.count("again")).toBe(0);
    expect([
      store.count("hour"),
      store.count("more"),
      store.count("last"),
    ]).toEqual([1, 1, 1]);
    expect(store.size).toBe(3);
    expect(evicted).toEqual([1, 1, 1]);
  });

  it("keeps a token bucket's TAT until the second it is reached, however often it moves", () => {
    const store = new CounterStore();
    const s = 1_000_000;
    expect(store.tat("tb")).toBeUndefined();
    store.setTat("tb", 100 * s + 1); // listed at second 101
    store.setTat("tb", 130 * s); // moved later: still listed at 101
    expect(store.size).toBe(1);
    expect(store.sweep(101)).toBe(0); // listed again at 130, not dropped
    expect(store.tat("tb")).toBe(130 * s);
    store.setTat("tb", 120 * s); // a refund moves it earlier: it may live longer, harmless
    expect(store.sweep(129)).toBe(0);
    expect(store.sweep(130)).toBe(1);
    expect(store.tat("tb")).toBeUndefined();
    // Created again after the sweep: listed once more, swept once.
    store.setTat("tb", 140 * s);
    expect(store.sweep(139)).toBe(0);
    expect(store.sweep(140)).toBe(1);
    expect(store.size).toBe(0);
  });

  it("bounds counters and token buckets together, evicting a bucket at the second it is full", () => {
    const evicted: number[] = [];
    const store = new CounterStore({
      maxKeys: 3,
      onEvict: (n) => evicted.push(n),
    });
    const s = 1_000_000;
    store.setTat("tb-a", 50 * s); // listed at 50
    store.add("minute", 1, 60);
    store.setTat("tb-b", 55 * s);
    store.setTat("tb-a", 90 * s); // tb-a now full at 90: later than tb-b and the minute
    store.add("hour", 1, 3600); // full: drops the soonest, tb-b (55), not tb-a
    expect(store.tat("tb-b")).toBeUndefined();
    expect(store.tat("tb-a")).toBe(90 * s);
    store.setTat("tb-c", 3000 * s); // drops the minute (60), then tb-a would be next
    expect(store.count("minute")).toBe(0);
    store.add("day", 1, 86_400); // drops tb-a (90)
    expect(store.tat("tb-a")).toBeUndefined();
    expect([
      store.count("hour"),
      store.tat("tb-c"),
      store.count("day"),
    ]).toEqual([1, 3000 * s, 1]);
    expect(store.size).toBe(3);
    expect(evicted).toEqual([1, 1, 1]);
  });

  it("rejects a maxKeys that is not a positive integer", () => {
    expect(() => new CounterStore({ maxKeys: 0 })).toThrow(RangeError);
    expect(() => new CounterStore({ maxKeys: 1.5 })).toThrow(RangeError);
  });
});

describe("MemoryCounterBackend storage", () => {
  it("frees 1,000,000 distinct keys once their window ends (sweep timer, fake clock)", async () => {
    // The sweep runs on a fake setInterval: the test fires it, before and after the window ends.
    vi.useFakeTimers({ toFake: ["setInterval", "clearInterval"] });
    onTestFinished(() => {
      vi.useRealTimers();
    });
    const clock = new FakeClock(1_000_020);
    const stats = createStatsManager();
    const cache = memoryLimiter({
      decider: createDecider({ clock }),
      clock,
      sweepIntervalMs: 5,
      statsStore: stats.store,
      reportKeys: true,
    });
    const limit = testRateLimit(stats, "d.k", 10, Unit.MINUTE);
    const perCall = 1000;
    const limits = new Array(perCall).fill(limit);
    const hits = new Array<number>(perCall).fill(1);
    for (let call = 0; call < 1000; call++) {
      const descriptors = Array.from({ length: perCall }, (_, i) =>
        create(RateLimitDescriptorSchema, {
          entries: [{ key: "k", value: String(call * perCall + i) }],
        }),
      );
      await cache.doLimit(limitRequest("d", descriptors, limits, hits));
    }
    expect(cache.backend.size).toBe(1_000_000);
    clock.seconds = 1_000_079; // the last second of the window: a sweep keeps every key
    vi.advanceTimersByTime(5);
    expect(cache.backend.size).toBe(1_000_000);
    expect(stats.store.gauge(memoryStatNames.keys).value()).toBe(1_000_000);
    clock.seconds = 1_000_080; // the minute window [1_000_020, 1_000_080) has ended
    vi.advanceTimersByTime(5);
    expect(cache.backend.size).toBe(0);
    expect(stats.store.gauge(memoryStatNames.keys).value()).toBe(0);
    await cache.close();
  }, 120_000);

  it("counts keys dropped for maxKeys in ratelimit.memory.evicted_keys", async () => {
    const clock = new FakeClock(100);
    const stats = createStatsManager();
    const cache = memoryLimiter({
      decider: createDecider({ clock }),
      clock,
      maxKeys: 10,
      statsStore: stats.store,
    });
    const limit = testRateLimit(stats, "d.k", 10, Unit.MINUTE);
    for (let i = 0; i < 25; i++) {
      await cache.doLimit(
        limitRequest(
          "d",
          [
            create(RateLimitDescriptorSchema, {
              entries: [{ key: "k", value: `v${i}` }],
            }),
          ],
          [limit],
          [1],
        ),
      );
    }
    expect(cache.backend.size).toBe(10);
    expect(stats.store.counter(memoryStatNames.evictedKeys).value()).toBe(15);
    await cache.close();
  });
});
