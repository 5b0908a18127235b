/**
 * `algorithm: sliding_window` (an extension, docs/configuration.md): the count a decision
 * compares is `ceil(previous × (W − e)/W) + current`, the previous window's counter weighted
 * by the part of it the sliding window still covers. The {@link AlgorithmKind} of
 * `RateLimit.algorithm.kind === "sliding_window"`: its plan step (the current and the previous
 * window's keys; counters live two windows), its status (the weighted count; the reset and the
 * local-cache lifetime run until the weighted count falls by one), its store operation
 * (`increment`, reading the previous key too) and its Explain note.
 */
import type { SlidingWindow, Window } from "../config/algorithm.js";
import type { RateLimit } from "../config/rate-limit-config.js";
import {
  RateLimitResponse_Code as Code,
  type RateLimitDescriptor,
  type RateLimitResponse_DescriptorStatus,
} from "../proto.js";
import type {
  AlgorithmKind,
  PlanStep,
  StatusContext,
} from "./algorithm-kind.js";
import { limitResetSeconds, type CounterDecision } from "./counter-decision.js";
import type { PlannedDescriptor } from "./request-plan.js";
import {
  previousWindowWeight,
  secondsUntilReset,
  slidingSecondsUntilDecrease,
  windowStartSeconds,
} from "./window.js";
import { windowRefundNote } from "./fixed-window.js";
import { limitStatus, windowStatus } from "./window-status.js";

/**
 * The plan entry of a sliding window: the current window's key `<stem><start><suffix>` and the
 * previous one's `<stem><start − W><suffix>`, read (never written) with it; a counter lives two
 * windows (plus jitter). Config refuses a calendar sliding window; one built by hand has no
 * previous key.
 */
export function planSlidingWindow(
  step: PlanStep,
  index: number,
  descriptor: RateLimitDescriptor,
  limit: RateLimit,
  window: Window,
  hits: number,
  stem: string,
): PlannedDescriptor {
  const suffix = limit.cacheKeySuffix;
  if (window.kind === "epoch") {
    const seconds = window.seconds;
    const start = windowStartSeconds(step.nowSeconds, seconds);
    return step.windowEntry(
      index,
      descriptor,
      limit,
      hits,
      stem + String(start) + suffix,
      stem + String(start - seconds) + suffix,
      2 * seconds,
      seconds,
      start + seconds,
    );
  }
  const period = window.period.period(step.nowSeconds);
  const seconds = period.endSeconds - period.startSeconds;
  return step.windowEntry(
    index,
    descriptor,
    limit,
    hits,
    stem + period.cacheKeyPart + suffix,
    undefined,
    2 * seconds,
    seconds,
    period.endSeconds,
  );
}

/**
 * The count a sliding window compares with the limit: `ceil(previous × (W − e)/W) + current`
 * ({@link previousWindowWeight}).
 *
 * @param nowSeconds - seconds since the Unix epoch
 */
export function slidingWeightedCount(
  limit: RateLimit,
  current: number,
  previous: number,
  nowSeconds: number,
): number {
  return (
    current + previousWindowWeight(previous, nowSeconds, limit.windowSeconds)
  );
}

/**
 * The arithmetic of a sliding window's decision. Pure: reads no clock, changes no statistic.
 *
 * @param current - the current window's counter: after the increment when `charged`, before
 *   it otherwise
 * @param previous - the previous window's counter
 */
export function slidingWindowDecision(
  limit: RateLimit,
  current: number,
  previous: number,
  hitsAddend: number,
  nowSeconds: number,
  charged: boolean,
): CounterDecision {
  const windowSeconds = limit.windowSeconds;
  const previousWeight = previousWindowWeight(
    previous,
    nowSeconds,
    windowSeconds,
  );
  const count = previousWeight + current + (charged ? 0 : hitsAddend);
  // Over at least until the weighted count falls by one: the reset, and the local cache's TTL.
  const resetSeconds = slidingSecondsUntilDecrease(
    previous,
    charged ? current : current + hitsAddend,
    nowSeconds,
    windowSeconds,
  );
  if (charged)
    return {
      previousWeight,
      count,
      resetSeconds,
      cacheTtlSeconds: resetSeconds,
      remaining: -1,
      cacheWhenOver: true,
    };
  const before = count - hitsAddend;
  return {
    previousWeight,
    count,
    resetSeconds,
    cacheTtlSeconds: resetSeconds,
    remaining: Math.max(0, limit.requestsPerUnit - before),
    cacheWhenOver: before >= limit.requestsPerUnit,
  };
}

/**
 * The status of a sliding window from its counters ({@link slidingWindowDecision}), with its
 * statistics; a request all-or-nothing charging did not charge reports `limit − weighted
 * count` as remaining and enters the key in the local cache only when the window is already
 * full without it.
 */
export function slidingWindowStatus(
  context: StatusContext,
  cacheKey: string,
  limit: RateLimit,
  current: number,
  previous: number,
  hits: number,
  nowSeconds: number,
  charged: boolean,
): RateLimitResponse_DescriptorStatus {
  const d = slidingWindowDecision(
    limit,
    current,
    previous,
    hits,
    nowSeconds,
    charged,
  );
  return windowStatus(
    context,
    d.cacheWhenOver ? cacheKey : undefined,
    limit,
    d.count,
    hits,
    d.resetSeconds,
    d.cacheTtlSeconds,
    d.remaining,
  );
}

/**
 * A refund's status: OK, `limit − weighted count after the refund` (≥ 0), no statistic; the
 * reset is the current window's end.
 */
export function slidingWindowRefundStatus(
  limit: RateLimit,
  current: number,
  previous: number,
  nowSeconds: number,
): RateLimitResponse_DescriptorStatus {
  const count = slidingWeightedCount(limit, current, previous, nowSeconds);
  return limitStatus(
    Code.OK,
    limit,
    Math.max(0, limit.requestsPerUnit - count),
    limitResetSeconds(limit, nowSeconds),
  );
}

/**
 * Explain's note on a sliding window's weighting: `sliding window: the previous window's
 * counter (P) weighs left/W → weight; weighted count weight + rest = count against the limit
 * L` (not for a key the local cache answers).
 *
 * @param decision - the decision Explain predicts ({@link slidingWindowDecision})
 */
export function slidingWindowNote(
  limit: RateLimit,
  previous: number,
  decision: CounterDecision,
  nowSeconds: number,
): string {
  const w = limit.windowSeconds;
  const left = secondsUntilReset(nowSeconds, w);
  const weight = decision.previousWeight;
  const count = decision.count;
  return `sliding window: the previous window's counter (${String(previous)}) weighs ${String(left)}/${String(w)} → ${String(weight)}; weighted count ${String(weight)} + ${String(count - weight)} = ${String(count)} against the limit ${String(limit.requestsPerUnit)}`;
}

/** The sliding window as an {@link AlgorithmKind}. */
export const slidingWindow: AlgorithmKind<SlidingWindow> = {
  kind: "sliding_window",
  operation: "increment",
  plan: (step, index, descriptor, limit, algorithm, hits, stem) =>
    planSlidingWindow(
      step,
      index,
      descriptor,
      limit,
      algorithm.window,
      hits,
      stem,
    ),
  status: (context, entry, _algorithm, current, nowSeconds, charged) =>
    slidingWindowStatus(
      context,
      entry.cacheKey,
      entry.limit,
      current,
      entry.previous,
      entry.hitsAddend,
      nowSeconds,
      charged,
    ),
  refundStatus: (entry, _algorithm, nowSeconds) =>
    slidingWindowRefundStatus(
      entry.limit,
      entry.current,
      entry.previous,
      nowSeconds,
    ),
  explain: (limit, _algorithm, forecast, notes) => {
    if (!forecast.cached)
      notes.push(
        slidingWindowNote(
          limit,
          forecast.previous,
          forecast.decision,
          forecast.nowSeconds,
        ),
      );
    return false;
  },
  refundNote: windowRefundNote,
};
