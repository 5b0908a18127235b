/**
 * `algorithm: fixed_window` (the default, the reference's): one counter per window, the
 * window's bounds epoch-aligned multiples of its length (`unit_multiplier`) or a calendar
 * period (`time_zone:`). The {@link AlgorithmKind} of `RateLimit.algorithm.kind ===
 * "fixed_window"`: its plan step, its status and its store operation (`increment`). Its
 * Explain notes are the ones every window shares (`explain/limit-outcome.ts`).
 */
import type { FixedWindow, Window } from "../config/algorithm.js";
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
import { windowStartSeconds } from "./window.js";
import { limitStatus, windowStatus } from "./window-status.js";

/**
 * The plan entry of a fixed window: the key `<stem><window start><suffix>` (the reference's
 * key for one-unit windows, docs/reference-parity.md#cache-key), or `<stem><period><suffix>`
 * for a calendar period; the counter lives one window (plus jitter).
 */
export function planFixedWindow(
  step: PlanStep,
  index: number,
  descriptor: RateLimitDescriptor,
  limit: RateLimit,
  window: Window,
  hits: number,
  stem: string,
): PlannedDescriptor {
  if (window.kind === "epoch") {
    const seconds = window.seconds;
    const start = windowStartSeconds(step.nowSeconds, seconds);
    return step.windowEntry(
      index,
      descriptor,
      limit,
      hits,
      stem + String(start) + limit.cacheKeySuffix,
      undefined,
      seconds,
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
    stem + period.cacheKeyPart + limit.cacheKeySuffix,
    undefined,
    seconds,
    seconds,
    period.endSeconds,
  );
}

/**
 * The arithmetic of a fixed window's decision: the count is the counter (plus this request's
 * hits when not charged); the reset is the window's end; an over-limit key stays in the local
 * cache for the window. Pure.
 *
 * @param current - the counter: after the increment when `charged`, before it otherwise
 */
export function fixedWindowDecision(
  limit: RateLimit,
  current: number,
  hitsAddend: number,
  nowSeconds: number,
  charged: boolean,
): CounterDecision {
  const resetSeconds = limitResetSeconds(limit, nowSeconds);
  const windowSeconds = limit.windowSeconds;
  if (charged)
    return {
      previousWeight: 0,
      count: current,
      resetSeconds,
      cacheTtlSeconds: windowSeconds,
      remaining: -1,
      cacheWhenOver: true,
    };
  return {
    previousWeight: 0,
    count: current + hitsAddend,
    resetSeconds,
    cacheTtlSeconds: windowSeconds,
    remaining: Math.max(0, limit.requestsPerUnit - current),
    cacheWhenOver: current >= limit.requestsPerUnit,
  };
}

/**
 * The status of a fixed window from its counter (upstream `GetResponseDescriptorStatus` when
 * charged): the usual charge allocates nothing but the status. A request all-or-nothing
 * charging did not charge reports `limit − counter` as remaining (nothing was taken) and
 * enters the key in the local cache only when the window is already full without it.
 */
export function fixedWindowStatus(
  context: StatusContext,
  cacheKey: string,
  limit: RateLimit,
  current: number,
  hits: number,
  nowSeconds: number,
  charged: boolean,
): RateLimitResponse_DescriptorStatus {
  const reset = limitResetSeconds(limit, nowSeconds);
  if (charged)
    return windowStatus(
      context,
      cacheKey,
      limit,
      current,
      hits,
      reset,
      limit.windowSeconds,
      -1,
    );
  const rpu = limit.requestsPerUnit;
  return windowStatus(
    context,
    current >= rpu ? cacheKey : undefined,
    limit,
    current + hits,
    hits,
    reset,
    limit.windowSeconds,
    Math.max(0, rpu - current),
  );
}

/** A refund's status: OK, `limit − counter after the refund` (≥ 0), no statistic. */
export function fixedWindowRefundStatus(
  limit: RateLimit,
  current: number,
  nowSeconds: number,
): RateLimitResponse_DescriptorStatus {
  return limitStatus(
    Code.OK,
    limit,
    Math.max(0, limit.requestsPerUnit - current),
    limitResetSeconds(limit, nowSeconds),
  );
}

/**
 * Explain's note on a window counter's refund of `back` hits (`is_negative_hits`), fixed and
 * sliding windows alike (the current window's counter goes down).
 */
export function windowRefundNote(back: number): string {
  return `is_negative_hits: a refund: the counter goes down by ${back} (never below 0, never created); always OK, counted in no statistic`;
}

/** The fixed window as an {@link AlgorithmKind}. */
export const fixedWindow: AlgorithmKind<FixedWindow> = {
  kind: "fixed_window",
  operation: "increment",
  plan: (step, index, descriptor, limit, algorithm, hits, stem) =>
    planFixedWindow(
      step,
      index,
      descriptor,
      limit,
      algorithm.window,
      hits,
      stem,
    ),
  status: (context, entry, _algorithm, current, nowSeconds, charged) =>
    fixedWindowStatus(
      context,
      entry.cacheKey,
      entry.limit,
      current,
      entry.hitsAddend,
      nowSeconds,
      charged,
    ),
  refundStatus: (entry, _algorithm, nowSeconds) =>
    fixedWindowRefundStatus(entry.limit, entry.current, nowSeconds),
  // A fixed window has no notes of its own: Explain's window notes say it all.
  explain: () => false,
  refundNote: windowRefundNote,
};
