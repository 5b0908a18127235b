/**
 * The request plan: everything decided about a request before its counters are touched,
 * built once per request by {@link Decider.plan} and read by every later step (count,
 * decide). It replaces the parallel arrays (descriptors, limits, hits addends, cache keys,
 * local-cache verdicts) that used to travel through a dozen signatures.
 */
import type { RateLimit } from "../config/rate-limit-config.js";
import type { RateLimitDescriptor } from "../proto.js";
import type { LimitRequest } from "./limit-request.js";
import type { BucketSlot, CounterSlot } from "./counter-backend.js";
import type { GcraDecision, GcraParams } from "./gcra.js";

/**
 * One descriptor of a request that has a limit to check: its rate limit, hits addend, cache
 * keys, local-cache verdict, and (as a {@link CounterSlot}, or a {@link BucketSlot} for a
 * token bucket) what the backend read and writes. A descriptor whose rule has several limits
 * (`rate_limits:`) has one entry per limit, all with the descriptor's `index`. A class so every
 * plan entry shares one shape.
 */
export class PlannedDescriptor implements CounterSlot, BucketSlot {
  /** Position of the descriptor in the request. */
  readonly index: number;
  /** The request's descriptor. */
  readonly descriptor: RateLimitDescriptor;
  /** The rate limit that applies. */
  readonly limit: RateLimit;
  /** Hits this request adds (≥ 0), or gives back (< 0: a refund, in {@link RequestPlan.refunds}). */
  readonly hitsAddend: number;
  readonly cacheKey: string;
  readonly previousCacheKey: string | undefined;
  readonly perSecond: boolean;
  readonly expirationSeconds: number;
  /**
   * The current window's length, seconds: the limit's `windowSeconds`, or for a calendar
   * window the current period's length; the token bucket's rate window for token buckets.
   */
  readonly windowSeconds: number;
  /**
   * When the current window ends, seconds since the Unix epoch: `duration_until_reset` is
   * `windowEndSeconds − now` for window algorithms (0 for token buckets, which have none).
   */
  readonly windowEndSeconds: number;
  /** The local over-limit cache knows the cache key over limit: no backend round trip. */
  readonly localCacheHit: boolean;
  increment: number;
  current = 0;
  previous = 0;
  /** Token buckets: the backend's decision (see {@link BucketSlot.decision}). */
  decision: GcraDecision | undefined = undefined;

  // The limit's own fields, read through (not copied into every plan entry); the backends read
  // the slot fields `sliding` and `tokenBucket`, derived here from the limit's algorithm, and
  // never the algorithm itself (config/ is not theirs to import).
  get tokenBucket(): GcraParams | undefined {
    const algorithm = this.limit.algorithm;
    return algorithm.kind === "token_bucket" ? algorithm.bucket : undefined;
  }
  get sliding(): boolean {
    return this.limit.algorithm.kind === "sliding_window";
  }
  get requestsPerUnit(): number {
    return this.limit.requestsPerUnit;
  }
  get shadowMode(): boolean {
    return this.limit.shadowMode;
  }

  constructor(
    index: number,
    descriptor: RateLimitDescriptor,
    limit: RateLimit,
    hitsAddend: number,
    cacheKey: string,
    previousCacheKey: string | undefined,
    perSecond: boolean,
    expirationSeconds: number,
    windowSeconds: number,
    windowEndSeconds: number,
    localCacheHit: boolean,
  ) {
    this.index = index;
    this.descriptor = descriptor;
    this.limit = limit;
    this.hitsAddend = hitsAddend;
    this.cacheKey = cacheKey;
    this.previousCacheKey = previousCacheKey;
    this.perSecond = perSecond;
    this.expirationSeconds = expirationSeconds;
    this.windowSeconds = windowSeconds;
    this.windowEndSeconds = windowEndSeconds;
    this.localCacheHit = localCacheHit;
    this.increment = hitsAddend;
  }
}

/** What is decided about one request before counting (see the file comment). */
export interface RequestPlan {
  /** The request the plan was built from. */
  readonly request: LimitRequest;
  /** The request domain. */
  readonly domain: string;
  /** Request time, whole seconds since the Unix epoch (one clock read per request). */
  readonly nowSeconds: number;
  /**
   * The same request time in integer µs since the Unix epoch (`clock.nowMs() × 1000`, read
   * once per request): token buckets decide with it. 0 when the plan has no token bucket.
   */
  readonly nowUs: number;
  /** Number of descriptors in the request (the statuses' length). */
  readonly size: number;
  /**
   * The descriptors with a window limit to check (fixed, multi-unit, sliding, calendar), in
   * request order; a descriptor with several limits appears once per window limit.
   */
  readonly counted: readonly PlannedDescriptor[];
  /**
   * The descriptors' token buckets (`algorithm: token_bucket`) to charge, in request order:
   * decided by {@link CounterBackend.takeTokens}, never answered by the local cache. Empty (a
   * shared array) in requests without token buckets.
   */
  readonly buckets: readonly PlannedDescriptor[];
  /**
   * The entries of {@link RequestPlan.counted} the local cache did not answer: the slots sent
   * to the backend (the same array when there is no local-cache hit).
   */
  readonly sent: readonly PlannedDescriptor[];
  /**
   * Charge mode: all-or-nothing when the first limit says so (`RateLimit.allOrNothing`, from
   * the domain's `charge:` or `CHARGE_MODE`; a request's limits come from one domain).
   */
  readonly allOrNothing: boolean;
  /**
   * The descriptors whose hits are given back (`is_negative_hits`), in request order: not in
   * {@link RequestPlan.counted}, never OVER_LIMIT, never answered by the local cache (the
   * refund clears its entry); each one's `increment` is the negative hits. Empty (a shared
   * array) in requests without refunds.
   */
  readonly refunds: readonly PlannedDescriptor[];
  /**
   * Set by the pipeline once counted: false only when all-or-nothing charging refused the
   * request (no window counter was charged; the entries hold the values before it).
   */
  charged: boolean;
  /**
   * Set by the pipeline when `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` held increments back:
   * `local-cache` (a key is over limit in the local cache: no counter is incremented),
   * `over-limit` (only the counters that go over are); undefined otherwise.
   */
  stopped?: "local-cache" | "over-limit" | undefined;
}

/** The `refunds` of every plan without refunds (never written). */
export const noRefunds: readonly PlannedDescriptor[] = Object.freeze([]);
