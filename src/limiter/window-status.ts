/**
 * Building a descriptor status, and the near / over / within-limit statistics every window
 * kind shares (upstream `GetResponseDescriptorStatus`, docs/reference-parity.md#stat-arithmetic).
 * The kind modules (`fixed-window.ts`, `sliding-window.ts`, `token-bucket.ts`) compute the
 * count, reset and remaining their algorithm gives and call these.
 */
import type { Duration } from "@bufbuild/protobuf/wkt";
import type { RateLimit } from "../config/rate-limit-config.js";
import {
  RateLimitResponse_Code as Code,
  type RateLimitResponse_DescriptorStatus,
} from "../proto.js";
import type { StatusContext } from "./algorithm-kind.js";
import { nearLimitThreshold, remainingWithin } from "./counter-decision.js";

/**
 * The decision of a window counter and its statistics (upstream `GetResponseDescriptorStatus`):
 * `after` is the count compared with the limit; an over-limit key enters the local cache for
 * `cacheTtlSeconds` (not when `cacheKey` is undefined); `remaining` ≥ 0 replaces the OK
 * answer's `limit − after`.
 *
 * @param hits - hits this request added (or would have added)
 * @param resetSeconds - `duration_until_reset`, seconds (≥ 1)
 */
export function windowStatus(
  context: StatusContext,
  cacheKey: string | undefined,
  limit: RateLimit,
  after: number,
  hits: number,
  resetSeconds: number,
  cacheTtlSeconds: number,
  remaining: number,
): RateLimitResponse_DescriptorStatus {
  const limitValue = limit.requestsPerUnit;
  const nearThreshold = nearLimitThreshold(limitValue, context.ratio);
  // Upstream subtracts in uint64; when hits > after (only possible when an increment was
  // skipped) the result wraps to a huge number, which compares as "already over".
  const before = after >= hits ? after - hits : Number.MAX_SAFE_INTEGER;
  const stats = context.mutedStats ?? limit.stats;
  let result: RateLimitResponse_DescriptorStatus;
  if (after > limitValue) {
    result = limitStatus(Code.OVER_LIMIT, limit, 0, resetSeconds);
    // Remembered for the whole window (not just the rest of it), as upstream does;
    // harmless because the key embeds its window start.
    if (cacheKey !== undefined)
      context.localCache?.add(cacheKey, cacheTtlSeconds);
    if (before >= limitValue) {
      // Every hit of this request is over the limit.
      stats.overLimit.add(hits);
      if (limit.shadowMode) stats.shadowMode.add(hits);
    } else {
      // The request crossed the limit: hits above it are over; the part between the
      // near-limit threshold (or the old value, if higher) and the limit is near.
      stats.overLimit.add(after - limitValue);
      stats.nearLimit.add(limitValue - Math.max(nearThreshold, before));
      if (limit.shadowMode) stats.shadowMode.add(after - limitValue);
    }
  } else {
    result = limitStatus(
      Code.OK,
      limit,
      remainingWithin(limitValue, after, remaining),
      resetSeconds,
    );
    if (after > nearThreshold) {
      // Only the hits above the near-limit threshold are near.
      stats.nearLimit.add(
        before >= nearThreshold ? hits : after - nearThreshold,
      );
    }
    stats.withinLimit.add(hits);
  }
  if (result.code === Code.OVER_LIMIT && limit.shadowMode)
    result.code = Code.OK;
  return result;
}

// Statuses are built as complete message literals (every field set, as `create()` would leave
// them) rather than through `create()`, which walks the schema on every call: this is the hot
// path. The reset durations are shared, read-only objects, one per value.

/**
 * Returns the status of a descriptor with a limit: `code`, the rule as `currentLimit`,
 * `limitRemaining`, and `resetSeconds` (seconds until the window resets) as a shared Duration.
 */
export function limitStatus(
  code: Code,
  limit: RateLimit,
  limitRemaining: number,
  resetSeconds: number,
): RateLimitResponse_DescriptorStatus {
  return {
    $typeName: "envoy.service.ratelimit.v3.RateLimitResponse.DescriptorStatus",
    code,
    currentLimit: {
      $typeName: "envoy.service.ratelimit.v3.RateLimitResponse.RateLimit",
      name: limit.name,
      requestsPerUnit: limit.requestsPerUnit,
      unit: limit.unit,
    },
    limitRemaining,
    durationUntilReset: resetDuration(resetSeconds),
    quota: undefined,
  };
}

/** Returns the status of a descriptor without a limit: `{code: OK}` only. */
export function okWithoutLimitStatus(): RateLimitResponse_DescriptorStatus {
  return {
    $typeName: "envoy.service.ratelimit.v3.RateLimitResponse.DescriptorStatus",
    code: Code.OK,
    currentLimit: undefined,
    limitRemaining: 0,
    durationUntilReset: undefined,
    quota: undefined,
  };
}

// Shared Duration messages for resets up to one day (MINUTE windows use 60 of them);
// longer resets are built per call.
const cachedResets: (Duration | undefined)[] = [];
const maxCachedResetSeconds = 86400;

/** Returns a read-only Duration of `seconds` whole seconds (shared for small values). */
function resetDuration(seconds: number): Duration {
  if (seconds > maxCachedResetSeconds) {
    return {
      $typeName: "google.protobuf.Duration",
      seconds: BigInt(seconds),
      nanos: 0,
    };
  }
  let duration = cachedResets[seconds];
  if (duration === undefined) {
    duration = Object.freeze({
      $typeName: "google.protobuf.Duration" as const,
      seconds: BigInt(seconds),
      nanos: 0,
    });
    cachedResets[seconds] = duration;
  }
  return duration;
}
