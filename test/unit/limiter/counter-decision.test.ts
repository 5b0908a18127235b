import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { createDecider } from "../../../src/limiter/decide.js";
import {
  counterDecision,
  weightedCount,
} from "../../../src/limiter/algorithms.js";
import {
  RateLimitResponse_Code as Code,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../../../src/proto.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { FakeClock } from "../../helpers/fake-clock.js";
import { windowedRateLimit } from "../../helpers/rate-limit.js";

describe("counterDecision", () => {
  it("is the arithmetic of the decider's counterStatus (any algorithm, charged or not)", () => {
    fc.assert(
      fc.property(
        fc.record({
          rpu: fc.integer({ min: 0, max: 20 }),
          unit: fc.constantFrom(Unit.SECOND, Unit.MINUTE, Unit.HOUR),
          multiplier: fc.integer({ min: 1, max: 7 }),
          sliding: fc.boolean(),
          current: fc.integer({ min: 0, max: 30 }),
          previous: fc.integer({ min: 0, max: 30 }),
          hits: fc.integer({ min: 0, max: 5 }),
          now: fc.integer({ min: 1_700_000_000, max: 1_700_100_000 }),
          charged: fc.boolean(),
        }),
        (c) => {
          const stats = createStatsManager();
          const limit = windowedRateLimit(stats, "d.k", c.rpu, c.unit, {
            unitMultiplier: c.multiplier,
            sliding: c.sliding,
          });
          const base = createDecider({ clock: new FakeClock(c.now) });
          const status = base.counterStatus(
            "k",
            limit,
            c.current,
            c.previous,
            c.hits,
            c.now,
            c.charged,
          );
          const d = counterDecision(
            limit,
            c.current,
            c.previous,
            c.hits,
            c.now,
            c.charged,
          );
          const over = d.count > c.rpu;
          expect(status.code).toBe(over ? Code.OVER_LIMIT : Code.OK);
          expect(status.limitRemaining).toBe(
            over ? 0 : d.remaining >= 0 ? d.remaining : c.rpu - d.count,
          );
          expect(status.durationUntilReset?.seconds).toBe(
            BigInt(d.resetSeconds),
          );
          expect(d.count - d.previousWeight).toBe(
            c.current + (c.charged ? 0 : c.hits),
          );
          expect(weightedCount(limit, c.current, c.previous, c.now)).toBe(
            c.current + d.previousWeight,
          );
          if (!c.sliding) expect(d.previousWeight).toBe(0);
        },
      ),
      { numRuns: 500 },
    );
  });
});
