// A stream's share of a bucket as the messages Envoy 1.40's rate_limit_quota filter enforces:
// a `token_bucket` strategy (it ignores `requests_per_time_unit`) in whole seconds (it truncates
// `fill_interval` and `assignment_time_to_live`: 0.5 s would mean no limit at all), with
// `tokens_per_fill` always set (unset refills nothing).

import { create } from "@bufbuild/protobuf";
import { DurationSchema } from "@bufbuild/protobuf/wkt";
import {
  EnvoyTokenBucketSchema,
  RateLimitQuotaResponse_BucketActionSchema,
  RateLimitQuotaResponse_BucketAction_AbandonActionSchema,
  RateLimitQuotaResponse_BucketAction_QuotaAssignmentActionSchema,
  RateLimitStrategySchema,
  RateLimitStrategy_BlanketRule,
  type BucketId,
  type RateLimitQuotaResponse_BucketAction,
  type RateLimitStrategy,
} from "../proto.js";

/** Longest fill interval tried for a rate of at least one request per second, seconds. */
export const maxFillSeconds = 5;

/** A token bucket in Envoy's whole-second terms. */
export interface TokenBucketShape {
  /** Tokens added per fill, ≥ 1. */
  readonly tokensPerFill: number;
  /** Seconds between fills, a whole number ≥ 1. */
  readonly fillIntervalSeconds: number;
  /** Capacity and initial tokens: a tenth of a second of the rate, ≥ 1 (the burst). */
  readonly maxTokens: number;
}

/**
 * Returns the token bucket that enforces at most `ratePerSecond` in whole seconds:
 *
 * - rate ≥ 1/s: of the intervals 1 … {@link maxFillSeconds} s, the one whose
 *   `floor(rate × s) / s` comes closest to the rate (the shortest on a tie); 33.4/s → 100
 *   tokens per 3 s, 50/s → 50 per 1 s, 2.5/s → 5 per 2 s;
 * - rate < 1/s: one token every `ceil(1 / rate)` seconds (0.3/s → 1 per 4 s);
 * - rate 0 (or below): the caller sends DENY_ALL instead; here 1 token per
 *   2³¹ − 1 s stands for it.
 *
 * Rounding is always down, so the shares of a bucket never add up to more than its limit.
 * `maxTokens` is `max(1, ceil(rate / 10))`, a tenth of a second of the rate: Envoy refills a
 * token bucket continuously at `tokens_per_fill / fill_interval`, so `max_tokens` is only the
 * burst an Envoy adds after running below its share, which the fleet's total pays for (the
 * `Σ max_tokens` term of docs/rlqs.md's bound). One second of burst let a load shift through
 * at 118 % of the limit for a second in the end-to-end test.
 */
export function tokenBucketFor(ratePerSecond: number): TokenBucketShape {
  if (!(ratePerSecond > 0)) {
    return { tokensPerFill: 1, fillIntervalSeconds: 2 ** 31 - 1, maxTokens: 1 };
  }
  const maxTokens = Math.max(1, Math.ceil(ratePerSecond / 10 - 1e-9));
  if (ratePerSecond < 1) {
    return {
      tokensPerFill: 1,
      fillIntervalSeconds: Math.ceil(1 / ratePerSecond - 1e-9),
      maxTokens,
    };
  }
  let best = { tokensPerFill: 1, fillIntervalSeconds: 1 };
  let bestRate = -1;
  for (let seconds = 1; seconds <= maxFillSeconds; seconds++) {
    // A tiny tolerance keeps 0.1 × 30 from flooring to 2.
    const tokens = Math.floor(ratePerSecond * seconds + 1e-9);
    const rate = tokens / seconds;
    if (rate > bestRate + 1e-12) {
      best = { tokensPerFill: tokens, fillIntervalSeconds: seconds };
      bestRate = rate;
    }
  }
  return { ...best, maxTokens };
}

/** The rate a {@link TokenBucketShape} admits in the long run, requests per second. */
export function shapeRate(shape: TokenBucketShape): number {
  return shape.tokensPerFill / shape.fillIntervalSeconds;
}

/** What one stream is told about one bucket. */
export type Assignment =
  | { readonly kind: "allow_all" }
  | { readonly kind: "deny_all" }
  | { readonly kind: "token_bucket"; readonly shape: TokenBucketShape };

/**
 * Encodes an assignment as the `RateLimitStrategy` Envoy is sent: a `token_bucket`, or a
 * `blanket_rule` for ALLOW_ALL and DENY_ALL.
 */
export function assignmentStrategy(assignment: Assignment): RateLimitStrategy {
  return assignment.kind === "token_bucket"
    ? create(RateLimitStrategySchema, {
        strategy: {
          case: "tokenBucket",
          value: create(EnvoyTokenBucketSchema, {
            maxTokens: assignment.shape.maxTokens,
            tokensPerFill: assignment.shape.tokensPerFill,
            fillInterval: create(DurationSchema, {
              seconds: BigInt(assignment.shape.fillIntervalSeconds),
            }),
          }),
        },
      })
    : create(RateLimitStrategySchema, {
        strategy: {
          case: "blanketRule",
          value:
            assignment.kind === "deny_all"
              ? RateLimitStrategy_BlanketRule.DENY_ALL
              : RateLimitStrategy_BlanketRule.ALLOW_ALL,
        },
      });
}

/**
 * Encodes a `BucketAction` with a `QuotaAssignmentAction`.
 *
 * @param ttlSeconds - `assignment_time_to_live`, whole seconds ≥ 1
 */
export function assignmentAction(
  bucketId: BucketId,
  assignment: Assignment,
  ttlSeconds: number,
): RateLimitQuotaResponse_BucketAction {
  const strategy = assignmentStrategy(assignment);
  return create(RateLimitQuotaResponse_BucketActionSchema, {
    bucketId,
    bucketAction: {
      case: "quotaAssignmentAction",
      value: create(
        RateLimitQuotaResponse_BucketAction_QuotaAssignmentActionSchema,
        {
          assignmentTimeToLive: create(DurationSchema, {
            seconds: BigInt(Math.max(1, Math.trunc(ttlSeconds))),
          }),
          rateLimitStrategy: strategy,
        },
      ),
    },
  });
}

/** Encodes a `BucketAction` with an `AbandonAction`. */
export function abandonAction(
  bucketId: BucketId,
): RateLimitQuotaResponse_BucketAction {
  return create(RateLimitQuotaResponse_BucketActionSchema, {
    bucketId,
    bucketAction: {
      case: "abandonAction",
      value: create(RateLimitQuotaResponse_BucketAction_AbandonActionSchema),
    },
  });
}
