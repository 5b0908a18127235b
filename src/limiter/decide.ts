// The decide step of the decision pipeline: plans, thresholds, statistics and statuses.
import type { Duration } from "@bufbuild/protobuf/wkt";
import type { RateLimit } from "../config/rate-limit-config.js";
import {
  RateLimitResponse_Code as Code,
  type RateLimitResponse_DescriptorStatus,
} from "../proto.js";
import type { Clock } from "../util/clock.js";
import { cacheKeyStem, isPerSecond } from "./cache-key.js";
import type { LimitRequest } from "./limit-request.js";
import type { LocalCache } from "./local-cache.js";
import {
  noRefunds,
  PlannedDescriptor,
  type RequestPlan,
} from "./request-plan.js";
import {
  counterDecision,
  limitResetSeconds,
  nearLimitThreshold,
  remainingWithin,
  weightedCount,
} from "./counter-decision.js";
import type { GcraDecision } from "./gcra.js";
import { windowStartSeconds } from "./window.js";

/** Options of {@link createDecider}. */
export interface DeciderOptions {
  /** Time source. */
  readonly clock: Clock;
  /**
   * Fraction of the limit above which hits count as near limit (`NEAR_LIMIT_RATIO`),
   * 0 ≤ ratio ≤ 1. @defaultValue 0.8
   */
  readonly nearLimitRatio?: number;
  /** String glued before every cache key (`CACHE_KEY_PREFIX`). @defaultValue "" */
  readonly cacheKeyPrefix?: string;
  /**
   * Upper bound (exclusive) of the random seconds added to a key's expiration
   * (`EXPIRATION_JITTER_MAX_SECONDS`); ≤ 0 disables jitter. @defaultValue 300
   */
  readonly expirationJitterMaxSeconds?: number;
  /** Random source in [0, 1). @defaultValue Math.random */
  readonly random?: () => number;
  /**
   * Local over-limit cache (`LOCAL_CACHE_SIZE_IN_BYTES` > 0); keys found over limit are
   * remembered until their window ends. @defaultValue none
   */
  readonly localCache?: LocalCache;
}

/**
 * The "plan" and "decide" steps of the decision pipeline (`pipeline.ts`), shared by every
 * backend: the request plan (cache keys, expirations, local-cache verdicts), thresholds,
 * near/over/within-limit statistic arithmetic and status building. The rules are the
 * reference's (upstream `limiter/base_limiter.go`; docs/reference-parity.md#stat-arithmetic).
 */
export interface Decider {
  /** Current time in whole seconds since the Unix epoch (one clock read per request). */
  nowSeconds(): number;
  /**
   * Builds the plan of one request (one clock read): for every descriptor with a limit, its
   * cache key(s), expiration, and local-cache verdict; a plan to charge counts `total_hits`
   * (upstream `GenerateCacheKeys`).
   *
   * @param request - the request after the decision rules: a descriptor whose limit is
   *   `undefined` is not planned; a negative hits addend is a refund (planned in `refunds`,
   *   counting no statistic and clearing its local-cache entry when charged)
   * @param charge - false for a read-only plan (Explain): no statistic is counted
   * @param expirations - draw each counter's expiration (with jitter) for the backend; false
   *   for read-only plans and in-process backends, which expire counters with their window
   */
  plan(
    request: LimitRequest,
    charge: boolean,
    expirations: boolean,
  ): RequestPlan;
  /**
   * Status of a descriptor answered from the local cache: OVER_LIMIT (OK in shadow mode),
   * counting all hits as over limit and as `over_limit_with_local_cache`.
   */
  localCacheStatus(
    limit: RateLimit,
    hitsAddend: number,
    nowSeconds: number,
  ): RateLimitResponse_DescriptorStatus;
  /**
   * Returns the expiration of a new counter in seconds: window length plus random jitter; two
   * window lengths plus jitter for sliding windows (the counter is read as the previous window
   * during the next one).
   */
  expirationSeconds(limit: RateLimit): number;
  /**
   * The count a decision compares with the limit: `current` for fixed windows; for sliding
   * windows `ceil(previous × (W − e)/W) + current` (the pure {@link weightedCount}).
   *
   * @param current - the current window's counter
   * @param previous - the previous window's counter (ignored for fixed windows)
   */
  weightedCount(
    limit: RateLimit,
    current: number,
    previous: number,
    nowSeconds: number,
  ): number;
  /**
   * Decides one descriptor from its counters (any algorithm) and updates its stats, like
   * {@link Decider.descriptorStatus} but with the sliding-window weighting, and for a
   * request that all-or-nothing charging did not charge (`charged` false): the counters are
   * then the values before the request; an OK answer reports `limit − weighted count` as
   * remaining (nothing was taken) and counts the hits as within limit; an over-limit answer
   * enters the key in the local cache only when the window is already full without this
   * request.
   *
   * @param current - the current window's counter: after the increment when `charged`,
   *   before it otherwise
   * @param previous - the previous window's counter (sliding windows; else ignored)
   */
  counterStatus(
    cacheKey: string,
    limit: RateLimit,
    current: number,
    previous: number,
    hitsAddend: number,
    nowSeconds: number,
    charged: boolean,
  ): RateLimitResponse_DescriptorStatus;
  /**
   * Decides one descriptor from its counter after the increment and updates its stats
   * (upstream `GetResponseDescriptorStatus`; stat split of
   * docs/reference-parity.md#stat-arithmetic).
   *
   * @param cacheKey - the descriptor's cache key; entered in the local cache when over limit
   * @param limitAfterIncrease - counter value after adding `hitsAddend`
   * @param hitsAddend - hits this request added (or would have added)
   */
  descriptorStatus(
    cacheKey: string,
    limit: RateLimit,
    limitAfterIncrease: number,
    hitsAddend: number,
    nowSeconds: number,
  ): RateLimitResponse_DescriptorStatus;
  /**
   * Status of a refund (a descriptor with `is_negative_hits`): always OK, counting no
   * statistic; `limit_remaining` = limit − the (weighted) count after the refund, ≥ 0.
   *
   * @param current - the current window's counter after the refund
   * @param previous - the previous window's counter (sliding windows; else ignored)
   */
  refundStatus(
    limit: RateLimit,
    current: number,
    previous: number,
    nowSeconds: number,
  ): RateLimitResponse_DescriptorStatus;
  /**
   * Status of a token bucket (`algorithm: token_bucket`) from the store's GCRA decision, and
   * its statistics: admitted → OK, counting the hits within limit and, of them, those that
   * took the bucket's used part (`burst − limit_remaining`) above `floor(burst × ratio)` near
   * limit; refused → OVER_LIMIT (OK in shadow mode), counting every hit over limit (a refused
   * request takes nothing); a refund (hits < 0) → OK, no statistic. `limit_remaining` and
   * `duration_until_reset` are GCRA's (`gcra.ts`): the single hits that would be admitted now,
   * and the seconds until the bucket is full again (≥ 1).
   *
   * @param hits - the request's hits addend for the descriptor (not the store increment)
   */
  bucketStatus(
    limit: RateLimit,
    hits: number,
    decision: GcraDecision,
  ): RateLimitResponse_DescriptorStatus;
  /** Status of a descriptor without a limit: `{code: OK}` only. */
  okWithoutLimit(): RateLimitResponse_DescriptorStatus;
}

/** Builds the {@link Decider} shared by the backends. */
export function createDecider(options: DeciderOptions): Decider {
  const clock = options.clock;
  const ratio = Math.fround(options.nearLimitRatio ?? 0.8);
  const prefix = options.cacheKeyPrefix ?? "";
  const jitterMax = options.expirationJitterMaxSeconds ?? 300;
  const random = options.random ?? Math.random;
  const localCache = options.localCache;

  /**
   * The decision shared by every algorithm (upstream `GetResponseDescriptorStatus`): `after` is
   * the count compared with the limit; an over-limit key enters the local cache for
   * `cacheTtlSeconds` (not when `cacheKey` is undefined); `remaining` ≥ 0 replaces the OK
   * answer's `limit − after`.
   */
  function decide(
    cacheKey: string | undefined,
    limit: RateLimit,
    after: number,
    hits: number,
    resetSeconds: number,
    cacheTtlSeconds: number,
    remaining: number,
  ): RateLimitResponse_DescriptorStatus {
    const limitValue = limit.requestsPerUnit;
    const nearThreshold = nearLimitThreshold(limitValue, ratio);
    // Upstream subtracts in uint64; when hits > after (only possible when an increment was
    // skipped) the result wraps to a huge number, which compares as "already over".
    const before = after >= hits ? after - hits : Number.MAX_SAFE_INTEGER;
    const stats = limit.stats;
    let result: RateLimitResponse_DescriptorStatus;
    if (after > limitValue) {
      result = limitStatus(Code.OVER_LIMIT, limit, 0, resetSeconds);
      // Remembered for the whole window (not just the rest of it), as upstream does;
      // harmless because the key embeds its window start.
      if (cacheKey !== undefined) localCache?.add(cacheKey, cacheTtlSeconds);
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

  /**
   * A new counter's lifetime, seconds: the window (two for sliding windows, read as the
   * previous window during the next one) plus random jitter.
   */
  function lifetime(windowSeconds: number, sliding: boolean): number {
    const seconds = sliding ? 2 * windowSeconds : windowSeconds;
    return jitterMax > 0 ? seconds + Math.floor(random() * jitterMax) : seconds;
  }

  function expirationSeconds(limit: RateLimit): number {
    return lifetime(limit.windowSeconds, limit.sliding);
  }

  return {
    nowSeconds: () => clock.nowSeconds(),

    plan(request, charge, expirations) {
      const { domain, descriptors, limits, hitsAddends } = request;
      const nowSeconds = clock.nowSeconds();
      let nowUs = 0;
      const counted: PlannedDescriptor[] = [];
      // Built only once a local-cache hit shows up; until then `counted` is sent whole.
      let sent: PlannedDescriptor[] | undefined;
      let allOrNothing: boolean | undefined;
      let refunds: PlannedDescriptor[] | undefined;
      let buckets: PlannedDescriptor[] | undefined;
      const n = descriptors.length;
      for (let i = 0; i < n; i++) {
        let limit = limits[i];
        if (limit === undefined) continue;
        allOrNothing ??= limit.allOrNothing;
        const descriptor = descriptors[i]!;
        const stem = cacheKeyStem(prefix, domain, descriptor, limit);
        const hits = hitsAddends[i]!;
        // A refund (negative hits) counts no statistic and is never answered by the local
        // cache, whose entry it makes stale.
        const refund = hits < 0;
        const extra = limit.extraLimits;
        for (let k = 0; ;) {
          if (!refund && charge) limit.stats.totalHits.add(hits);
          let planned: PlannedDescriptor;
          if (limit.tokenBucket !== undefined) {
            if (nowUs === 0) nowUs = clock.nowMs() * 1000;
            planned = new PlannedDescriptor(
              i,
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
            if (refund) (refunds ??= []).push(planned);
            else (buckets ??= []).push(planned);
          } else {
            let cacheKey: string;
            let previousCacheKey: string | undefined;
            let windowSeconds: number;
            let windowEnd: number;
            const calendar = limit.calendar;
            if (calendar === undefined) {
              windowSeconds = limit.windowSeconds;
              const start = windowStartSeconds(nowSeconds, windowSeconds);
              cacheKey = stem + String(start) + limit.cacheKeySuffix;
              previousCacheKey = limit.sliding
                ? stem + String(start - windowSeconds) + limit.cacheKeySuffix
                : undefined;
              windowEnd = start + windowSeconds;
            } else {
              const period = calendar.period(nowSeconds);
              cacheKey = stem + period.cacheKeyPart + limit.cacheKeySuffix;
              previousCacheKey = undefined;
              windowSeconds = period.endSeconds - period.startSeconds;
              windowEnd = period.endSeconds;
            }
            if (refund && charge) localCache?.delete(cacheKey);
            const cached = !refund && localCache?.has(cacheKey) === true;
            planned = new PlannedDescriptor(
              i,
              descriptor,
              limit,
              hits,
              cacheKey,
              previousCacheKey,
              isPerSecond(limit),
              cached || refund || !expirations
                ? 0
                : lifetime(windowSeconds, limit.sliding),
              windowSeconds,
              windowEnd,
              cached,
            );
            if (refund) (refunds ??= []).push(planned);
            else {
              counted.push(planned);
              if (cached) sent ??= counted.slice(0, counted.length - 1);
              else sent?.push(planned);
            }
          }
          if (extra === undefined || k === extra.length) break;
          limit = extra[k++]!;
        }
      }
      return {
        request,
        domain,
        nowSeconds,
        nowUs,
        size: n,
        counted,
        sent: sent ?? counted,
        buckets: buckets ?? noRefunds,
        allOrNothing: allOrNothing ?? false,
        refunds: refunds ?? noRefunds,
        charged: true,
      };
    },

    localCacheStatus(limit, hits, nowSeconds) {
      const stats = limit.stats;
      stats.overLimit.add(hits);
      stats.overLimitWithLocalCache.add(hits);
      const reset = limitResetSeconds(limit, nowSeconds);
      if (limit.shadowMode) {
        stats.shadowMode.add(hits);
        return limitStatus(Code.OK, limit, 0, reset);
      }
      return limitStatus(Code.OVER_LIMIT, limit, 0, reset);
    },

    expirationSeconds,

    weightedCount,

    descriptorStatus(cacheKey, limit, after, hits, nowSeconds) {
      return decide(
        cacheKey,
        limit,
        after,
        hits,
        limitResetSeconds(limit, nowSeconds),
        limit.windowSeconds,
        -1,
      );
    },

    counterStatus(cacheKey, limit, current, previous, hits, now, charged) {
      const d = counterDecision(limit, current, previous, hits, now, charged);
      return decide(
        d.cacheWhenOver ? cacheKey : undefined,
        limit,
        d.count,
        hits,
        d.resetSeconds,
        d.cacheTtlSeconds,
        d.remaining,
      );
    },

    refundStatus(limit, current, previous, nowSeconds) {
      const count = weightedCount(limit, current, previous, nowSeconds);
      return limitStatus(
        Code.OK,
        limit,
        Math.max(0, limit.requestsPerUnit - count),
        limitResetSeconds(limit, nowSeconds),
      );
    },

    bucketStatus(limit, hits, decision) {
      const remaining = decision.limitRemaining;
      const reset = decision.durationUntilResetSeconds;
      // A refund: always OK, no statistic.
      if (hits < 0) return limitStatus(Code.OK, limit, remaining, reset);
      const stats = limit.stats;
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
      const burst = limit.tokenBucket?.burst ?? limit.requestsPerUnit;
      const threshold = nearLimitThreshold(burst, ratio);
      const used = burst - remaining;
      if (used > threshold)
        stats.nearLimit.add(Math.min(hits, used - threshold));
      stats.withinLimit.add(hits);
      return limitStatus(Code.OK, limit, remaining, reset);
    },

    okWithoutLimit: okWithoutLimitStatus,
  };
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
