// The pipeline's dry run (RateLimitPipeline.dryRun), which Explain decides with: the same
// statuses as doLimit over the same counters, in every charge mode, while the store, the
// limits' statistics and the local cache stay as they were.
import { create } from "@bufbuild/protobuf";
import { afterEach, describe, expect, it } from "vitest";
import { MemoryCounterBackend } from "../../../src/backends/memory/memory-counter-backend.js";
import { resolveGcraParams } from "../../../src/config/token-bucket.js";
import type { RateLimit } from "../../../src/config/rate-limit-config.js";
import { createDecider } from "../../../src/limiter/decide.js";
import { limitRequest } from "../../helpers/limit-request.js";
import { createLocalCache } from "../../../src/limiter/local-cache.js";
import { RateLimitPipeline } from "../../../src/limiter/pipeline.js";
import {
  RateLimitDescriptorSchema,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../../../src/proto.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { FakeClock } from "../../helpers/fake-clock.js";
import {
  testRateLimit,
  tokenBucket,
  windowedRateLimit,
} from "../../helpers/rate-limit.js";

const opened: MemoryCounterBackend[] = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map((b) => b.close()));
});

function descriptor(value: string) {
  return create(RateLimitDescriptorSchema, {
    entries: [{ key: "k", value }],
  });
}

/** A pipeline on a fresh memory store, with a local cache, on `clock`. */
function pipeline(clock: FakeClock, stopIncrement: boolean) {
  const backend = new MemoryCounterBackend({ clock });
  opened.push(backend);
  const localCache = createLocalCache({ maxBytes: 1 << 20, clock });
  const decider = createDecider({ clock, localCache, random: () => 0.5 });
  return {
    localCache,
    pipeline: new RateLimitPipeline({
      backend,
      decider,
      stopCacheKeyIncrementWhenOverlimit: stopIncrement,
    }),
  };
}

const stats = createStatsManager();
const muted = createStatsManager().rateLimitStats("muted");
const limits = {
  fixed: windowedRateLimit(stats, "d.fixed", 3, Unit.MINUTE),
  sliding: windowedRateLimit(stats, "d.sliding", 4, Unit.MINUTE, {
    sliding: true,
  }),
  bucket: testRateLimit(stats, "d.bucket", 3, Unit.MINUTE, {
    algorithm: tokenBucket(
      resolveGcraParams({ requestsPerUnit: 3, windowSeconds: 60 }),
    ),
    cacheKeySuffix: "tb",
  }),
};
const aon = Object.fromEntries(
  Object.entries(limits).map(([k, l]) => [k, { ...l, allOrNothing: true }]),
) as Record<keyof typeof limits, RateLimit>;

/** Every statistic of the test limits, as numbers. */
function allStats(): number[] {
  return Object.values(limits).flatMap((l) => [
    l.stats.totalHits.value(),
    l.stats.overLimit.value(),
    l.stats.nearLimit.value(),
    l.stats.withinLimit.value(),
    l.stats.shadowMode.value(),
  ]);
}

describe("RateLimitPipeline.dryRun", () => {
  for (const [mode, set, stop] of [
    ["usual", limits, false],
    ["stop-increment", limits, true],
    ["all-or-nothing", aon, false],
  ] as const)
    it(`answers as doLimit and changes nothing (${mode})`, async () => {
      const clock = new FakeClock(1_800_000_000);
      const real = pipeline(clock, stop);
      const dry = pipeline(clock, stop);
      // Two descriptors on one counter and one bucket: the run sequences them as the store.
      const values = ["a", "a", "b"];
      const request = () =>
        limitRequest(
          "d",
          [...values, ...values, ...values].map(descriptor),
          [
            ...values.map(() => set.fixed),
            ...values.map(() => set.sliding),
            ...values.map(() => set.bucket),
          ],
          [1, 2, 1, 1, 2, 1, 1, 2, 1],
        );
      for (let step = 0; step < 6; step++) {
        const before = allStats();
        const cached = dry.localCache.size;
        const run = await dry.pipeline.dryRun(request(), { stats: muted });
        expect(allStats()).toEqual(before);
        expect(dry.localCache.size).toBe(cached);
        const want = await real.pipeline.doLimit(request());
        expect(run.statuses).toEqual(want);
        // Charge the dry store the same way, so both stay equal.
        await dry.pipeline.doLimit(request());
        clock.seconds += 7;
      }
    });
});
