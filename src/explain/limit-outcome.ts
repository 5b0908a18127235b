/**
 * One limit of one descriptor, explained: its counter (window algorithms, calendar windows
 * included) or its token bucket, its verdict, the status it gives on its own and the notes
 * that say why. The status, and whether it is over or near its limit, are what the decision
 * pipeline decided in Explain's dry run ({@link DecidedLimit}; `RateLimitPipeline.dryRun`):
 * these functions only describe it, from the counters the run compared and what the store
 * held. Pure: reads no clock and no backend, counts nothing.
 */
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { CalendarWindow } from "../config/calendar-window.js";
import type { RateLimit } from "../config/rate-limit-config.js";
import { counterDecision } from "../limiter/algorithms.js";
import { nearLimitThreshold } from "../limiter/counter-decision.js";
// gcra.ts is the token bucket's pure arithmetic, as counter-decision.ts is the windows': the
// notes describe the state the run's hits met with the decision's own formulas.
import { gcraDecide, type GcraDecision } from "../limiter/gcra.js";
import type { CounterReading } from "../limiter/rate-limit-cache.js";
import type { BucketReading } from "../limiter/pipeline.js";
import { fixedWindow } from "../limiter/fixed-window.js";
import { slidingWindow } from "../limiter/sliding-window.js";
import { tokenBucket } from "../limiter/token-bucket.js";
import {
  CalendarPeriodSchema,
  CounterSchema,
  DescriptorExplanation_Verdict as Verdict,
  TokenBucketStateSchema,
  type CalendarPeriod,
  type Counter,
  type RateLimitResponse_DescriptorStatus,
  type TokenBucketState,
} from "../proto.js";
import {
  durationFromUs,
  localRfc3339,
  timestampFromUs,
} from "./explain-time.js";

/** The near-limit setting, as the decision uses it. */
export interface NearLimit {
  /** `NEAR_LIMIT_RATIO` rounded to float32, as the decision computes thresholds. */
  readonly ratio: number;
  /** `NEAR_LIMIT_RATIO` as configured, for notes. */
  readonly configured: number;
}

/** One limit of a descriptor, explained (see the file comment). */
export interface LimitOutcome {
  /** The status this limit alone gives, as ShouldRateLimit builds it. */
  readonly status: RateLimitResponse_DescriptorStatus;
  readonly verdict: Verdict;
  /** Window algorithms: the counter; undefined for token buckets and unread counters. */
  readonly counter: Counter | undefined;
  /** Token buckets: the bucket; undefined for window algorithms. */
  readonly bucket: TokenBucketState | undefined;
  /** Notes about this limit, in the order they apply. */
  readonly notes: string[];
  /**
   * Refuses a request that all-or-nothing charging refuses: over its limit (or known over in
   * the local cache) and not in shadow mode.
   */
  readonly unfit: boolean;
  /** A token bucket (no counter: the stop-increment note does not concern it). */
  readonly isBucket: boolean;
}

/**
 * One limit's status as the pipeline decided it in Explain's dry run, recorded from the call
 * of the read-only decider that built it: the counters it compared and which statistics it
 * counted (the run's statistics go to a probe, not to the limit).
 */
export interface DecidedLimit {
  /** The status, as the pipeline built it (and, for the tightest limit, answered). */
  readonly status: RateLimitResponse_DescriptorStatus;
  /**
   * The window counter the status compared: after the increment when `charged`, before it
   * otherwise (an all-or-nothing refusal adds the hits of earlier descriptors on the same
   * key); 0 for token buckets and local-cache hits.
   */
  readonly current: number;
  /** The previous window's counter the status compared (sliding windows; else 0). */
  readonly previous: number;
  /** False when all-or-nothing charging refused the request. */
  readonly charged: boolean;
  /** The status counted hits over the limit (the limit refuses, or would but for shadow mode). */
  readonly over: boolean;
  /** The status counted hits near the limit. */
  readonly near: boolean;
  /** Token buckets: the decision the status was built from; undefined for windows. */
  readonly decision: GcraDecision | undefined;
}

/** The calendar period of a `time_zone` window at `nowSeconds`, as a message. */
function periodMessage(
  calendar: CalendarWindow,
  nowSeconds: number,
): CalendarPeriod {
  const period = calendar.period(nowSeconds);
  return create(CalendarPeriodSchema, {
    label: period.label,
    timeZone: calendar.timeZone,
    start: localRfc3339(period.startSeconds, calendar.timeZone),
    end: localRfc3339(period.endSeconds, calendar.timeZone),
    secondsLeft: BigInt(period.endSeconds - nowSeconds),
  });
}

/**
 * Explains one window limit (fixed, multi-unit, sliding or calendar window) from what the
 * dry run decided ({@link DecidedLimit}) and the counter as the store holds it.
 *
 * @param reading - the counter: `value` as the store holds it (before this request), the
 *   window, the local-cache verdict and the previous window's counter
 * @param increment - what the request adds to the counter (0 when it is not incremented)
 * @param notes - notes already due; extended
 */
export function explainWindow(
  limit: RateLimit,
  reading: CounterReading,
  decided: DecidedLimit,
  hits: number,
  increment: number,
  nowSeconds: number,
  nearLimit: NearLimit,
  notes: string[],
): LimitOutcome {
  const algorithm = limit.algorithm;
  const calendar =
    algorithm.kind !== "token_bucket" && algorithm.window.kind === "calendar"
      ? algorithm.window.period
      : undefined;
  const cached = reading.localCacheHit;
  const charged = decided.charged;
  const previous = reading.previousValue ?? 0;
  // What the count compared is made of, for the counter's fields and the kinds' notes: the
  // decision's own arithmetic over the counters the run compared.
  const compared = cached
    ? charged
      ? reading.value + increment
      : reading.value
    : decided.current;
  const decision = counterDecision(
    limit,
    compared,
    cached ? previous : decided.previous,
    hits,
    nowSeconds,
    charged,
  );
  const count = decision.count;
  if (!cached) {
    const added = compared - (charged ? increment : 0) - reading.value;
    if (added > 0)
      notes.push(
        `an earlier descriptor of this request adds ${added} to the same counter first`,
      );
  }
  const counter = create(CounterSchema, {
    key: reading.key,
    value: BigInt(reading.value),
    valueAfter: BigInt(cached || !charged ? reading.value : compared),
    windowStart: timestampFromMs(reading.windowStartSeconds * 1000),
    windowEnd: timestampFromMs(reading.windowEndSeconds * 1000),
    localCacheHit: cached,
    ...(reading.previousKey !== undefined
      ? {
          previousKey: reading.previousKey,
          previousValue: BigInt(previous),
          previousWeight: BigInt(decision.previousWeight),
        }
      : {}),
    comparedCount: BigInt(cached ? reading.value : count),
    ...(calendar !== undefined
      ? { period: periodMessage(calendar, nowSeconds) }
      : {}),
  });
  if (cached) {
    notes.push(
      "the local over-limit cache holds this key: OVER_LIMIT without a backend round trip",
    );
  }
  if (hits === 0)
    notes.push("hits addend 0: checks the counter without consuming");
  const lease = limit.lease;
  if (lease !== undefined) {
    // Explain reads the store's counter; the service's leases live in each worker.
    notes.push(
      `lease: true: each worker takes up to ${lease.max} hits (lease_max) of this window with one increment and admits from them in process; the counter includes leased hits not admitted yet, at most ${lease.max} per worker`,
    );
  }
  const forecast = { previous, decision, nowSeconds, cached };
  switch (algorithm.kind) {
    case "fixed_window":
      fixedWindow.explain(limit, algorithm, forecast, notes);
      break;
    case "sliding_window":
      slidingWindow.explain(limit, algorithm, forecast, notes);
      break;
    case "token_bucket":
      throw new TypeError(`limit ${limit.fullKey} is a token bucket`);
    default: {
      const never: never = algorithm;
      return never;
    }
  }
  const isOver = decided.over;
  let verdict: Verdict;
  if (isOver && limit.shadowMode) {
    verdict = Verdict.OVER_LIMIT_SHADOW;
    notes.push("shadow_mode: over the limit, answered OK");
  } else if (isOver) {
    verdict = Verdict.OVER_LIMIT;
  } else if (decided.near) {
    verdict = Verdict.NEAR_LIMIT;
    notes.push(
      `near limit: ${count} > near-limit threshold ${nearLimitThreshold(limit.requestsPerUnit, nearLimit.ratio)} (NEAR_LIMIT_RATIO ${String(nearLimit.configured)})`,
    );
  } else {
    verdict = Verdict.WITHIN_LIMIT;
  }
  return {
    status: decided.status,
    verdict,
    counter,
    bucket: undefined,
    notes,
    unfit: !limit.shadowMode && isOver,
    isBucket: false,
  };
}

/**
 * Explains one token bucket (`algorithm: token_bucket`) from what the dry run decided: the
 * status the pipeline built from the decision it reports (after the take, after the hits were
 * given back in a refused all-or-nothing request, or the state read), and, for the notes,
 * what this request's hits get on the TAT they met ({@link gcraDecide}).
 *
 * @param reading - the TATs the slot's first decision met (`ReadOnlyCounterBackend`)
 * @param nowUs - the request time, µs since the Unix epoch
 * @param notes - notes already due; extended
 */
export function explainBucket(
  limit: RateLimit,
  cacheKey: string,
  reading: BucketReading,
  decided: DecidedLimit,
  hits: number,
  nowUs: number,
  nearLimit: NearLimit,
  notes: string[],
): LimitOutcome {
  const algorithm = limit.algorithm;
  if (algorithm.kind !== "token_bucket" || decided.decision === undefined)
    throw new TypeError(`limit ${limit.fullKey} is not a decided token bucket`);
  const params = algorithm.bucket;
  if (reading.metUs > reading.storedUs)
    notes.push(
      "an earlier descriptor of this request takes from the same bucket first",
    );
  const would = gcraDecide(reading.metUs, nowUs, hits, params);
  // The state the hits met: the refusal, or (admitted) the state before the take.
  const read: GcraDecision = would.allowed
    ? gcraDecide(reading.metUs, nowUs, 0, params)
    : would;
  const final = decided.decision;
  const near = tokenBucket.explain(
    limit,
    algorithm,
    {
      hits,
      charged: decided.charged,
      read,
      would,
      final,
      ratio: nearLimit.ratio,
      configuredRatio: nearLimit.configured,
    },
    notes,
  );
  const verdict = decided.over
    ? limit.shadowMode
      ? Verdict.OVER_LIMIT_SHADOW
      : Verdict.OVER_LIMIT
    : near
      ? Verdict.NEAR_LIMIT
      : Verdict.WITHIN_LIMIT;
  const bucket = create(TokenBucketStateSchema, {
    key: cacheKey,
    tat: timestampFromUs(read.tatUs),
    tatAfter: timestampFromUs(final.tatUs),
    remaining: BigInt(read.limitRemaining),
    remainingAfter: BigInt(final.limitRemaining),
    untilFull: durationFromUs(final.resetAfterUs),
    ...(!final.allowed && final.retryAfterUs !== undefined
      ? { retryAfter: durationFromUs(final.retryAfterUs) }
      : {}),
    exceedsBurst: hits > params.burst,
    admitted: would.allowed,
  });
  return {
    status: decided.status,
    verdict,
    counter: undefined,
    bucket,
    notes,
    unfit: !limit.shadowMode && decided.over,
    isBucket: true,
  };
}
