// The decide step of the decision pipeline: the plan (each limit's step by its algorithm kind),
// statuses and statistics, dispatched to the kind modules (fixed-window.ts, sliding-window.ts,
// token-bucket.ts; issue 32 item 2).
import type { RateLimit } from "../config/rate-limit-config.js";
import {
  RateLimitResponse_Code as Code,
  type RateLimitResponse_DescriptorStatus,
} from "../proto.js";
import type { RateLimitStats } from "../stats/stats-manager.js";
import type { Clock } from "../util/clock.js";
import type { PlanStep, StatusContext } from "./algorithm-kind.js";
import { weightedCount } from "./algorithms.js";
import { cacheKeyStem, isPerSecond } from "./cache-key.js";
import { limitResetSeconds } from "./counter-decision.js";
import {
  fixedWindowRefundStatus,
  fixedWindowStatus,
  planFixedWindow,
} from "./fixed-window.js";
import type { GcraDecision } from "./gcra.js";
import type { LimitRequest } from "./limit-request.js";
import type { LocalCache } from "./local-cache.js";
import {
  noRefunds,
  PlannedDescriptor,
  type RequestPlan,
} from "./request-plan.js";
import {
  planSlidingWindow,
  slidingWindowRefundStatus,
  slidingWindowStatus,
} from "./sliding-window.js";
import { planTokenBucket, tokenBucketStatus } from "./token-bucket.js";
import { limitStatus, okWithoutLimitStatus } from "./window-status.js";

export { limitStatus, okWithoutLimitStatus } from "./window-status.js";

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
   * Decides one descriptor from its counters (any window kind: the status of its module,
   * picked by `limit.algorithm.kind`) and updates its stats, like
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
   * @throws TypeError for a token bucket (decided by {@link Decider.bucketStatus})
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
   * @throws TypeError for a token bucket (its refund is decided by {@link Decider.bucketStatus})
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
  /**
   * The same decider for a read-only run (Explain, issue 32 item 4): same clock, ratio, cache
   * keys and local-cache verdicts, but every statistic goes to `stats` instead of the limit's
   * own (`total_hits` to none), the local cache is read and never written (no entry added or
   * cleared), and no expiration is drawn (the random source is never called).
   *
   * @param stats - where the statuses' statistics go (a sink the caller reads or drops)
   */
  readOnly(stats: RateLimitStats): Decider;
}

/** A local cache's verdicts without its writes (a read-only decider's). */
function readOnlyLocalCache(
  cache: LocalCache | undefined,
): LocalCache | undefined {
  if (cache === undefined) return undefined;
  return {
    has: (cacheKey) => cache.has(cacheKey),
    add: () => undefined,
    delete: () => undefined,
    get size() {
      return cache.size;
    },
  };
}

/** Builds the {@link Decider} shared by the backends. */
export function createDecider(options: DeciderOptions): Decider {
  return buildDecider(options, undefined);
}

/**
 * The {@link Decider} of `options`; with `mutedStats` the read-only one
 * ({@link Decider.readOnly}).
 */
function buildDecider(
  options: DeciderOptions,
  mutedStats: RateLimitStats | undefined,
): Decider {
  const clock = options.clock;
  const ratio = Math.fround(options.nearLimitRatio ?? 0.8);
  const prefix = options.cacheKeyPrefix ?? "";
  const jitterMax = options.expirationJitterMaxSeconds ?? 300;
  const random = options.random ?? Math.random;
  // A read-only decider writes nothing: no statistic of the limit's, no local-cache entry,
  // no expiration drawn.
  const writes = mutedStats === undefined;
  const localCache = writes
    ? options.localCache
    : readOnlyLocalCache(options.localCache);
  const context: StatusContext = Object.freeze({
    ratio,
    localCache,
    mutedStats,
  });
  // Whether the plan being built charges / draws expirations: set by `plan`, read by
  // `step.windowEntry` (a plan is built synchronously, one at a time).
  let charging = true;
  let drawing = true;

  /** A new counter's lifetime, seconds: `seconds` plus random jitter. */
  function lifetime(seconds: number): number {
    return jitterMax > 0 ? seconds + Math.floor(random() * jitterMax) : seconds;
  }

  // The kinds' plan step reads the request through this one object, rewritten per plan.
  const step: PlanStep = {
    nowSeconds: 0,
    nowUs: 0,
    microseconds() {
      return (step.nowUs = clock.nowMs() * 1000);
    },
    windowEntry(
      index,
      descriptor,
      limit,
      hits,
      cacheKey,
      previousCacheKey,
      lifetimeSeconds,
      windowSeconds,
      windowEndSeconds,
    ) {
      // A refund (negative hits) counts no statistic and is never answered by the local
      // cache, whose entry it makes stale.
      const refund = hits < 0;
      if (refund && charging) localCache?.delete(cacheKey);
      const cached = !refund && localCache?.has(cacheKey) === true;
      return new PlannedDescriptor(
        index,
        descriptor,
        limit,
        hits,
        cacheKey,
        previousCacheKey,
        isPerSecond(limit),
        cached || refund || !drawing ? 0 : lifetime(lifetimeSeconds),
        windowSeconds,
        windowEndSeconds,
        cached,
      );
    },
  };

  /** The status of a window counter (any window kind) from its counters. */
  function counterStatus(
    cacheKey: string,
    limit: RateLimit,
    current: number,
    previous: number,
    hits: number,
    nowSeconds: number,
    charged: boolean,
  ): RateLimitResponse_DescriptorStatus {
    const algorithm = limit.algorithm;
    switch (algorithm.kind) {
      case "fixed_window":
        return fixedWindowStatus(
          context,
          cacheKey,
          limit,
          current,
          hits,
          nowSeconds,
          charged,
        );
      case "sliding_window":
        return slidingWindowStatus(
          context,
          cacheKey,
          limit,
          current,
          previous,
          hits,
          nowSeconds,
          charged,
        );
      case "token_bucket":
        throw new TypeError(
          `token bucket ${cacheKey} has no window counter to decide`,
        );
      default: {
        const never: never = algorithm;
        return never;
      }
    }
  }

  return {
    nowSeconds: () => clock.nowSeconds(),

    plan(request, charge, expirations) {
      const { domain, descriptors, limits, hitsAddends } = request;
      const nowSeconds = clock.nowSeconds();
      step.nowSeconds = nowSeconds;
      step.nowUs = 0;
      charging = charge;
      drawing = expirations && writes;
      const counts = charge && writes;
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
        // A refund (negative hits) counts no statistic.
        const refund = hits < 0;
        const extra = limit.extraLimits;
        for (let k = 0; ;) {
          if (!refund && counts) limit.stats.totalHits.add(hits);
          // The kind's plan step; its store operation says which list the entry joins.
          const algorithm = limit.algorithm;
          let planned: PlannedDescriptor;
          let takesTokens = false;
          switch (algorithm.kind) {
            case "fixed_window":
              planned = planFixedWindow(
                step,
                i,
                descriptor,
                limit,
                algorithm.window,
                hits,
                stem,
              );
              break;
            case "sliding_window":
              planned = planSlidingWindow(
                step,
                i,
                descriptor,
                limit,
                algorithm.window,
                hits,
                stem,
              );
              break;
            case "token_bucket":
              planned = planTokenBucket(step, i, descriptor, limit, hits, stem);
              takesTokens = true;
              break;
            default: {
              const never: never = algorithm;
              return never;
            }
          }
          if (refund) (refunds ??= []).push(planned);
          else if (takesTokens) (buckets ??= []).push(planned);
          else {
            counted.push(planned);
            if (planned.localCacheHit)
              sent ??= counted.slice(0, counted.length - 1);
            else sent?.push(planned);
          }
          if (extra === undefined || k === extra.length) break;
          limit = extra[k++]!;
        }
      }
      return {
        request,
        domain,
        nowSeconds,
        nowUs: step.nowUs,
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
      const stats = mutedStats ?? limit.stats;
      stats.overLimit.add(hits);
      stats.overLimitWithLocalCache.add(hits);
      const reset = limitResetSeconds(limit, nowSeconds);
      if (limit.shadowMode) {
        stats.shadowMode.add(hits);
        return limitStatus(Code.OK, limit, 0, reset);
      }
      return limitStatus(Code.OVER_LIMIT, limit, 0, reset);
    },

    expirationSeconds(limit) {
      const seconds = limit.windowSeconds;
      return lifetime(
        limit.algorithm.kind === "sliding_window" ? 2 * seconds : seconds,
      );
    },

    weightedCount,

    descriptorStatus(cacheKey, limit, after, hits, nowSeconds) {
      return fixedWindowStatus(
        context,
        cacheKey,
        limit,
        after,
        hits,
        nowSeconds,
        true,
      );
    },

    counterStatus,

    refundStatus(limit, current, previous, nowSeconds) {
      const algorithm = limit.algorithm;
      switch (algorithm.kind) {
        case "fixed_window":
          return fixedWindowRefundStatus(limit, current, nowSeconds);
        case "sliding_window":
          return slidingWindowRefundStatus(
            limit,
            current,
            previous,
            nowSeconds,
          );
        case "token_bucket":
          throw new TypeError("a token bucket's refund is decided by GCRA");
        default: {
          const never: never = algorithm;
          return never;
        }
      }
    },

    bucketStatus(limit, hits, decision) {
      const algorithm = limit.algorithm;
      return tokenBucketStatus(
        context,
        limit,
        algorithm.kind === "token_bucket"
          ? algorithm.bucket.burst
          : limit.requestsPerUnit,
        hits,
        decision,
      );
    },

    okWithoutLimit: okWithoutLimitStatus,

    readOnly: (stats) => buildDecider(options, stats),
  };
}
