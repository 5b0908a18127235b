// The threshold, remaining and reset arithmetic every algorithm kind shares, once (issue 32).
import type { RateLimit } from "../config/rate-limit-config.js";
import { secondsUntilReset } from "./window.js";

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
 * epoch-aligned window's ({@link secondsUntilReset}) of `limit.windowSeconds` (a token
 * bucket's rate window too: the local limiter and the guard answer so). In [1, window].
 *
 * @param nowSeconds - seconds since the Unix epoch
 */
export function limitResetSeconds(
  limit: RateLimit,
  nowSeconds: number,
): number {
  const algorithm = limit.algorithm;
  return algorithm.kind !== "token_bucket" &&
    algorithm.window.kind === "calendar"
    ? algorithm.window.period.secondsUntilReset(nowSeconds)
    : secondsUntilReset(nowSeconds, limit.windowSeconds);
}

/**
 * The arithmetic of one counted descriptor's decision, any window kind: what its module
 * (`fixedWindowDecision`, `slidingWindowDecision`) computes and `counterDecision` in
 * `algorithms.ts` picks by kind.
 */
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
