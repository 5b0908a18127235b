/**
 * Every algorithm kind, by name, and the arithmetic that callers outside the decision pipeline
 * (Explain, the canary, stop-increment and all-or-nothing checks) pick by kind. The decision
 * pipeline itself switches on `RateLimit.algorithm.kind` in `decide.ts`; both end in an
 * exhaustiveness check, so a new kind fails to compile until each switch has its case.
 */
import type { Algorithm } from "../config/algorithm.js";
import type { RateLimit } from "../config/rate-limit-config.js";
import type { AlgorithmKind } from "./algorithm-kind.js";
import type { CounterDecision } from "./counter-decision.js";
import { fixedWindow, fixedWindowDecision } from "./fixed-window.js";
import {
  slidingWeightedCount,
  slidingWindow,
  slidingWindowDecision,
} from "./sliding-window.js";
import { tokenBucket } from "./token-bucket.js";

/** The module of each kind (`limiter/<kind>.ts`); a new kind must be listed here. */
export const kinds: {
  readonly [K in Algorithm["kind"]]: AlgorithmKind<
    Extract<Algorithm, { kind: K }>
  >;
} = Object.freeze({
  fixed_window: fixedWindow,
  sliding_window: slidingWindow,
  token_bucket: tokenBucket,
});

/**
 * The count a window decision compares with the limit: `current` for fixed windows; for
 * sliding windows `ceil(previous × (W − e)/W) + current` ({@link slidingWeightedCount}).
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
  const algorithm = limit.algorithm;
  switch (algorithm.kind) {
    case "fixed_window":
      return current;
    case "sliding_window":
      return slidingWeightedCount(limit, current, previous, nowSeconds);
    case "token_bucket":
      // No window counter: the value as given (the store decides a bucket itself).
      return current;
    default: {
      const never: never = algorithm;
      return never;
    }
  }
}

/**
 * Decides the arithmetic of one counted descriptor from its counters, any window kind (the
 * decision the pipeline's statuses answer with, and the Explain API's prediction). Pure: reads
 * no clock, changes no statistic.
 *
 * @param current - the current window's counter: after the increment when `charged`, before
 *   it otherwise
 * @param previous - the previous window's counter (sliding windows; else ignored)
 * @param hitsAddend - this request's hits for the descriptor
 * @param nowSeconds - seconds since the Unix epoch
 * @param charged - whether the request's hits were added to `current`
 * @throws TypeError for a token bucket, which has no window counter
 */
export function counterDecision(
  limit: RateLimit,
  current: number,
  previous: number,
  hitsAddend: number,
  nowSeconds: number,
  charged: boolean,
): CounterDecision {
  const algorithm = limit.algorithm;
  switch (algorithm.kind) {
    case "fixed_window":
      return fixedWindowDecision(
        limit,
        current,
        hitsAddend,
        nowSeconds,
        charged,
      );
    case "sliding_window":
      return slidingWindowDecision(
        limit,
        current,
        previous,
        hitsAddend,
        nowSeconds,
        charged,
      );
    case "token_bucket":
      throw new TypeError("a token bucket has no window counter");
    default: {
      const never: never = algorithm;
      return never;
    }
  }
}
