/**
 * `algorithm: token_bucket` (an extension, docs/configuration.md): GCRA over one stored TAT
 * per cache key (the arithmetic is `gcra.ts`). The {@link AlgorithmKind} of
 * `RateLimit.algorithm.kind === "token_bucket"`: its plan step (one key, no window), its store
 * operation (`takeTokens`: the store decides atomically), its status from the store's
 * decision and its Explain notes.
 */
import type { TokenBucket } from "../config/algorithm.js";
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
  TokenBucketForecast,
} from "./algorithm-kind.js";
import { isPerSecond } from "./cache-key.js";
import { nearLimitThreshold } from "./counter-decision.js";
import type { GcraDecision, GcraParams } from "./gcra.js";
import { PlannedDescriptor } from "./request-plan.js";
import { limitStatus } from "./window-status.js";

/**
 * The plan entry of a token bucket: the key `<stem>tb<window>_<rate>_<burst>` (the limit's
 * `cacheKeySuffix`), no window, no expiration (the store keeps the key until the bucket is
 * full), never answered by the local cache; reads the request time in µs once per request.
 */
export function planTokenBucket(
  step: PlanStep,
  index: number,
  descriptor: RateLimitDescriptor,
  limit: RateLimit,
  hits: number,
  stem: string,
): PlannedDescriptor {
  if (step.nowUs === 0) step.microseconds();
  return new PlannedDescriptor(
    index,
    descriptor,
    limit,
    hits,
    stem + limit.cacheKeySuffix,
    undefined,
    isPerSecond(limit),
    0,
    limit.windowSeconds,
    0,
    false,
  );
}

/**
 * The status of a token bucket from the store's GCRA decision, and its statistics: admitted →
 * OK, counting the hits within limit and, of them, those that took the bucket's used part
 * (`burst − limit_remaining`) above `floor(burst × ratio)` near limit; refused → OVER_LIMIT
 * (OK in shadow mode), counting every hit over limit (a refused request takes nothing); a
 * refund (hits < 0) → OK, no statistic. `limit_remaining` and `duration_until_reset` are
 * GCRA's: the single hits that would be admitted now, and the seconds until the bucket is full
 * again (≥ 1).
 *
 * @param burst - the bucket's burst (`GcraParams.burst`)
 * @param hits - the request's hits addend for the descriptor (not the store increment)
 */
export function tokenBucketStatus(
  context: StatusContext,
  limit: RateLimit,
  burst: number,
  hits: number,
  decision: GcraDecision,
): RateLimitResponse_DescriptorStatus {
  const remaining = decision.limitRemaining;
  const reset = decision.durationUntilResetSeconds;
  // A refund: always OK, no statistic.
  if (hits < 0) return limitStatus(Code.OK, limit, remaining, reset);
  const stats = context.mutedStats ?? limit.stats;
  if (!decision.allowed) {
    stats.overLimit.add(hits);
    if (limit.shadowMode) {
      stats.shadowMode.add(hits);
      return limitStatus(Code.OK, limit, remaining, reset);
    }
    return limitStatus(Code.OVER_LIMIT, limit, remaining, reset);
  }
  // Near limit: the hits that took the bucket's used part (burst − remaining) above
  // floor(burst × ratio), in float32 as the windows' threshold.
  const threshold = nearLimitThreshold(burst, context.ratio);
  const used = burst - remaining;
  if (used > threshold) stats.nearLimit.add(Math.min(hits, used - threshold));
  stats.withinLimit.add(hits);
  return limitStatus(Code.OK, limit, remaining, reset);
}

/** "1.5s", "100ms", "250µs": a µs duration for notes. */
function microsText(us: number): string {
  if (us >= 1_000_000 && us % 1000 === 0) return `${String(us / 1_000_000)}s`;
  if (us >= 1000 && us % 1000 === 0) return `${String(us / 1000)}ms`;
  if (us >= 1_000_000) return `${(us / 1_000_000).toFixed(6)}s`;
  return `${String(us)}µs`;
}

/**
 * Appends Explain's notes on a token bucket to `notes`, in the order they apply: a check
 * (0 hits); a refusal (more hits than the burst, or too few left: when the same request fits)
 * and shadow mode; or, admitted, that a refused all-or-nothing request takes nothing, and near
 * limit (the used part of the burst above the threshold).
 *
 * @returns whether the bucket is near limit (admitted, used part above the threshold)
 */
export function tokenBucketNotes(
  limit: RateLimit,
  bucket: GcraParams,
  forecast: TokenBucketForecast,
  notes: string[],
): boolean {
  const { hits, read, would, final } = forecast;
  const burst = bucket.burst;
  if (hits === 0) notes.push("hits addend 0: checks the bucket without taking");
  if (!would.allowed) {
    notes.push(
      hits > burst
        ? `token bucket: ${hits} hits are more than the burst ${burst}: never admitted, nothing taken`
        : `token bucket: ${hits} hit(s) wanted, ${read.limitRemaining} left: refused, nothing taken; the same request fits in ${microsText(final.retryAfterUs ?? 0)}`,
    );
    if (limit.shadowMode)
      notes.push("shadow_mode: over the limit, answered OK");
    return false;
  }
  if (hits > 0 && !forecast.charged)
    notes.push(
      `token bucket: ${hits} of the ${read.limitRemaining} left would fit, but the request is refused, so nothing is taken`,
    );
  // Near limit as the decision counts it: the bucket's used part above floor(burst × ratio).
  const threshold = nearLimitThreshold(burst, forecast.ratio);
  const used = burst - final.limitRemaining;
  if (used <= threshold) return false;
  notes.push(
    `near limit: ${used} of the burst ${burst} used > near-limit threshold ${threshold} (NEAR_LIMIT_RATIO ${String(forecast.configuredRatio)})`,
  );
  return true;
}

// A refund's status reads neither the ratio nor the local cache.
const refundContext: StatusContext = Object.freeze({
  ratio: 0,
  localCache: undefined,
});

/** Explain's note on a token bucket's refund of `back` hits (`is_negative_hits`). */
export function tokenBucketRefundNote(back: number): string {
  return `is_negative_hits: a refund: the token bucket gets ${back} hit(s) back (its TAT moves back ${back} emission intervals, never past full); always OK, counted in no statistic`;
}

/** The token bucket as an {@link AlgorithmKind}. */
export const tokenBucket: AlgorithmKind<TokenBucket> = {
  kind: "token_bucket",
  operation: "takeTokens",
  plan: (step, index, descriptor, limit, _algorithm, hits, stem) =>
    planTokenBucket(step, index, descriptor, limit, hits, stem),
  status: (context, entry, algorithm) =>
    tokenBucketStatus(
      context,
      entry.limit,
      algorithm.bucket.burst,
      entry.hitsAddend,
      entry.decision!,
    ),
  refundStatus: (entry, algorithm) =>
    tokenBucketStatus(
      refundContext,
      entry.limit,
      algorithm.bucket.burst,
      entry.hitsAddend,
      entry.decision!,
    ),
  explain: (limit, algorithm, forecast, notes) =>
    tokenBucketNotes(limit, algorithm.bucket, forecast, notes),
  refundNote: tokenBucketRefundNote,
};
