// The algorithm kinds as modules (issue 32 item 2): every kind is listed under its own name with
// its store operation, and a kind's plan step and status, called through its AlgorithmKind,
// give what the Decider gives for the same limit (which dispatches on limit.algorithm.kind).
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CalendarWindow } from "../../../src/config/calendar-window.js";
import { resolveGcraParams } from "../../../src/config/token-bucket.js";
import type { PlanStep } from "../../../src/limiter/algorithm-kind.js";
import { kinds } from "../../../src/limiter/algorithms.js";
import { createDecider } from "../../../src/limiter/decide.js";
import { gcraDecide } from "../../../src/limiter/gcra.js";
import { limitRequest } from "../../helpers/limit-request.js";
import { PlannedDescriptor } from "../../../src/limiter/request-plan.js";
import {
  RateLimitDescriptorSchema,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../../../src/proto.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { FakeClock } from "../../helpers/fake-clock.js";
import {
  calendarWindow,
  testRateLimit,
  tokenBucket,
  windowedRateLimit,
} from "../../helpers/rate-limit.js";

const now = 1_700_000_040; // 2023-11-14T22:14:00Z, 0 s into a minute, 40 s into a 100 s window
const descriptor = create(RateLimitDescriptorSchema, {
  entries: [{ key: "k", value: "v" }],
});

/** A plan step without jitter, local cache or statistics, at `now`. */
function step(): PlanStep {
  const s: PlanStep = {
    nowSeconds: now,
    nowUs: 0,
    microseconds: () => (s.nowUs = now * 1_000_000),
    windowEntry: (
      index,
      d,
      limit,
      hits,
      cacheKey,
      previousCacheKey,
      lifetimeSeconds,
      windowSeconds,
      windowEndSeconds,
    ) =>
      new PlannedDescriptor(
        index,
        d,
        limit,
        hits,
        cacheKey,
        previousCacheKey,
        false,
        lifetimeSeconds,
        windowSeconds,
        windowEndSeconds,
        false,
      ),
  };
  return s;
}

describe("algorithm kinds", () => {
  it("lists every kind under its own name, with its store operation", () => {
    expect(Object.keys(kinds).sort()).toEqual([
      "fixed_window",
      "sliding_window",
      "token_bucket",
    ]);
    for (const [name, kind] of Object.entries(kinds))
      expect(kind.kind).toBe(name);
    expect(kinds.fixed_window.operation).toBe("increment");
    expect(kinds.sliding_window.operation).toBe("increment");
    expect(kinds.token_bucket.operation).toBe("takeTokens");
  });

  it("plans a fixed window: one key per window start, a lifetime of one window", () => {
    const stats = createStatsManager();
    const limit = windowedRateLimit(stats, "d.k", 5, Unit.SECOND, {
      unitMultiplier: 100,
    });
    if (limit.algorithm.kind !== "fixed_window") throw new Error("kind");
    const planned = kinds.fixed_window.plan(
      step(),
      0,
      descriptor,
      limit,
      limit.algorithm,
      1,
      "d_k_v_",
    );
    expect(planned.cacheKey).toBe("d_k_v_1700000000_w100");
    expect(planned.previousCacheKey).toBeUndefined();
    expect(planned.expirationSeconds).toBe(100);
    expect(planned.windowEndSeconds).toBe(1_700_000_100);
  });

  it("plans a calendar window by its local period", () => {
    const stats = createStatsManager();
    const limit = testRateLimit(stats, "d.k", 5, Unit.DAY, {
      algorithm: calendarWindow(
        new CalendarWindow({ unit: "day", timeZone: "Asia/Tokyo" }),
      ),
    });
    if (limit.algorithm.kind !== "fixed_window") throw new Error("kind");
    const planned = kinds.fixed_window.plan(
      step(),
      0,
      descriptor,
      limit,
      limit.algorithm,
      1,
      "d_k_v_",
    );
    // 22:14 UTC is 07:14 on November 15th in Tokyo, whose day ends at 15:00 UTC.
    expect(planned.cacheKey).toBe("d_k_v_2023-11-15@Asia/Tokyo");
    expect(planned.windowEndSeconds).toBe(Date.UTC(2023, 10, 15, 15) / 1000);
    expect(planned.windowSeconds).toBe(86_400);
  });

  it("plans a sliding window with the previous window's key and two windows of lifetime", () => {
    const stats = createStatsManager();
    const limit = windowedRateLimit(stats, "d.k", 5, Unit.MINUTE, {
      sliding: true,
    });
    if (limit.algorithm.kind !== "sliding_window") throw new Error("kind");
    const planned = kinds.sliding_window.plan(
      step(),
      0,
      descriptor,
      limit,
      limit.algorithm,
      1,
      "d_k_v_",
    );
    expect(planned.cacheKey).toBe("d_k_v_1700000040_s60");
    expect(planned.previousCacheKey).toBe("d_k_v_1699999980_s60");
    expect(planned.expirationSeconds).toBe(120);
    expect(planned.sliding).toBe(true);
  });

  it("plans a token bucket on one key, reading the µs clock once", () => {
    const stats = createStatsManager();
    const bucket = resolveGcraParams({
      requestsPerUnit: 10,
      windowSeconds: 1,
      burst: 20,
    });
    const limit = testRateLimit(stats, "d.k", 10, Unit.SECOND, {
      algorithm: tokenBucket(bucket),
      cacheKeySuffix: "tb1_10_20",
    });
    if (limit.algorithm.kind !== "token_bucket") throw new Error("kind");
    const s = step();
    const planned = kinds.token_bucket.plan(
      s,
      0,
      descriptor,
      limit,
      limit.algorithm,
      1,
      "d_k_v_",
    );
    expect(planned.cacheKey).toBe("d_k_v_tb1_10_20");
    expect(planned.tokenBucket).toBe(bucket);
    expect(planned.sliding).toBe(false);
    expect(s.nowUs).toBe(now * 1_000_000);
  });

  it("decides as the Decider does, for each kind", () => {
    const clock = new FakeClock(now);
    const context = { ratio: Math.fround(0.8), localCache: undefined };
    for (const sliding of [false, true]) {
      for (const current of [0, 4, 5, 6, 9]) {
        const limit = windowedRateLimit(
          createStatsManager(),
          "d.k",
          5,
          Unit.MINUTE,
          { sliding },
        );
        const other = windowedRateLimit(
          createStatsManager(),
          "d.k",
          5,
          Unit.MINUTE,
          { sliding },
        );
        const planned = createDecider({ clock }).plan(
          limitRequest("d", [descriptor], [limit], [1]),
          false,
          false,
        ).counted[0]!;
        planned.current = current;
        planned.previous = 3;
        const kind = limit.algorithm.kind;
        const viaKind =
          limit.algorithm.kind === "sliding_window"
            ? kinds.sliding_window.status(
                context,
                planned,
                limit.algorithm,
                current,
                now,
                true,
              )
            : limit.algorithm.kind === "fixed_window"
              ? kinds.fixed_window.status(
                  context,
                  planned,
                  limit.algorithm,
                  current,
                  now,
                  true,
                )
              : undefined;
        const viaDecider = createDecider({ clock }).counterStatus(
          planned.cacheKey,
          other,
          current,
          3,
          1,
          now,
          true,
        );
        expect(viaKind, `${kind} at ${current}`).toEqual(viaDecider);
        expect(limit.stats.overLimit.value()).toBe(
          other.stats.overLimit.value(),
        );
        expect(limit.stats.nearLimit.value()).toBe(
          other.stats.nearLimit.value(),
        );
      }
    }
    const bucket = resolveGcraParams({
      requestsPerUnit: 10,
      windowSeconds: 1,
      burst: 2,
    });
    const limit = testRateLimit(createStatsManager(), "d.k", 10, Unit.SECOND, {
      algorithm: tokenBucket(bucket),
    });
    if (limit.algorithm.kind !== "token_bucket") throw new Error("kind");
    const entry = createDecider({ clock }).plan(
      limitRequest("d", [descriptor], [limit], [3]),
      false,
      false,
    ).buckets[0]!;
    entry.decision = gcraDecide(0, now * 1_000_000, 3, bucket);
    expect(
      kinds.token_bucket.status(context, entry, limit.algorithm, 0, now, true),
    ).toEqual(createDecider({ clock }).bucketStatus(limit, 3, entry.decision));
  });
});
