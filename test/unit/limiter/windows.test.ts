import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { unitToSeconds, windowShape } from "../../../src/config/units.js";
import { createDecider } from "../../../src/limiter/decide.js";
import { generateCacheKeys } from "../../helpers/decisions.js";
import {
  previousWindowWeight,
  secondsUntilReset,
  slidingSecondsUntilDecrease,
  windowStartSeconds,
} from "../../../src/limiter/window.js";
import {
  RateLimitDescriptorSchema,
  RateLimitResponse_Code as Code,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../../../src/proto.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { FakeClock } from "../../helpers/fake-clock.js";
import { windowedRateLimit } from "../../helpers/rate-limit.js";

const units = [
  Unit.SECOND,
  Unit.MINUTE,
  Unit.HOUR,
  Unit.DAY,
  Unit.WEEK,
  Unit.MONTH,
  Unit.YEAR,
];
const multipliers = [1, 2, 3, 5, 7, 12, 60];

const descriptor = create(RateLimitDescriptorSchema, {
  entries: [{ key: "k", value: "v" }],
});

describe("windows of unit × unit_multiplier", () => {
  for (const unit of units) {
    for (const multiplier of multipliers) {
      it(`unit ${Unit[unit]} × ${multiplier}: aligned to multiples of the window since the epoch`, () => {
        const shape = windowShape(unit, multiplier, false);
        const window = unitToSeconds(unit) * multiplier;
        expect(shape.windowSeconds).toBe(window);
        // The reference's key for one unit; a suffix naming the window otherwise.
        expect(shape.cacheKeySuffix).toBe(
          multiplier === 1 ? "" : `_w${window}`,
        );
        expect(windowShape(unit, multiplier, true).cacheKeySuffix).toBe(
          `_s${window}`,
        );
        const k = 3;
        const clock = new FakeClock(k * window);
        const stats = createStatsManager();
        const base = createDecider({
          clock,
          expirationJitterMaxSeconds: 0,
        });
        const limit = windowedRateLimit(stats, "d.k_v", 5, unit, {
          unitMultiplier: multiplier,
        });
        for (const offset of new Set([
          0,
          Math.min(1, window - 1),
          window - 1,
        ])) {
          const now = k * window + offset;
          expect(windowStartSeconds(now, window)).toBe(k * window);
          expect(secondsUntilReset(now, window)).toBe(window - offset);
          const [key] = generateCacheKeys(
            base,
            clock,
            "d",
            [descriptor],
            [limit],
            [1],
            now,
          );
          expect(key?.key).toBe(`d_k_v_${k * window}${shape.cacheKeySuffix}`);
          expect(key?.previousKey).toBeUndefined();
          const status = base.descriptorStatus(key!.key, limit, 1, 1, now);
          expect(status.durationUntilReset?.seconds).toBe(
            BigInt(window - offset),
          );
          // The reported unit stays the proto enum.
          expect(status.currentLimit?.unit).toBe(unit);
        }
        // The next window starts exactly one window later.
        expect(windowStartSeconds((k + 1) * window, window)).toBe(
          (k + 1) * window,
        );
        expect(base.expirationSeconds(limit)).toBe(window);
      });
    }
  }

  it("keeps the reference's key and reset for one-unit fixed windows", () => {
    const clock = new FakeClock(1234);
    const base = createDecider({ clock });
    const limit = windowedRateLimit(
      createStatsManager(),
      "d.k_v",
      5,
      Unit.MINUTE,
    );
    const [key] = generateCacheKeys(
      base,
      clock,
      "d",
      [descriptor],
      [limit],
      [1],
      1234,
    );
    expect(key).toEqual({
      key: "d_k_v_1200",
      perSecond: false,
      previousKey: undefined,
    });
  });
});

describe("sliding-window weighting", () => {
  it("weighs the previous window by the share of it still inside the sliding window", () => {
    expect(previousWindowWeight(10, 600, 60)).toBe(10); // e = 0: all of it
    expect(previousWindowWeight(10, 601, 60)).toBe(10); // ceil(10 × 59/60)
    expect(previousWindowWeight(10, 630, 60)).toBe(5);
    expect(previousWindowWeight(10, 654, 60)).toBe(1); // ceil(10 × 6/60)
    expect(previousWindowWeight(10, 659, 60)).toBe(1); // ceil(10 × 1/60)
    expect(previousWindowWeight(0, 630, 60)).toBe(0);
  });

  it("finds the first second at which the weighted count falls by one", () => {
    const weighted = (
      windowStart: number,
      previous: number,
      current: number,
      t: number,
      window: number,
    ): number => {
      // Counters as seen at time t, with no new hits after windowStart's window.
      if (t < windowStart + window) {
        return current + previousWindowWeight(previous, t, window);
      }
      if (t < windowStart + 2 * window)
        return previousWindowWeight(current, t, window);
      return 0;
    };
    for (const window of [1, 2, 5, 60]) {
      const start = 100 * window;
      for (let previous = 0; previous <= 25; previous++) {
        for (let current = 0; current <= 4; current++) {
          for (let e = 0; e < window; e++) {
            const now = start + e;
            const reset = slidingSecondsUntilDecrease(
              previous,
              current,
              now,
              window,
            );
            expect(reset).toBeGreaterThanOrEqual(1);
            const count = weighted(start, previous, current, now, window);
            if (count === 0) {
              expect(reset).toBe(window - e);
              continue;
            }
            expect(
              weighted(start, previous, current, now + reset, window),
            ).toBeLessThan(count);
            expect(
              weighted(start, previous, current, now + reset - 1, window),
            ).toBe(count);
          }
        }
      }
    }
  });

  it("decides and reports from the weighted count at the window edges", () => {
    const clock = new FakeClock(0);
    const base = createDecider({ clock, expirationJitterMaxSeconds: 0 });
    const limit = windowedRateLimit(
      createStatsManager(),
      "d.k_v",
      10,
      Unit.MINUTE,
      {
        sliding: true,
      },
    );
    expect(base.expirationSeconds(limit)).toBe(120);
    const [key] = generateCacheKeys(
      base,
      clock,
      "d",
      [descriptor],
      [limit],
      [1],
      6030,
    );
    expect(key?.key).toBe("d_k_v_6000_s60");
    expect(key?.previousKey).toBe("d_k_v_5940_s60");
    // First second of the window: the previous 10 weigh fully.
    const first = base.counterStatus("k", limit, 1, 10, 1, 6000, true);
    expect(first.code).toBe(Code.OVER_LIMIT);
    // Halfway: 5 + 5 = 10 fits exactly.
    const half = base.counterStatus("k", limit, 5, 10, 1, 6030, true);
    expect(half.code).toBe(Code.OK);
    expect(half.limitRemaining).toBe(0);
    // ceil(10 × 30/60) = 5 falls to 4 when 10 × (60 − e) ≤ 40 × 6, at e = 36.
    expect(half.durationUntilReset?.seconds).toBe(6n);
    const halfOver = base.counterStatus("k", limit, 6, 10, 1, 6030, true);
    expect(halfOver.code).toBe(Code.OVER_LIMIT);
    // Last second: ceil(10/60) = 1.
    const last = base.counterStatus("k", limit, 9, 10, 1, 6059, true);
    expect(last).toMatchObject({ code: Code.OK, limitRemaining: 0 });
    expect(last.durationUntilReset?.seconds).toBe(1n);
  });

  it("reports an uncharged descriptor's untouched budget", () => {
    const clock = new FakeClock(0);
    const base = createDecider({ clock });
    const limit = windowedRateLimit(
      createStatsManager(),
      "d.k_v",
      10,
      Unit.MINUTE,
    );
    const ok = base.counterStatus("k", limit, 4, 0, 3, 6000, false);
    expect(ok).toMatchObject({ code: Code.OK, limitRemaining: 6 });
    const over = base.counterStatus("k", limit, 9, 0, 3, 6000, false);
    expect(over.code).toBe(Code.OVER_LIMIT);
  });
});
