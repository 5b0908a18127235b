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
import {
  createDecider,
  okWithoutLimitStatus,
  type Decider,
} from "../limiter/decide.js";
import { calendarOf } from "../config/algorithm.js";
import { weightedCount } from "../limiter/algorithms.js";
import { cacheKeyString } from "../limiter/cache-key.js";
import type {
  PlannedDescriptor,
  RequestPlan,
} from "../limiter/request-plan.js";
import { windowStartSeconds } from "../limiter/window.js";
import type { OverrideLookup } from "../limiter/decision-hooks.js";
import {
  answerUnlimited,
  applyLimitRules,
  decidingDescriptor,
} from "../limiter/decision-rules.js";
import { LimitRequest } from "../limiter/limit-request.js";
import { createLocalCache } from "../limiter/local-cache.js";
import { RateLimitPipeline } from "../limiter/pipeline.js";
import {
  RateLimitResponse_Code as Code,
  type RateLimitDescriptor,
  type RateLimitResponse_DescriptorStatus,
} from "../proto.js";
import type { Clock } from "../util/clock.js";
import type { CanaryCounterBackend } from "./canary-backend.js";
import type { CanaryLedger } from "./canary-ledger.js";
import { noLiveCounters, type LiveCounter } from "./live-counters.js";
import { sameCounter, type CandidateRule } from "./rule-equivalence.js";

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
  /**
   * Whether two descriptors of one request with the same cache key see each other's hits
   * (false for mc, see `CanaryCounterBackendOptions.sameKeyAccumulates`). @defaultValue true
   */
  readonly sameKeyAccumulates?: boolean;
}

/** What the candidate decided for one request. */
export interface CandidateDecision {
  /** The overall code before `SHADOW_MODE` (as `Decision.overallCode`). */
  readonly overallCode: Code;
  /** Parallel to the descriptors: the rule each matched (before `unlimited` and `replaces`). */
  readonly matched: readonly (RateLimit | undefined)[];
  /** Parallel to the descriptors: the limit counted, `undefined` where none was. */
  readonly limits: readonly (RateLimit | undefined)[];
  /**
   * One status per descriptor; empty when decided from the live reading alone
   * ({@link CandidateEvaluator.decideFromReading}), whose limits are never `rate_limits:` lists.
   */
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
   * @param request - the live request: its domain, descriptors and the hits the live decision
   *   resolved (a descriptor's hits do not depend on the config; its limits are not read)
   * @param live - the live counters of the same request ({@link liveCounters})
   * @param nowSeconds - the live request's time, seconds since the Unix epoch
   * @param nowMs - the same time in milliseconds (token buckets), within `nowSeconds`
   * @throws {@link BackendError} when the canary's own store fails (kv)
   */
  evaluate(
    request: LimitRequest,
    live: ReadonlyMap<string, LiveCounter>,
    nowSeconds: number,
    nowMs: number,
  ): Promise<CandidateDecision>;
  /**
   * Decides one request from the live reading alone, without the candidate's pipeline, where
   * that is the same arithmetic: every descriptor the candidate counts uses the live decision's
   * counter for it (same cache key: {@link sameCounter}), or a counter of the candidate only
   * kept in the ledger (not a calendar period), in charge-each mode, without stop-increment, a
   * local cache, token buckets, `rate_limits:` lists, refunds or a limit `replaces` dropped.
   * The count is then the live count after the request plus the ledger's extra (or the
   * ledger's count, charged with the hits), weighted as `counterDecision` weights a charged request (`weightedCount`,
   * counter-decision.ts) and decided by the over-limit rule of `decide.ts` (`count >
   * requests_per_unit`, OK in shadow mode); the overall code by
   * `decidingDescriptor`. A few hundred nanoseconds instead of a second decision; the unit
   * tests' differential runs go through both paths. Both configs charge the same counters the
   * same hits here, so the ledger's extras stay; a key the ledger holds gets its live count
   * (`seen`) updated.
   *
   * @param plan - the live request's plan as the store counted it (`Decision.counted`): its
   *   request (domain, descriptors, hits), what the store read, and whether it was charged
   * @param ledger - the canary's ledger (extras over the live counts)
   * @param rules - the candidate's rule for each live rule of a domain whose rules have the
   *   same shape in both configs (`ruleCorrespondence`); a descriptor counted by one of
   *   them needs no lookup
   * @returns undefined when the request needs the pipeline ({@link CandidateEvaluator.evaluate});
   *   the decision (and its arrays) is reused by the next call: read it before
   */
  decideFromReading(
    plan: RequestPlan,
    ledger: CanaryLedger,
    rules: ReadonlyMap<RateLimit, CandidateRule>,
  ): CandidateDecision | undefined;
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
    plan(request, charge, expirations) {
      const plan = decider.plan(request, charge, expirations);
      backend.bind(plan, pendingLive);
      return plan;
    },
  };
  const pipeline = new RateLimitPipeline({
    backend,
    decider: planning,
    stopCacheKeyIncrementWhenOverlimit:
      options.stopCacheKeyIncrementWhenOverlimit ?? false,
    recordsCounts: false,
  });

  const arithmetic =
    localCacheBytes <= 0 && options.stopCacheKeyIncrementWhenOverlimit !== true;
  const prefix = options.cacheKeyPrefix ?? "";
  const accumulates = options.sameKeyAccumulates ?? true;
  const ownInProcess = backend.inProcess;
  // Scratch arrays of the arithmetic path (one request at a time, synchronously), one set per
  // request size: setting an array's length costs more than the rest of the path (measured).
  const scratches: Scratch[] = [];

  /**
   * The candidate's rules for a request (lookup and overrides), before `applyLimitRules`, in
   * `matched` (a new array when not given).
   */
  function lookUp(
    domain: string,
    descriptors: readonly RateLimitDescriptor[],
    matched: (RateLimit | undefined)[] = new Array<RateLimit | undefined>(
      descriptors.length,
    ),
  ): (RateLimit | undefined)[] {
    const n = descriptors.length;
    for (let i = 0; i < n; i++) {
      const descriptor = descriptors[i];
      matched[i] =
        descriptor === undefined ? undefined : lookUpOne(domain, descriptor);
    }
    return matched;
  }

  /** The candidate's rule for one descriptor (lookup and overrides). */
  function lookUpOne(
    domain: string,
    descriptor: RateLimitDescriptor,
  ): RateLimit | undefined {
    const limit = config.getLimit(domain, descriptor);
    return limit !== undefined && overrides !== undefined
      ? (overrides.find(domain, descriptor, limit) ?? limit)
      : limit;
  }

  return {
    config,

    decideFromReading(plan, ledger, rules) {
      const { domain, descriptors, hitsAddends } = plan.request;
      if (!arithmetic || !plan.charged) return undefined;
      if (plan.buckets.length > 0 || plan.refunds.length > 0) return undefined;
      const counted = plan.counted;
      const n = descriptors.length;
      const s =
        n < maxScratchSize ? (scratches[n] ??= new Scratch(n)) : new Scratch(n);
      const { shared, ownKeys, live, matched, limits } = s;
      // The candidate's rule of each descriptor: the one that corresponds to the live rule
      // counted for it when the domain's rules have the same shape in both configs, else a
      // lookup. The live plan's entries come in descriptor order, one per counted limit.
      let k = 0;
      for (let i = 0; i < n; i++) {
        while (k < counted.length && (counted[k]?.index ?? n) < i) k++;
        const entry = counted[k]?.index === i ? counted[k] : undefined;
        live[i] = entry;
        const rule = entry === undefined ? undefined : rules.get(entry.limit);
        const descriptor = descriptors[i];
        matched[i] =
          rule !== undefined
            ? rule.limit
            : descriptor === undefined
              ? undefined
              : lookUpOne(domain, descriptor);
        limits[i] = matched[i];
      }
      const unlimited = applyLimitRules(limits);
      const now = plan.nowSeconds;
      // First every descriptor is checked, then counted: nothing is charged for a request the
      // pipeline ends up deciding.
      for (let i = 0; i < n; i++) {
        shared[i] = undefined;
        ownKeys[i] = undefined;
        const limit = limits[i];
        if (limit === undefined) {
          // Unlimited or no rule: OK without a counter; a limit `replaces` dropped is left to
          // the pipeline (its counter's extra must follow).
          const rule = matched[i];
          if (rule !== undefined && !rule.unlimited) return undefined;
          continue;
        }
        if (
          (hitsAddends[i] ?? 0) < 0 ||
          limit.algorithm.kind === "token_bucket" ||
          limit.extraLimits !== undefined ||
          limit.allOrNothing
        )
          return undefined;
        const entry = live[i];
        if (entry !== undefined) {
          if (
            entry.localCacheHit ||
            entry.limit.extraLimits !== undefined ||
            entry.limit.allOrNothing
          )
            return undefined;
          if (sameCounter(entry.limit, limit)) {
            shared[i] = entry;
            continue;
          }
        }
        // A counter of the candidate only: in the ledger, unless it lives in a remote store,
        // the window is a calendar period, or another live counter of the request has its key.
        const descriptor = descriptors[i];
        if (
          !ownInProcess ||
          calendarOf(limit.algorithm) !== undefined ||
          descriptor === undefined
        )
          return undefined;
        const key = cacheKeyString(prefix, domain, descriptor, limit, now);
        for (const d of counted) if (d.cacheKey === key) return undefined;
        ownKeys[i] = key;
      }
      // Without accumulation (mc), a key twice in one request is left to the pipeline, whose
      // backend answers it the store's way.
      if (!accumulates && n > 1 && repeatsKey(shared, ownKeys, n))
        return undefined;
      const statuses = s.statuses;
      for (let i = 0; i < n; i++) {
        const status = statuses[i];
        const limit = limits[i];
        if (status === undefined) return undefined;
        status.code = Code.OK;
        if (limit === undefined) continue;
        let current: number;
        let previous: number;
        const entry = shared[i];
        const key = ownKeys[i];
        if (entry !== undefined) {
          // The live count after the request (the same hits charged) plus the ledger's extra.
          current = entry.current;
          const held = ledger.get(entry.cacheKey);
          if (held !== undefined) {
            held.seen = current;
            current = Math.max(0, current + held.extra);
          }
          previous = Math.max(
            0,
            entry.previous + ledger.extra(entry.previousCacheKey),
          );
        } else if (key !== undefined) {
          const descriptor = descriptors[i];
          if (descriptor === undefined) return undefined;
          const windowSeconds = limit.windowSeconds;
          const end = windowStartSeconds(now, windowSeconds) + windowSeconds;
          const sliding = limit.algorithm.kind === "sliding_window";
          const held = ledger.entry(key, sliding ? end + windowSeconds : end);
          held.extra += hitsAddends[i] ?? 0;
          current = Math.max(0, held.seen + held.extra);
          previous = sliding
            ? ledger.count(
                cacheKeyString(
                  prefix,
                  domain,
                  descriptor,
                  limit,
                  now - windowSeconds,
                ),
              )
            : 0;
        } else continue;
        // counterDecision's count of a charged request: the weighted count after it.
        const count = weightedCount(limit, current, previous, now);
        if (count > limit.requestsPerUnit && !limit.shadowMode)
          status.code = Code.OVER_LIMIT;
      }
      const deciding = decidingDescriptor(
        statuses,
        { limits, unlimited },
        globalQuotaMode,
        s.quota,
      );
      const decision = s.decision;
      decision.overallCode = deciding === undefined ? Code.OK : Code.OVER_LIMIT;
      decision.deciding = deciding;
      return decision;
    },

    async evaluate(request, live, nowSeconds, nowMs) {
      const { domain, descriptors, hitsAddends } = request;
      const n = descriptors.length;
      const matched = lookUp(domain, descriptors);
      const limits = matched.slice();
      const unlimited = applyLimitRules(limits);
      clock.seconds = nowSeconds;
      clock.ms = nowMs;
      const replacedKeys = replaced(domain, descriptors, matched, limits);
      const candidate = LimitRequest.of(
        domain,
        descriptors.map((descriptor, i) => ({
          descriptor,
          limit: limits[i],
          hitsAddend: hitsAddends[i] ?? 0,
          unlimited: unlimited?.[i] === true,
        })),
      );
      pendingLive = live;
      let counted: Promise<RateLimitResponse_DescriptorStatus[]>;
      try {
        counted = pipeline.doLimit(candidate);
      } finally {
        pendingLive = noLiveCounters;
      }
      const statuses = await counted;
      if (unlimited !== undefined) answerUnlimited(statuses, unlimited);
      const deciding = decidingDescriptor(
        statuses,
        candidate,
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
      LimitRequest.of(
        domain,
        descriptors.map((descriptor, i) => ({
          descriptor,
          limit: dropped[i],
        })),
      ),
      false,
      false,
    );
    return [...plan.counted, ...plan.buckets].map((d) => d.cacheKey);
  }
}

const noKeys: readonly string[] = Object.freeze([]);

/** Whether two descriptors of a request count on the same key (bounded: larger requests say yes). */
function repeatsKey(
  shared: readonly (PlannedDescriptor | undefined)[],
  ownKeys: readonly (string | undefined)[],
  n: number,
): boolean {
  if (n > 16) return true;
  for (let i = 0; i < n; i++) {
    const key = shared[i]?.cacheKey ?? ownKeys[i];
    if (key === undefined) continue;
    for (let j = i + 1; j < n; j++)
      if ((shared[j]?.cacheKey ?? ownKeys[j]) === key) return true;
  }
  return false;
}

/** Scratch sets are kept for requests of fewer descriptors than this. */
const maxScratchSize = 64;

/** The arrays of the arithmetic path for requests of `n` descriptors, and its decision. */
class Scratch {
  readonly matched: (RateLimit | undefined)[];
  readonly limits: (RateLimit | undefined)[];
  readonly shared: (PlannedDescriptor | undefined)[];
  readonly live: (PlannedDescriptor | undefined)[];
  readonly ownKeys: (string | undefined)[];
  /** Reused status objects: `decidingDescriptor` reads their code. */
  readonly statuses: RateLimitResponse_DescriptorStatus[];
  readonly quota: boolean[];
  readonly decision: {
    -readonly [K in keyof CandidateDecision]: CandidateDecision[K];
  };

  constructor(n: number) {
    this.matched = new Array<RateLimit | undefined>(n).fill(undefined);
    this.limits = new Array<RateLimit | undefined>(n).fill(undefined);
    this.shared = new Array<PlannedDescriptor | undefined>(n).fill(undefined);
    this.live = new Array<PlannedDescriptor | undefined>(n).fill(undefined);
    this.ownKeys = new Array<string | undefined>(n).fill(undefined);
    this.statuses = Array.from({ length: n }, okWithoutLimitStatus);
    this.quota = new Array<boolean>(n).fill(false);
    this.decision = {
      overallCode: Code.OK,
      matched: this.matched,
      limits: this.limits,
      statuses: noStatuses,
      deciding: undefined,
      replacedKeys: noKeys,
    };
  }
}
const noStatuses: readonly RateLimitResponse_DescriptorStatus[] = Object.freeze(
  [],
);
