import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CalendarWindow } from "../../../src/config/calendar-window.js";
import type { RateLimit } from "../../../src/config/rate-limit-config.js";
import {
  gcraCacheKeyTail,
  resolveGcraParams,
} from "../../../src/limiter/gcra.js";
import { createDecider } from "../../../src/limiter/decide.js";
import {
  RateLimitDescriptorSchema,
  RateLimitResponse_Code as Code,
  RateLimitResponse_RateLimit_Unit as Unit,
  type RateLimitResponse_DescriptorStatus,
} from "../../../src/proto.js";
import {
  createStatsManager,
  type StatsManager,
} from "../../../src/stats/stats-manager.js";
import { FakeClock } from "../../helpers/fake-clock.js";
import { memoryLimiter } from "../../helpers/limiters.js";
import {
  calendarWindow,
  testRateLimit,
  tokenBucket,
  windowedRateLimit,
} from "../../helpers/rate-limit.js";
import { limitRequest } from "../../helpers/limit-request.js";
import { peekCounters } from "../../helpers/decisions.js";

// The decision pipeline with the limits of issue 23 on the memory backend: token buckets
// (GCRA), calendar windows and several limits per descriptor, in the usual and in the
// all-or-nothing charge mode, with refunds. The config side (YAML → these RateLimit fields) is
// tested in test/unit/config; the stores' part of token buckets in
// test/integration/counter-backend-contract.test.ts.

const now = 1_700_000_040; // 2023-11-14T22:14:00Z
const descriptor = create(RateLimitDescriptorSchema, {
  entries: [{ key: "k", value: "v" }],
});

/** A token bucket of `rate` per `unit` with `burst`, as the config loader builds it. */
function bucket(
  stats: StatsManager,
  statsKey: string,
  rate: number,
  unit: Unit,
  burst: number,
  extra: Partial<RateLimit> = {},
): RateLimit {
  const base = testRateLimit(stats, statsKey, rate, unit);
  return {
    ...base,
    algorithm: tokenBucket(
      resolveGcraParams({
        requestsPerUnit: rate,
        windowSeconds: base.windowSeconds,
        burst,
      }),
    ),
    cacheKeySuffix: gcraCacheKeyTail(base.windowSeconds, rate, burst),
    ...extra,
  };
}

function setup(allOrNothing = false) {
  const clock = new FakeClock(now);
  const stats = createStatsManager();
  const limiter = memoryLimiter({ clock, decider: createDecider({ clock }) });
  const call = async (
    limit: RateLimit,
    hits = 1,
  ): Promise<RateLimitResponse_DescriptorStatus> => {
    const [status] = await limiter.doLimit(
      limitRequest(
        "d",
        [descriptor],
        [allOrNothing ? { ...limit, allOrNothing: true } : limit],
        [hits],
      ),
    );
    return status!;
  };
  return { clock, stats, limiter, call };
}

describe("token bucket (GCRA) in the pipeline", () => {
  it("admits the burst at once, then one hit per emission interval", async () => {
    const { clock, stats, call } = setup();
    // 10 per minute: one hit every 6 s; burst 3.
    const limit = bucket(stats, "d.k_v", 10, Unit.MINUTE, 3);
    const first = await call(limit);
    expect(first.code).toBe(Code.OK);
    expect(first.limitRemaining).toBe(2);
    expect(first.durationUntilReset?.seconds).toBe(6n);
    expect(first.currentLimit?.requestsPerUnit).toBe(10);
    expect((await call(limit)).limitRemaining).toBe(1);
    expect((await call(limit)).limitRemaining).toBe(0);
    const refused = await call(limit);
    expect(refused.code).toBe(Code.OVER_LIMIT);
    // Full again 18 s after the first three hits.
    expect(refused.durationUntilReset?.seconds).toBe(18n);
    clock.seconds += 5;
    expect((await call(limit)).code).toBe(Code.OVER_LIMIT);
    clock.seconds += 1;
    const next = await call(limit);
    expect(next.code).toBe(Code.OK);
    expect(next.limitRemaining).toBe(0);
    const s = limit.stats;
    expect(s.totalHits.value()).toBe(6);
    expect(s.overLimit.value()).toBe(2);
    expect(s.withinLimit.value()).toBe(4);
    // floor(3 × 0.8) = 2: the hits that took the used part above 2 are near the limit.
    expect(s.nearLimit.value()).toBe(2);
  });

  it("refuses a request of more hits than the burst, and takes nothing for it", async () => {
    const { stats, call } = setup();
    const limit = bucket(stats, "d.k_v", 10, Unit.MINUTE, 3);
    const refused = await call(limit, 4);
    expect(refused.code).toBe(Code.OVER_LIMIT);
    expect(refused.limitRemaining).toBe(3);
    expect((await call(limit, 3)).code).toBe(Code.OK);
  });

  it("a refund gives the hits back, never beyond a full bucket, always OK and without statistic", async () => {
    const { stats, call } = setup();
    const limit = bucket(stats, "d.k_v", 10, Unit.MINUTE, 3);
    await call(limit, 3);
    expect((await call(limit)).code).toBe(Code.OVER_LIMIT);
    const refund = await call(limit, -2);
    expect(refund.code).toBe(Code.OK);
    expect(refund.limitRemaining).toBe(2);
    const again = await call(limit, -5);
    expect(again.limitRemaining).toBe(3);
    expect(limit.stats.totalHits.value()).toBe(4);
    expect((await call(limit, 3)).code).toBe(Code.OK);
  });

  it("shadow mode answers OK and counts the refused hits in shadow_mode", async () => {
    const { stats, call } = setup();
    const limit = bucket(stats, "d.k_v", 10, Unit.MINUTE, 1, {
      shadowMode: true,
    });
    expect((await call(limit)).code).toBe(Code.OK);
    expect((await call(limit)).code).toBe(Code.OK);
    expect(limit.stats.shadowMode.value()).toBe(1);
    expect(limit.stats.overLimit.value()).toBe(1);
  });
});

describe("several limits per descriptor", () => {
  function pair(stats: StatsManager): RateLimit {
    const perHour = windowedRateLimit(stats, "d.k_v_per_hour", 5, Unit.HOUR);
    const perSecond = windowedRateLimit(
      stats,
      "d.k_v_per_second",
      2,
      Unit.SECOND,
    );
    return {
      ...perSecond,
      cacheKeySuffix: "_w1",
      statsKeySuffix: "_per_second",
      extraLimits: [
        { ...perHour, cacheKeySuffix: "_w3600", statsKeySuffix: "_per_hour" },
      ],
    };
  }

  it("is over limit when any limit is, and reports the tightest", async () => {
    const { clock, stats, limiter, call } = setup();
    const limit = pair(stats);
    const first = await call(limit);
    expect(first.code).toBe(Code.OK);
    // 2/s leaves 1, 5/h leaves 4: the per-second limit is the tighter.
    expect(first.currentLimit?.unit).toBe(Unit.SECOND);
    expect(first.limitRemaining).toBe(1);
    const second = await call(limit);
    expect(second.limitRemaining).toBe(0);
    expect(second.currentLimit?.unit).toBe(Unit.SECOND);
    const third = await call(limit);
    expect(third.code).toBe(Code.OVER_LIMIT);
    expect(third.currentLimit?.unit).toBe(Unit.SECOND);
    clock.seconds += 1;
    // Each limit has its own counter: the hour's holds all three hits. 1 left on each: a tie
    // reports the earlier limit of the list.
    const fourth = await call(limit);
    expect(fourth.code).toBe(Code.OK);
    expect(fourth.currentLimit?.unit).toBe(Unit.SECOND);
    expect(fourth.limitRemaining).toBe(1);
    clock.seconds += 1;
    const fifth = await call(limit);
    expect(fifth.currentLimit?.unit).toBe(Unit.HOUR);
    expect(fifth.limitRemaining).toBe(0);
    clock.seconds += 1;
    const over = await call(limit);
    expect(over.code).toBe(Code.OVER_LIMIT);
    expect(over.currentLimit?.unit).toBe(Unit.HOUR);
    expect(limit.stats.totalHits.value()).toBe(6);
    expect(limit.extraLimits![0]!.stats.totalHits.value()).toBe(6);
    expect(limit.stats.overLimit.value()).toBe(1);
    expect(limit.extraLimits![0]!.stats.overLimit.value()).toBe(1);
    const keys = limiter.backend.size;
    expect(keys).toBeGreaterThanOrEqual(2);
  });

  it("all-or-nothing: a request refused by one limit takes nothing from the other", async () => {
    const { clock, stats, call } = setup(true);
    const limit = pair(stats);
    await call(limit);
    await call(limit);
    expect((await call(limit)).code).toBe(Code.OVER_LIMIT);
    expect((await call(limit)).code).toBe(Code.OVER_LIMIT);
    clock.seconds += 1;
    // Only the two admitted hits are in the hour's counter: 3 left.
    const next = await call(limit);
    expect(next.code).toBe(Code.OK);
    expect(next.currentLimit?.unit).toBe(Unit.SECOND);
    clock.seconds += 1;
    await call(limit);
    clock.seconds += 1;
    const last = await call(limit);
    expect(last.code).toBe(Code.OK);
    expect(last.currentLimit?.unit).toBe(Unit.HOUR);
    expect(last.limitRemaining).toBe(0);
  });

  it("a bucket and a window: all-or-nothing gives the bucket's hits back when the window refuses", async () => {
    const { stats, call } = setup(true);
    const window = windowedRateLimit(stats, "d.k_v_per_minute", 2, Unit.MINUTE);
    const limit: RateLimit = {
      ...bucket(stats, "d.k_v_per_second", 10, Unit.SECOND, 5),
      statsKeySuffix: "_per_second",
      extraLimits: [
        { ...window, cacheKeySuffix: "_w60", statsKeySuffix: "_per_minute" },
      ],
    };
    expect((await call(limit)).code).toBe(Code.OK);
    expect((await call(limit)).code).toBe(Code.OK);
    const refused = await call(limit);
    expect(refused.code).toBe(Code.OVER_LIMIT);
    expect(refused.currentLimit?.unit).toBe(Unit.MINUTE);
    // The bucket (burst 5) gave the refused hit back: two taken, three left.
    const bucketOnly: RateLimit = { ...limit, extraLimits: undefined };
    const read = await call(bucketOnly, 0);
    expect(read.limitRemaining).toBe(3);
  });

  it("the usual mode: a refused bucket takes nothing, the window counts the hit", async () => {
    const { stats, call } = setup();
    const window = windowedRateLimit(
      stats,
      "d.k_v_per_minute",
      100,
      Unit.MINUTE,
    );
    const limit: RateLimit = {
      ...bucket(stats, "d.k_v_per_second", 1, Unit.SECOND, 1),
      statsKeySuffix: "_per_second",
      extraLimits: [
        { ...window, cacheKeySuffix: "_w60", statsKeySuffix: "_per_minute" },
      ],
    };
    expect((await call(limit)).code).toBe(Code.OK);
    const refused = await call(limit);
    expect(refused.code).toBe(Code.OVER_LIMIT);
    expect(refused.currentLimit?.unit).toBe(Unit.SECOND);
    const windowOnly: RateLimit = {
      ...limit.extraLimits![0]!,
    };
    const read = await call(windowOnly, 0);
    expect(read.limitRemaining).toBe(98);
  });
});

describe("calendar windows in the pipeline", () => {
  it("keys the counter by the local period and resets at local midnight on the 1st", async () => {
    const { clock, stats, limiter, call } = setup();
    const base = windowedRateLimit(stats, "d.k_v", 2, Unit.MONTH);
    const limit: RateLimit = {
      ...base,
      algorithm: calendarWindow(
        new CalendarWindow({
          unit: "month",
          timeZone: "Europe/Berlin",
        }),
      ),
    };
    const first = await call(limit);
    expect(first.code).toBe(Code.OK);
    // December 1st, 00:00 in Berlin (UTC+1 in winter) is November 30th, 23:00 UTC.
    const end = Date.UTC(2023, 10, 30, 23) / 1000;
    expect(first.durationUntilReset?.seconds).toBe(BigInt(end - now));
    const [reading] = await peekCounters(
      limiter,
      limitRequest("d", [descriptor], [limit]),
    );
    expect(reading?.key).toBe("d_k_v_2023-11@Europe/Berlin");
    expect(reading?.value).toBe(1);
    await call(limit);
    expect((await call(limit)).code).toBe(Code.OVER_LIMIT);
    // One second before the local month ends: still November's counter.
    clock.seconds = end - 1;
    expect((await call(limit)).code).toBe(Code.OVER_LIMIT);
    clock.seconds = end;
    const december = await call(limit);
    expect(december.code).toBe(Code.OK);
    expect(december.limitRemaining).toBe(1);
    // December has 31 days and no DST change in Berlin.
    expect(december.durationUntilReset?.seconds).toBe(BigInt(31 * 86400));
  });

  it("a refund takes hits back from the current period's counter", async () => {
    const { stats, call } = setup();
    const base = windowedRateLimit(stats, "d.k_v", 2, Unit.DAY);
    const limit: RateLimit = {
      ...base,
      algorithm: calendarWindow(
        new CalendarWindow({ unit: "day", timeZone: "Asia/Tokyo" }),
      ),
    };
    await call(limit);
    await call(limit);
    expect((await call(limit)).code).toBe(Code.OVER_LIMIT);
    const refund = await call(limit, -2);
    expect(refund.code).toBe(Code.OK);
    expect(refund.limitRemaining).toBe(1);
  });
});
