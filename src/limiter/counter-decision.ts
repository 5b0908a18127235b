import type { RateLimit } from "../config/rate-limit-config.js";
import {
  previousWindowWeight,
  secondsUntilReset,
  slidingSecondsUntilDecrease,
} from "./window.js";

/**
 * The near-limit threshold of a limit (or a token bucket's burst): hits above it count as near
 * limit. Upstream computes `floor(float32(limit) * float32(ratio))`, so this does it in float32
 * too (docs/reference-parity.md#stat-arithmetic). The one copy of this rule: the decision and
 * Explain both call it.
 *
 * @param limitValue - `requests_per_unit`, or a token bucket's burst
 * @param ratio - `NEAR_LIMIT_RATIO` already rounded to float32 (`Math.fround`)
 */
export function nearLimitThreshold(limitValue: number, ratio: number): number {
  return Math.floor(Math.fround(Math.fround(limitValue) * ratio));
}

/**
 * `limit_remaining` of a descriptor within its limit: `limit − count`, unless the decision
 * fixed it already (`remaining` ≥ 0: a request all-or-nothing charging did not charge, which
 * took nothing). The one copy of this rule: the decision and Explain both call it.
 *
 * @param count - the (weighted) count compared with the limit
 * @param remaining - {@link CounterDecision.remaining}, or -1 for none
 */
export function remainingWithin(
  limitValue: number,
  count: number,
  remaining: number,
): number {
  return remaining >= 0 ? remaining : limitValue - count;
}

/**
 * Returns the seconds until the current window of `limit` ends, `duration_until_reset`: the
 * calendar period's end for a `time_zone` limit (exact to the second, DST included), else the
 * epoch-aligned window's ({@link secondsUntilReset}). In [1, window].
 *
 * @param nowSeconds - seconds since the Unix epoch
 */
export function limitResetSeconds(
  limit: RateLimit,
  nowSeconds: number,
): number {
  const calendar = limit.calendar;
  return calendar === undefined
    ? secondsUntilReset(nowSeconds, limit.windowSeconds)
    : calendar.secondsUntilReset(nowSeconds);
}

/**
 * The count a decision compares with the limit: `current` for fixed windows; for sliding
 * windows `ceil(previous × (W − e)/W) + current` ({@link previousWindowWeight}).
 *
 * @param current - the current window's counter
 * @param previous - the previous window's counter (ignored for fixed windows)
 * @param nowSeconds - seconds since the Unix epoch
 */
export function weightedCount(
  limit: RateLimit,
  current: number,
  previous: number,
  nowSeconds: number,
): number {
  return limit.sliding
    ? current + previousWindowWeight(previous, nowSeconds, limit.windowSeconds)
    : current;
}

/** The arithmetic of one counted descriptor's decision (see {@link counterDecision}). */
export interface CounterDecision {
  /** The previous window's share of the count, `ceil(previous × (W − e)/W)`; 0 for fixed windows. */
  readonly previousWeight: number;
  /**
   * The count compared with `requests_per_unit`: `previousWeight + current`, plus this
   * request's hits when it was not charged. Over the limit exactly when it is greater.
   */
  readonly count: number;
  /** `duration_until_reset`, seconds (≥ 1). */
  readonly resetSeconds: number;
  /**
   * How long an over-limit key stays in the local cache, seconds: the window for fixed
   * windows; for sliding windows until the weighted count falls by one.
   */
  readonly cacheTtlSeconds: number;
  /**
   * `limit_remaining` of an OK answer when the request was not charged (`limit − count
   * before the request`, ≥ 0); -1 when charged (the answer then reports `limit − count`).
   */
  readonly remaining: number;
  /**
   * Whether an over-limit answer enters the key in the local cache: always when charged;
   * when not charged only if the window is already full without this request.
   */
  readonly cacheWhenOver: boolean;
}

/**
 * Decides the arithmetic of one counted descriptor from its counters, any algorithm (the
 * decision {@link Decider.counterStatus} answers with, and the Explain API's prediction).
 * Pure: reads no clock, changes no statistic.
 *
 * @param current - the current window's counter: after the increment when `charged`, before
 *   it otherwise
 * @param previous - the previous window's counter (sliding windows; else ignored)
 * @param hitsAddend - this request's hits for the descriptor
 * @param nowSeconds - seconds since the Unix epoch
 * @param charged - whether the request's hits were added to `current`
 */
export function counterDecision(
  limit: RateLimit,
  current: number,
  previous: number,
  hitsAddend: number,
  nowSeconds: number,
  charged: boolean,
): CounterDecision {
  const windowSeconds = limit.windowSeconds;
  const previousWeight = limit.sliding
    ? previousWindowWeight(previous, nowSeconds, windowSeconds)
    : 0;
  const count = previousWeight + current + (charged ? 0 : hitsAddend);
  const resetSeconds = limit.sliding
    ? slidingSecondsUntilDecrease(
        previous,
        charged ? current : current + hitsAddend,
        nowSeconds,
        windowSeconds,
      )
    : limitResetSeconds(limit, nowSeconds);
  // Fixed windows: the key is over until its window ends. Sliding windows: at least until the
  // weighted count falls by one.
  const cacheTtlSeconds = limit.sliding ? resetSeconds : windowSeconds;
  if (charged)
    return {
      previousWeight,
      count,
      resetSeconds,
      cacheTtlSeconds,
      remaining: -1,
      cacheWhenOver: true,
    };
  const before = count - hitsAddend;
  return {
    previousWeight,
    count,
    resetSeconds,
    cacheTtlSeconds,
    remaining: Math.max(0, limit.requestsPerUnit - before),
    cacheWhenOver: before >= limit.requestsPerUnit,
  };
}
