/**
 * The contract of one algorithm kind (house style §2, issue 32 item 2): what a module of
 * `fixed-window.ts`, `sliding-window.ts` or `token-bucket.ts` owns for the limits whose
 * `RateLimit.algorithm.kind` is its kind: the plan step (cache keys, window end, expiration),
 * the store operation its plan entries take, the status (threshold, remaining, reset, with the
 * statistics) and the kind's own Explain notes. `decide.ts` and `algorithms.ts` switch on the
 * kind (ending in a `const never: never` check) and call the module; adding a kind means one module implementing this, one store
 * operation per backend (`counter-backend.ts`) and a case in the contract suite.
 *
 * The two context objects are built once per `Decider` and reused by every request (the
 * plan step's fields are rewritten at the start of each plan): a request allocates nothing
 * for the dispatch.
 */
import type { Algorithm } from "../config/algorithm.js";
import type { RateLimit } from "../config/rate-limit-config.js";
import type { RateLimitStats } from "../stats/stats-manager.js";
import type {
  RateLimitDescriptor,
  RateLimitResponse_DescriptorStatus,
} from "../proto.js";
import type { CounterDecision } from "./counter-decision.js";
import type { GcraDecision } from "./gcra.js";
import type { LocalCache } from "./local-cache.js";
import type { PlannedDescriptor } from "./request-plan.js";

/**
 * The {@link CounterBackend} call a kind's plan entries take: `increment` (with `peek`, `add`
 * and `chargeAllOrNothing` for the other charge modes and refunds) for window counters,
 * `takeTokens` for token buckets.
 */
export type StoreOperation = "increment" | "takeTokens";

/** What a kind's plan step reads of the request being planned (one per `Decider`). */
export interface PlanStep {
  /** Request time, whole seconds since the Unix epoch (the plan's one clock read). */
  nowSeconds: number;
  /**
   * Request time in integer µs since the Unix epoch, read on the first token bucket of the
   * request ({@link PlanStep.microseconds}); 0 until then.
   */
  nowUs: number;
  /** Reads {@link PlanStep.nowUs} once per request and returns it. */
  microseconds(): number;
  /**
   * Builds the plan entry of one window counter, the rules every window kind shares: a refund
   * (negative hits) clears the key's local-cache entry when the plan charges and is never
   * answered by it; a key the local cache knows over limit is a local-cache hit; the
   * expiration is `lifetimeSeconds` plus random jitter (0 for refunds, local-cache hits and
   * plans that draw no expirations).
   *
   * @param lifetimeSeconds - how long a new counter must live before jitter: one window for
   *   fixed windows, two for sliding windows (read as the previous window in the next one)
   * @param windowSeconds - the current window's length (a calendar period's real length)
   * @param windowEndSeconds - when the current window ends, seconds since the Unix epoch
   */
  windowEntry(
    index: number,
    descriptor: RateLimitDescriptor,
    limit: RateLimit,
    hits: number,
    cacheKey: string,
    previousCacheKey: string | undefined,
    lifetimeSeconds: number,
    windowSeconds: number,
    windowEndSeconds: number,
  ): PlannedDescriptor;
}

/** What a kind's status reads of its `Decider` (one per decider). */
export interface StatusContext {
  /** `NEAR_LIMIT_RATIO` rounded to float32, as thresholds are computed. */
  readonly ratio: number;
  /** The local over-limit cache an over-limit window key enters; undefined when off. */
  readonly localCache: LocalCache | undefined;
  /**
   * Where every statistic goes instead of the limit's own (`limit.stats`): set only on a
   * read-only decider (`Decider.readOnly`, Explain); undefined on the service's, where a
   * status reads it once (the one constant check the read-only run costs the hot path).
   */
  readonly mutedStats?: RateLimitStats | undefined;
}

/** What Explain predicts for one window counter, for a window kind's notes. */
export interface WindowForecast {
  /** The previous window's counter as read (0 for fixed windows). */
  readonly previous: number;
  /** The decision Explain predicts (`counterDecision`). */
  readonly decision: CounterDecision;
  /** Request time, seconds since the Unix epoch. */
  readonly nowSeconds: number;
  /** The local over-limit cache answers the key (no counter compared). */
  readonly cached: boolean;
}

/** What Explain predicts for one token bucket, for its notes. */
export interface TokenBucketForecast {
  /** The request's hits for the descriptor. */
  readonly hits: number;
  /** Whether all-or-nothing charging lets the request through (false: nothing is taken). */
  readonly charged: boolean;
  /** The state the hits meet (`gcraDecide` with 0 hits, or the refusal). */
  readonly read: GcraDecision;
  /** What the hits get: admitted or refused. */
  readonly would: GcraDecision;
  /** The state the answer reports (after the take, the give-back, or the state read). */
  readonly final: GcraDecision;
  /** `NEAR_LIMIT_RATIO` rounded to float32, as thresholds are computed. */
  readonly ratio: number;
  /** `NEAR_LIMIT_RATIO` as configured, for the note. */
  readonly configuredRatio: number;
}

/** What each kind's Explain notes read, by kind. */
export interface ExplainForecasts {
  readonly fixed_window: WindowForecast;
  readonly sliding_window: WindowForecast;
  readonly token_bucket: TokenBucketForecast;
}

/**
 * One algorithm kind (see the file comment): `A` is its {@link Algorithm} variant.
 * `current` is the window counter a status compares (after the entry's increment when
 * `charged`, before it otherwise; all-or-nothing adds earlier hits on a shared key to it);
 * token buckets read the entry's `decision` instead.
 */
export interface AlgorithmKind<A extends Algorithm> {
  /** The `RateLimit.algorithm.kind` the module serves. */
  readonly kind: A["kind"];
  /** The store operation its plan entries take. */
  readonly operation: StoreOperation;
  /**
   * The plan step of one limit of one descriptor: its cache key(s), window and expiration.
   *
   * @param stem - the descriptor's cache-key stem (`cacheKeyStem`)
   */
  plan(
    step: PlanStep,
    index: number,
    descriptor: RateLimitDescriptor,
    limit: RateLimit,
    algorithm: A,
    hits: number,
    stem: string,
  ): PlannedDescriptor;
  /**
   * The status of a counted (or charged) plan entry, counting its statistics and, when over
   * limit, entering its key in the local cache.
   */
  status(
    context: StatusContext,
    entry: PlannedDescriptor,
    algorithm: A,
    current: number,
    nowSeconds: number,
    charged: boolean,
  ): RateLimitResponse_DescriptorStatus;
  /** The status of a refund entry (`is_negative_hits`): OK, no statistic. */
  refundStatus(
    entry: PlannedDescriptor,
    algorithm: A,
    nowSeconds: number,
  ): RateLimitResponse_DescriptorStatus;
  /**
   * Appends the kind's own Explain notes to `notes`, in the order they apply (the notes every
   * window shares, local cache, shadow mode and near limit, are `explain/limit-outcome.ts`'s).
   *
   * @returns whether the kind's notes put the limit near its limit (token buckets; window
   *   kinds leave near limit to the shared note and return false)
   */
  explain(
    limit: RateLimit,
    algorithm: A,
    forecast: ExplainForecasts[A["kind"]],
    notes: string[],
  ): boolean;
  /** Explain's note on a refund of `back` hits (`is_negative_hits`) to a limit of the kind. */
  refundNote(back: number): string;
}
