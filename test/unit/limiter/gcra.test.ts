import { isDeepStrictEqual } from "node:util";
import { describe, expect, it } from "vitest";
import {
  gcraCacheKeyTail,
  gcraDecide,
  gcraExpirationMs,
  maxGcraCapacityUs,
  resolveGcraParams,
  type GcraDecision,
  type GcraParams,
} from "../../../src/limiter/gcra.js";
import {
  gcraCasStep,
  gcraDecisionFromReply,
  gcraScriptArgs,
} from "../../../src/limiter/gcra-scripts.js";
import { mulberry32 } from "../../helpers/seeded-random.js";

// The caller's clock in µs (a whole millisecond, as Clock.nowMs() × 1000 gives).
const t0 = 1_700_000_123_456_000;
const second = 1_000_000;

/** A stored TAT driven through {@link gcraDecide}, as a store would keep it. */
class Bucket {
  stored: number | undefined;
  constructor(readonly params: GcraParams) {}
  decide(nowUs: number, hits: number): GcraDecision {
    const d = gcraDecide(this.stored, nowUs, hits, this.params);
    if (d.newTatUs !== undefined) this.stored = d.newTatUs;
    return d;
  }
}

/**
 * An independent formulation: a token bucket holding `level` µs of credit (C when full),
 * refilled by the elapsed time; n hits cost n × T. GCRA must answer exactly as it does.
 */
class LevelModel {
  private level: number;
  private at: number | undefined;
  constructor(readonly params: GcraParams) {
    this.level = params.capacityUs;
  }
  decide(
    nowUs: number,
    hits: number,
  ): { allowed: boolean; remaining: number; resetAfterUs: number } {
    const { capacityUs, emissionIntervalUs: t, burst } = this.params;
    if (this.at !== undefined)
      this.level = Math.min(capacityUs, this.level + (nowUs - this.at));
    this.at = nowUs;
    let allowed = true;
    if (hits > 0) {
      allowed = hits <= burst && hits * t <= this.level;
      if (allowed) this.level -= hits * t;
    } else if (hits < 0) {
      this.level = Math.min(capacityUs, this.level - hits * t);
    }
    return {
      allowed,
      remaining: Math.floor(this.level / t),
      resetAfterUs: capacityUs - this.level,
    };
  }
}

describe("resolveGcraParams", () => {
  it("derives T, τ and C, rounding T up to a whole microsecond", () => {
    expect(
      resolveGcraParams({ requestsPerUnit: 10, windowSeconds: 1, burst: 5 }),
    ).toEqual({
      emissionIntervalUs: 100_000,
      burst: 5,
      toleranceUs: 400_000,
      capacityUs: 500_000,
    });
    // 3 per second: 333,333.3 µs rounds up (never admits more than configured).
    const third = resolveGcraParams({ requestsPerUnit: 3, windowSeconds: 1 });
    expect(third.emissionIntervalUs).toBe(333_334);
    // 100 per 5 minutes.
    expect(
      resolveGcraParams({ requestsPerUnit: 100, windowSeconds: 300 })
        .emissionIntervalUs,
    ).toBe(3_000_000);
  });

  it("defaults the burst to requests_per_unit", () => {
    const p = resolveGcraParams({ requestsPerUnit: 60, windowSeconds: 60 });
    expect(p.burst).toBe(60);
    expect(p.toleranceUs).toBe(59 * second);
    expect(p.capacityUs).toBe(60 * second);
    expect(Object.isFrozen(p)).toBe(true);
  });

  it("accepts the highest rate (one hit per µs) and the longest capacity", () => {
    expect(
      resolveGcraParams({ requestsPerUnit: 1_000_000, windowSeconds: 1 })
        .emissionIntervalUs,
    ).toBe(1);
    // floor(2⁵¹ / 10⁶) seconds is the longest one-hit capacity; a second more is refused.
    const longest = Math.floor(maxGcraCapacityUs / second);
    expect(
      resolveGcraParams({ requestsPerUnit: 1, windowSeconds: longest })
        .capacityUs,
    ).toBe(longest * second);
    expect(() =>
      resolveGcraParams({ requestsPerUnit: 1, windowSeconds: longest + 1 }),
    ).toThrow(RangeError);
  });

  it("refuses bad options by name", () => {
    expect(() =>
      resolveGcraParams({ requestsPerUnit: 0, windowSeconds: 1 }),
    ).toThrow(/requestsPerUnit must be an integer >= 1, got 0/);
    expect(() =>
      resolveGcraParams({ requestsPerUnit: 1.5, windowSeconds: 1 }),
    ).toThrow(/requestsPerUnit/);
    expect(() =>
      resolveGcraParams({ requestsPerUnit: 1, windowSeconds: 0 }),
    ).toThrow(/windowSeconds must be an integer >= 1/);
    expect(() =>
      resolveGcraParams({ requestsPerUnit: 1, windowSeconds: 1, burst: 0 }),
    ).toThrow(/burst must be an integer >= 1, got 0/);
    expect(() =>
      resolveGcraParams({ requestsPerUnit: 1_000_001, windowSeconds: 1 }),
    ).toThrow(RangeError);
    expect(() =>
      resolveGcraParams({
        requestsPerUnit: 1,
        windowSeconds: 86_400 * 365 * 100,
      }),
    ).toThrow(/longer than 2251799813685248 µs/);
  });
});

describe("gcraDecide", () => {
  const p = resolveGcraParams({ requestsPerUnit: 10, windowSeconds: 1 }); // T 100 ms, burst 10

  it("admits a first request on an absent key", () => {
    const d = gcraDecide(undefined, t0, 1, p);
    expect(d).toEqual({
      allowed: true,
      tatUs: t0 + 100_000,
      newTatUs: t0 + 100_000,
      limitRemaining: 9,
      resetAfterUs: 100_000,
      durationUntilResetSeconds: 1,
      retryAfterUs: 0,
      retryAfterSeconds: 0,
    });
    // A TAT in the past is the same as an absent key.
    expect(gcraDecide(t0 - 5 * second, t0, 1, p)).toEqual(d);
  });

  it("admits exactly burst hits at one instant and refuses the next without changing state", () => {
    const bucket = new Bucket(p);
    for (let i = 1; i <= 10; i++) {
      const d = bucket.decide(t0, 1);
      expect(d.allowed).toBe(true);
      expect(d.limitRemaining).toBe(10 - i);
    }
    expect(bucket.stored).toBe(t0 + second);
    const refused = bucket.decide(t0, 1);
    expect(refused).toEqual({
      allowed: false,
      tatUs: t0 + second,
      newTatUs: undefined,
      limitRemaining: 0,
      resetAfterUs: second,
      durationUntilResetSeconds: 1,
      retryAfterUs: 100_000,
      retryAfterSeconds: 1,
    });
    expect(bucket.stored).toBe(t0 + second);
  });

  it("admits a burst in one request, and refuses burst + 1 even on a full bucket", () => {
    expect(gcraDecide(undefined, t0, 10, p)).toMatchObject({
      allowed: true,
      newTatUs: t0 + second,
      limitRemaining: 0,
    });
    const tooMany = gcraDecide(undefined, t0, 11, p);
    expect(tooMany).toMatchObject({
      allowed: false,
      tatUs: t0,
      newTatUs: undefined,
      limitRemaining: 10,
      retryAfterUs: undefined,
      retryAfterSeconds: undefined,
    });
    // Huge addends are refused before any multiplication.
    expect(
      gcraDecide(t0 + 50_000, t0, Number.MAX_SAFE_INTEGER, p),
    ).toMatchObject({ allowed: false, newTatUs: undefined, limitRemaining: 9 });
  });

  it("refuses a request larger than the room left, keeping the room for smaller ones", () => {
    const bucket = new Bucket(p);
    bucket.decide(t0, 7);
    const d = bucket.decide(t0, 4);
    expect(d).toMatchObject({
      allowed: false,
      limitRemaining: 3,
      retryAfterUs: 100_000,
    });
    expect(bucket.decide(t0, 3).allowed).toBe(true);
  });

  it("refills one hit per emission interval", () => {
    const bucket = new Bucket(p);
    bucket.decide(t0, 10);
    expect(bucket.decide(t0 + 99_999, 1).allowed).toBe(false);
    const refilled = bucket.decide(t0 + 100_000, 1);
    expect(refilled).toMatchObject({ allowed: true, limitRemaining: 0 });
    expect(bucket.decide(t0 + 100_000, 1).allowed).toBe(false);
    // After a whole capacity of silence the bucket is full again, never fuller.
    expect(bucket.decide(t0 + 100 * second, 0).limitRemaining).toBe(10);
  });

  it("checks without changing anything for hits = 0", () => {
    const bucket = new Bucket(p);
    bucket.decide(t0, 4);
    const check = bucket.decide(t0 + 50_000, 0);
    expect(check).toEqual({
      allowed: true,
      tatUs: t0 + 400_000,
      newTatUs: undefined,
      limitRemaining: 6,
      resetAfterUs: 350_000,
      durationUntilResetSeconds: 1,
      retryAfterUs: 0,
      retryAfterSeconds: 0,
    });
    expect(bucket.stored).toBe(t0 + 400_000);
    // On an absent key: a full bucket; the reset is still reported as at least 1 s.
    expect(gcraDecide(undefined, t0, 0, p)).toMatchObject({
      allowed: true,
      newTatUs: undefined,
      limitRemaining: 10,
      resetAfterUs: 0,
      durationUntilResetSeconds: 1,
    });
  });

  it("refunds to zero: the TAT moves back by |hits| × T, to now", () => {
    const bucket = new Bucket(p);
    bucket.decide(t0, 3);
    const partial = bucket.decide(t0, -2);
    expect(partial).toMatchObject({
      allowed: true,
      newTatUs: t0 + 100_000,
      limitRemaining: 9,
    });
    const toZero = bucket.decide(t0, -1);
    expect(toZero).toMatchObject({
      allowed: true,
      newTatUs: t0,
      limitRemaining: 10,
      resetAfterUs: 0,
      durationUntilResetSeconds: 1,
    });
    expect(gcraExpirationMs(toZero.newTatUs!, t0)).toBe(0);
  });

  it("never refunds below now, and a refund is never refused", () => {
    const bucket = new Bucket(p);
    bucket.decide(t0, 5);
    // Half of it has refilled meanwhile; refund more than was ever taken.
    const d = bucket.decide(t0 + 250_000, -20);
    expect(d).toMatchObject({
      allowed: true,
      newTatUs: t0 + 250_000,
      limitRemaining: 10,
    });
    expect(bucket.decide(t0 + 250_000, 11).allowed).toBe(false);
    // A refund on a full bucket changes nothing.
    expect(gcraDecide(undefined, t0, -3, p)).toMatchObject({
      allowed: true,
      newTatUs: undefined,
      limitRemaining: 10,
    });
    expect(
      gcraDecide(t0 + 500_000, t0, -Number.MAX_SAFE_INTEGER, p).newTatUs,
    ).toBe(t0);
  });

  it("refuses, but still refunds, when another replica's clock put the TAT beyond C", () => {
    const ahead = t0 + 3 * second; // C is 1 s
    expect(gcraDecide(ahead, t0, 0, p)).toMatchObject({
      allowed: false,
      limitRemaining: 0,
      retryAfterUs: 2 * second,
      retryAfterSeconds: 2,
      durationUntilResetSeconds: 3,
    });
    expect(gcraDecide(ahead, t0, -1, p)).toMatchObject({
      allowed: true,
      newTatUs: ahead - 100_000,
      limitRemaining: 0,
    });
  });

  it("reports the reset in whole seconds, rounded up", () => {
    const slow = resolveGcraParams({ requestsPerUnit: 2, windowSeconds: 5 }); // T 2.5 s
    const d = gcraDecide(undefined, t0, 1, slow);
    expect(d.resetAfterUs).toBe(2_500_000);
    expect(d.durationUntilResetSeconds).toBe(3);
    expect(gcraExpirationMs(d.tatUs, t0)).toBe(2_500);
    expect(gcraExpirationMs(t0 + 1, t0)).toBe(1);
  });
});

describe("gcraCacheKeyTail", () => {
  it("names the window, the rate and the burst", () => {
    expect(gcraCacheKeyTail(60, 100, 150)).toBe("tb60_100_150");
  });
});

describe("the store operations' arithmetic", () => {
  const p = resolveGcraParams({
    requestsPerUnit: 5,
    windowSeconds: 60,
    burst: 3,
  });

  it("builds the script's ARGV as decimal integers", () => {
    expect(gcraScriptArgs(t0, -2, p)).toEqual([
      "1700000123456000",
      "-2",
      "12000000",
      "36000000",
      "3",
    ]);
  });

  it("reads a script reply as the pure decision", () => {
    const admitted = gcraDecide(undefined, t0, 2, p);
    expect(gcraDecisionFromReply([1, admitted.tatUs, 1], t0, 2, p)).toEqual(
      admitted,
    );
    const refused = gcraDecide(admitted.tatUs, t0, 2, p);
    expect(gcraDecisionFromReply([0, refused.tatUs, 0], t0, 2, p)).toEqual(
      refused,
    );
    for (const bad of [[], [1, t0], [2, t0, 0], [1, t0 - 1, 0], [1, 0.5, 1]]) {
      expect(() => gcraDecisionFromReply(bad, t0, 1, p)).toThrow(
        /unexpected token bucket script reply/,
      );
    }
  });

  it("gives the mc loop the value and lifetime to store", () => {
    const first = gcraCasStep(undefined, t0, 1, p);
    expect(first.write).toBe(BigInt(t0 + 12 * second));
    expect(first.expirationSeconds).toBe(13);
    expect(first.decision).toEqual(gcraDecide(undefined, t0, 1, p));
    const refused = gcraCasStep(BigInt(t0 + 36 * second), t0, 1, p);
    expect(refused).toMatchObject({ write: undefined, expirationSeconds: 0 });
    expect(refused.decision.allowed).toBe(false);
    // A refund that fills the bucket stores now, for one second (memcached's clock tick).
    const refund = gcraCasStep(BigInt(t0 + 12 * second), t0, -1, p);
    expect(refund).toMatchObject({ write: BigInt(t0), expirationSeconds: 1 });
  });
});

describe("token bucket properties (seeded)", () => {
  interface Event {
    readonly nowUs: number;
    readonly hits: number;
    readonly allowed: boolean;
  }

  /** Random params, arrival times and hits: bursts, idles, refunds and oversize requests. */
  function scenario(seed: number): {
    params: GcraParams;
    arrivals: { nowUs: number; hits: number }[];
  } {
    const random = mulberry32(seed);
    const pick = <T>(items: readonly T[]): T =>
      items[Math.floor(random() * items.length)]!;
    const requestsPerUnit = 1 + Math.floor(random() * 40);
    const windowSeconds = pick([1, 2, 7, 60, 3600]);
    const burst =
      random() < 0.3
        ? undefined
        : 1 + Math.floor(random() * 2 * requestsPerUnit);
    const params = resolveGcraParams({
      requestsPerUnit,
      windowSeconds,
      ...(burst !== undefined ? { burst } : {}),
    });
    const t = params.emissionIntervalUs;
    const refunds = random() < 0.5;
    const arrivals: { nowUs: number; hits: number }[] = [];
    let now = t0 + Math.floor(random() * second);
    for (let i = 0; i < 300; i++) {
      const scale = pick([0, 0, 0.05, 0.5, 1, 1, 2, params.burst + 2]);
      now += Math.floor(random() * scale * t);
      const r = random();
      const hits =
        refunds && r < 0.2
          ? -1 - Math.floor(random() * 3)
          : r < 0.3
            ? Math.floor(random() * (params.burst + 2))
            : 1;
      arrivals.push({ nowUs: now, hits });
    }
    return { params, arrivals };
  }

  const seeds = Array.from({ length: 200 }, (_, i) => i + 1);

  it("never admits more than burst + floor(L / T) net hits in any interval of length L", () => {
    // The sequences must exercise what the bound is about.
    let refused = 0;
    let refunds = 0;
    let reached = 0;
    for (const seed of seeds) {
      const { params, arrivals } = scenario(seed);
      const bucket = new Bucket(params);
      const events: Event[] = arrivals.map(({ nowUs, hits }) => ({
        nowUs,
        hits,
        allowed: bucket.decide(nowUs, hits).allowed,
      }));
      // net[k]: admitted minus refunded hits of events[0..k).
      const net = [0];
      for (const e of events) {
        const counted = e.hits < 0 ? e.hits : e.allowed ? e.hits : 0;
        net.push(net[net.length - 1]! + counted);
      }
      const t = params.emissionIntervalUs;
      for (const e of events) {
        if (!e.allowed) refused++;
        if (e.hits < 0) refunds++;
      }
      for (let i = 0; i < events.length; i++) {
        for (let j = i; j < events.length; j++) {
          const length = events[j]!.nowUs - events[i]!.nowUs;
          const admitted = net[j + 1]! - net[i]!;
          const bound = params.burst + Math.floor(length / t);
          if (admitted === bound) reached++;
          if (admitted > bound) {
            expect.fail(
              `seed ${seed}: ${admitted} net hits in [${i}, ${j}], ${length} µs, T ${t}, burst ${params.burst}`,
            );
          }
        }
      }
    }
    expect(refused).toBeGreaterThan(1000);
    expect(refunds).toBeGreaterThan(1000);
    expect(reached).toBeGreaterThan(100);
  });

  it("reaches the bound: a drained bucket then one hit every T", () => {
    const p = resolveGcraParams({
      requestsPerUnit: 4,
      windowSeconds: 2,
      burst: 3,
    }); // T 0.5 s
    const bucket = new Bucket(p);
    expect(bucket.decide(t0, 3).allowed).toBe(true);
    for (let k = 1; k <= 20; k++) {
      expect(bucket.decide(t0 + k * 500_000, 1).allowed).toBe(true);
      expect(bucket.decide(t0 + k * 500_000, 1).allowed).toBe(false);
    }
    // 3 + 20 hits in an interval of 20 T: burst + floor(L / T) exactly.
  });

  it("answers as the token-bucket level model on every decision", () => {
    const problems: string[] = [];
    for (const seed of seeds) {
      const { params, arrivals } = scenario(seed);
      const bucket = new Bucket(params);
      const model = new LevelModel(params);
      for (const { nowUs, hits } of arrivals) {
        const d = bucket.decide(nowUs, hits);
        const m = model.decide(nowUs, hits);
        if (
          d.allowed !== m.allowed ||
          d.limitRemaining !== m.remaining ||
          d.resetAfterUs !== m.resetAfterUs
        ) {
          problems.push(
            `seed ${seed} at ${nowUs} hits ${hits}: ${JSON.stringify(d)} vs ${JSON.stringify(m)}`,
          );
        }
      }
    }
    expect(problems).toEqual([]);
  });

  it("reports remaining, reset and retry that the next decisions confirm", () => {
    // Plain comparisons collected per event (expect() per check would dominate the run time).
    const problems: string[] = [];
    for (const seed of seeds) {
      const { params, arrivals } = scenario(seed);
      const bucket = new Bucket(params);
      const { burst } = params;
      const fits = (state: number | undefined, nowUs: number, hits: number) =>
        gcraDecide(state, nowUs, hits, params).allowed;
      const remainingAt = (state: number | undefined, nowUs: number) =>
        gcraDecide(state, nowUs, 0, params).limitRemaining;
      for (const { nowUs, hits } of arrivals) {
        const before = bucket.stored;
        const d = bucket.decide(nowUs, hits);
        const state = bucket.stored;
        const failed: string[] = [];
        const check = (ok: boolean, what: string): void => {
          if (!ok) failed.push(what);
        };
        check(
          d.limitRemaining >= 0 && d.limitRemaining <= burst,
          "remaining in [0, burst]",
        );
        check(d.durationUntilResetSeconds >= 1, "reset >= 1 s");
        check(
          d.tatUs === (d.newTatUs ?? Math.max(before ?? 0, nowUs)),
          "tat is the new TAT, else max(stored, now)",
        );
        check(hits >= 0 || d.allowed, "a refund is never refused");
        check(
          (d.allowed && hits !== 0) || d.newTatUs === undefined,
          "refusals and checks write nothing",
        );
        // limit_remaining: exactly that many more hits fit at this instant.
        check(
          d.limitRemaining === 0 || fits(state, nowUs, d.limitRemaining),
          "remaining hits fit now",
        );
        check(
          !fits(state, nowUs, d.limitRemaining + 1),
          "remaining + 1 does not fit",
        );
        // duration_until_reset: after it a whole burst fits; 1 µs before the exact reset, not.
        check(
          fits(state, nowUs + d.durationUntilResetSeconds * second, burst),
          "a burst fits after the reset",
        );
        check(
          remainingAt(state, nowUs + d.resetAfterUs) === burst,
          "full at the exact reset",
        );
        check(
          d.resetAfterUs === 0 ||
            remainingAt(state, nowUs + d.resetAfterUs - 1) === burst - 1,
          "not full 1 µs before the exact reset",
        );
        // retry: the refused request fits exactly retryAfterUs later, not 1 µs earlier.
        if (d.allowed) {
          check(
            d.retryAfterUs === 0 && d.retryAfterSeconds === 0,
            "no retry when admitted",
          );
        } else if (hits > burst) {
          check(d.retryAfterUs === undefined, "never retry more than a burst");
        } else {
          const retry = nowUs + (d.retryAfterUs ?? Number.NaN);
          check(fits(state, retry, hits), "fits at the retry time");
          check(
            !fits(state, retry - 1, hits),
            "does not fit 1 µs before the retry time",
          );
          check(
            fits(
              state,
              nowUs + (d.retryAfterSeconds ?? Number.NaN) * second,
              hits,
            ),
            "fits after the retry seconds",
          );
        }
        // The mc step decides the same from the stored decimal.
        const step = gcraCasStep(
          before === undefined ? undefined : BigInt(before),
          nowUs,
          hits,
          params,
        );
        check(
          isDeepStrictEqual(step.decision, d),
          "the mc step decides the same",
        );
        check(
          step.write ===
            (d.newTatUs === undefined ? undefined : BigInt(d.newTatUs)),
          "the mc step writes the new TAT",
        );
        if (failed.length > 0)
          problems.push(
            `seed ${seed} at ${nowUs} hits ${hits}: ${failed.join("; ")}`,
          );
      }
    }
    expect(problems).toEqual([]);
  });
});
