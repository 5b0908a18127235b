// One request decided against the canary's candidate config, with the live decision rules: the
// limits are found as ShouldRateLimit finds them (`getLimit`, run-time overrides, then
// `applyLimitRules` for `unlimited` and `replaces`), counted and decided by a
// `RateLimitPipeline` (near limit, shadow mode, sliding windows, token buckets, all-or-nothing,
// stop-increment, several limits per descriptor), and the overall code comes from
// `decidingDescriptor` (quota mode). Only the counters differ: a `CanaryCounterBackend`.

import type {
  RateLimit,
  RateLimitConfig,
} from "../config/rate-limit-config.js";
import { createDecider, type Decider } from "../limiter/decide.js";
import type { OverrideLookup } from "../limiter/decision-hooks.js";
import {
  answerUnlimited,
  applyLimitRules,
  decidingDescriptor,
} from "../limiter/decision-rules.js";
import { createLocalCache } from "../limiter/local-cache.js";
import { RateLimitPipeline } from "../limiter/pipeline.js";
import {
  RateLimitResponse_Code as Code,
  type RateLimitDescriptor,
  type RateLimitResponse_DescriptorStatus,
} from "../proto.js";
import type { Clock } from "../util/clock.js";
import type { CanaryCounterBackend } from "./canary-backend.js";
import { noLiveCounters, type LiveCounter } from "./live-counters.js";

/** Options of {@link createCandidateEvaluator}; the decision settings are the live ones. */
export interface CandidateEvaluatorOptions {
  /** The candidate config. */
  readonly config: RateLimitConfig;
  /** Where the candidate's counters come from. */
  readonly backend: CanaryCounterBackend;
  /** `NEAR_LIMIT_RATIO` (statistics of the candidate only). @defaultValue 0.8 */
  readonly nearLimitRatio?: number;
  /** `CACHE_KEY_PREFIX`: the candidate's keys must be the live ones to share counters. @defaultValue "" */
  readonly cacheKeyPrefix?: string;
  /**
   * `EXPIRATION_JITTER_MAX_SECONDS`, for candidate-only counters in a store with expiries.
   * @defaultValue 0
   */
  readonly expirationJitterMaxSeconds?: number;
  /** `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`. @defaultValue false */
  readonly stopCacheKeyIncrementWhenOverlimit?: boolean;
  /** `QUOTA_MODE`. @defaultValue false */
  readonly globalQuotaMode?: boolean;
  /** The run-time overrides the live decision applies; applied to the candidate's rules too. */
  readonly overrides?: OverrideLookup;
  /**
   * `LOCAL_CACHE_SIZE_IN_BYTES`: the candidate gets a local over-limit cache of its own, as
   * large, since a local-cache hit charges nothing and so changes the counts. 0: none.
   * @defaultValue 0
   */
  readonly localCacheSizeBytes?: number;
}

/** What the candidate decided for one request. */
export interface CandidateDecision {
  /** The overall code before `SHADOW_MODE` (as `DecidedRequest.overallCode`). */
  readonly overallCode: Code;
  /** Parallel to the descriptors: the rule each matched (before `unlimited` and `replaces`). */
  readonly matched: readonly (RateLimit | undefined)[];
  /** Parallel to the descriptors: the limit counted, `undefined` where none was. */
  readonly limits: readonly (RateLimit | undefined)[];
  /** One status per descriptor. */
  readonly statuses: readonly RateLimitResponse_DescriptorStatus[];
  /** Index of the descriptor that makes the request over limit; undefined when OK. */
  readonly deciding: number | undefined;
  /**
   * The cache keys (window counters and token buckets) of the limits `replaces` dropped (a
   * matched, limited rule not counted): the candidate would count them in other requests.
   * Usually empty.
   */
  readonly replacedKeys: readonly string[];
}

/** Decides requests against a candidate config (see the file comment). */
export interface CandidateEvaluator {
  /** The candidate config. */
  readonly config: RateLimitConfig;
  /**
   * Decides one request as the candidate would have at the live request's time.
   *
   * @param hitsAddends - parallel to `descriptors`: the hits the live decision resolved (a
   *   descriptor's hits do not depend on the config)
   * @param live - the live counters of the same request ({@link liveCounters})
   * @param nowSeconds - the live request's time, seconds since the Unix epoch
   * @param nowMs - the same time in milliseconds (token buckets), within `nowSeconds`
   * @throws {@link BackendError} when the canary's own store fails (kv)
   */
  evaluate(
    domain: string,
    descriptors: readonly RateLimitDescriptor[],
    hitsAddends: readonly number[],
    live: ReadonlyMap<string, LiveCounter>,
    nowSeconds: number,
    nowMs: number,
  ): Promise<CandidateDecision>;
}

/** Builds the {@link CandidateEvaluator} of one canary. */
export function createCandidateEvaluator(
  options: CandidateEvaluatorOptions,
): CandidateEvaluator {
  const { config, backend, overrides } = options;
  const globalQuotaMode = options.globalQuotaMode ?? false;
  // The live request's time, set before each decision: the plan reads it synchronously.
  const clock: Clock & { seconds: number; ms: number } = {
    seconds: 0,
    ms: 0,
    nowSeconds() {
      return this.seconds;
    },
    nowMs() {
      return this.ms;
    },
  };
  const localCacheBytes = options.localCacheSizeBytes ?? 0;
  const decider = createDecider({
    clock,
    nearLimitRatio: options.nearLimitRatio ?? 0.8,
    cacheKeyPrefix: options.cacheKeyPrefix ?? "",
    expirationJitterMaxSeconds: options.expirationJitterMaxSeconds ?? 0,
    // On the live request times: its entries expire as the live cache's would.
    ...(localCacheBytes > 0
      ? { localCache: createLocalCache({ maxBytes: localCacheBytes, clock }) }
      : {}),
  });
  let pendingLive: ReadonlyMap<string, LiveCounter> = noLiveCounters;
  // The pipeline plans each request synchronously inside `doLimit`: the plan's entries are
  // bound to that request's live counters there, before any reaches the backend.
  const planning: Decider = {
    ...decider,
    plan(domain, descriptors, limits, hitsAddends, charge, expirations) {
      const plan = decider.plan(
        domain,
        descriptors,
        limits,
        hitsAddends,
        charge,
        expirations,
      );
      backend.bind(plan, pendingLive);
      return plan;
    },
  };
  const pipeline = new RateLimitPipeline({
    backend,
    decider: planning,
    stopCacheKeyIncrementWhenOverlimit:
      options.stopCacheKeyIncrementWhenOverlimit ?? false,
  });

  return {
    config,
    async evaluate(domain, descriptors, hitsAddends, live, nowSeconds, nowMs) {
      const n = descriptors.length;
      const matched = new Array<RateLimit | undefined>(n);
      const limits = new Array<RateLimit | undefined>(n);
      for (let i = 0; i < n; i++) {
        const descriptor = descriptors[i];
        if (descriptor === undefined) continue;
        let limit = config.getLimit(domain, descriptor);
        if (limit !== undefined && overrides !== undefined)
          limit = overrides.find(domain, descriptor, limit) ?? limit;
        matched[i] = limit;
        limits[i] = limit;
      }
      const unlimited = applyLimitRules(limits);
      clock.seconds = nowSeconds;
      clock.ms = nowMs;
      const replacedKeys = replaced(domain, descriptors, matched, limits);
      pendingLive = live;
      let counted: Promise<RateLimitResponse_DescriptorStatus[]>;
      try {
        counted = pipeline.doLimit(domain, descriptors, limits, hitsAddends);
      } finally {
        pendingLive = noLiveCounters;
      }
      const statuses = await counted;
      if (unlimited !== undefined) answerUnlimited(statuses, unlimited);
      const deciding = decidingDescriptor(
        statuses,
        limits,
        unlimited,
        globalQuotaMode,
        new Array<boolean>(n),
      );
      return {
        overallCode: deciding === undefined ? Code.OK : Code.OVER_LIMIT,
        matched,
        limits,
        statuses,
        deciding,
        replacedKeys,
      };
    },
  };

  /** The cache keys of the limits `replaces` dropped from a request. */
  function replaced(
    domain: string,
    descriptors: readonly RateLimitDescriptor[],
    matched: readonly (RateLimit | undefined)[],
    limits: readonly (RateLimit | undefined)[],
  ): readonly string[] {
    let dropped: (RateLimit | undefined)[] | undefined;
    for (let i = 0; i < matched.length; i++) {
      const limit = matched[i];
      if (limit !== undefined && !limit.unlimited && limits[i] === undefined)
        (dropped ??= new Array<RateLimit | undefined>(matched.length))[i] =
          limit;
    }
    if (dropped === undefined) return noKeys;
    // A read-only plan (no statistic, no binding) only to build the keys.
    const plan = decider.plan(
      domain,
      descriptors,
      dropped,
      undefined,
      false,
      false,
    );
    return [...plan.counted, ...plan.buckets].map((d) => d.cacheKey);
  }
}

const noKeys: readonly string[] = Object.freeze([]);
