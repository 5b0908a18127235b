/**
 * One limit of one descriptor, explained: its counter (window algorithms, calendar windows
 * included) or its token bucket, its verdict, the status it gives on its own and the notes
 * that say why. The Explain service calls these once per limit (a rule with a `rate_limits:`
 * list has several) and keeps the tightest status, as the decision pipeline does. Pure: reads
 * no clock and no backend, counts nothing.
 */
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { CalendarWindow } from "../config/calendar-window.js";
import type { RateLimit } from "../config/rate-limit-config.js";
import { counterDecision } from "../limiter/algorithms.js";
import {
  limitResetSeconds,
  nearLimitThreshold,
  remainingWithin,
} from "../limiter/counter-decision.js";
// gcra.ts is the token bucket's pure arithmetic, as counter-decision.ts is the windows':
// Explain predicts with the decision's own formulas, reading no store.
import {
  gcraDecide,
  type GcraDecision,
  type GcraParams,
} from "../limiter/gcra.js";
import type { CounterReading } from "../limiter/rate-limit-cache.js";
import { tighterStatus } from "../limiter/pipeline.js";
import { fixedWindow } from "../limiter/fixed-window.js";
import { slidingWindow } from "../limiter/sliding-window.js";
import { tokenBucket } from "../limiter/token-bucket.js";
import {
  CalendarPeriodSchema,
  CounterSchema,
  DescriptorExplanation_Verdict as Verdict,
  RateLimitResponse_Code as RlsCode,
  RateLimitResponse_DescriptorStatusSchema,
  RateLimitResponse_RateLimitSchema,
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
  /** A token bucket: its status is merged after every window counter's (see {@link tighter}). */
  readonly isBucket: boolean;
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

/** The status of a limit, built as ShouldRateLimit builds it (`limitStatus` in decide.ts). */
function limitStatus(
  code: RlsCode,
  limit: RateLimit,
  limitRemaining: number,
  resetSeconds: number,
): RateLimitResponse_DescriptorStatus {
  return create(RateLimitResponse_DescriptorStatusSchema, {
    code,
    currentLimit: create(RateLimitResponse_RateLimitSchema, {
      name: limit.name,
      requestsPerUnit: limit.requestsPerUnit,
      unit: limit.unit,
    }),
    limitRemaining,
    durationUntilReset: { seconds: BigInt(resetSeconds), nanos: 0 },
  });
}

/**
 * Explains one window limit (fixed, multi-unit, sliding or calendar window) without counting,
 * with the backends' own arithmetic ({@link counterDecision}).
 *
 * @param reading - what the plan read, or undefined when the backend cannot read counters
 * @param value - the current window's counter before this limit's hits (earlier descriptors
 *   of the request with the same key included)
 * @param increment - what the request adds to the counter (0 when it is not incremented)
 * @param charged - false when all-or-nothing charging refuses the request
 * @param notes - notes already due (an earlier descriptor on the same counter); extended
 */
export function explainWindow(
  limit: RateLimit,
  reading: CounterReading | undefined,
  value: number,
  hits: number,
  increment: number,
  nowSeconds: number,
  charged: boolean,
  nearLimit: NearLimit,
  notes: string[],
): LimitOutcome {
  const rpu = limit.requestsPerUnit;
  const algorithm = limit.algorithm;
  const calendar =
    algorithm.kind !== "token_bucket" && algorithm.window.kind === "calendar"
      ? algorithm.window.period
      : undefined;
  const cached = reading?.localCacheHit === true;
  const previous = reading?.previousValue ?? 0;
  const decision = charged
    ? counterDecision(
        limit,
        value + increment,
        previous,
        hits,
        nowSeconds,
        true,
      )
    : counterDecision(limit, value, previous, hits, nowSeconds, false);
  const count = decision.count;
  const nearThreshold = nearLimitThreshold(rpu, nearLimit.ratio);
  const reset = cached
    ? limitResetSeconds(limit, nowSeconds)
    : decision.resetSeconds;
  let counter: Counter | undefined;
  if (reading !== undefined) {
    counter = create(CounterSchema, {
      key: reading.key,
      value: BigInt(reading.value),
      valueAfter: BigInt(
        cached || !charged ? reading.value : value + increment,
      ),
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
  }
  const isOver = cached || count > rpu;
  if (cached) {
    notes.push(
      "the local over-limit cache holds this key: OVER_LIMIT without a backend round trip",
    );
  }
  if (hits === 0)
    notes.push("hits addend 0: checks the counter without consuming");
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
  let code = isOver ? RlsCode.OVER_LIMIT : RlsCode.OK;
  let verdict: Verdict;
  if (isOver && limit.shadowMode) {
    code = RlsCode.OK;
    verdict = Verdict.OVER_LIMIT_SHADOW;
    notes.push("shadow_mode: over the limit, answered OK");
  } else if (isOver) {
    verdict = Verdict.OVER_LIMIT;
  } else if (count > nearThreshold) {
    verdict = Verdict.NEAR_LIMIT;
    notes.push(
      `near limit: ${count} > near-limit threshold ${nearThreshold} (NEAR_LIMIT_RATIO ${String(nearLimit.configured)})`,
    );
  } else {
    verdict = Verdict.WITHIN_LIMIT;
  }
  return {
    status: limitStatus(
      code,
      limit,
      isOver ? 0 : remainingWithin(rpu, count, decision.remaining),
      reset,
    ),
    verdict,
    counter,
    bucket: undefined,
    notes,
    unfit: !limit.shadowMode && isOver,
    isBucket: false,
  };
}

/**
 * Explains one token bucket (`algorithm: token_bucket`) without taking anything: from the TAT
 * the plan read, what this request's hits get ({@link gcraDecide}, the decision every backend
 * applies in the store), and the status ShouldRateLimit builds from it (`bucketStatus` in
 * decide.ts): admitted → OK with the hits left after them; refused → OVER_LIMIT (OK in shadow
 * mode) with the hits left, nothing taken.
 *
 * @param cacheKey - the bucket's cache key
 * @param tatReadUs - the TAT this request's hits meet, µs since the Unix epoch:
 *   `max(stored TAT, now)` (the request time for a full or absent bucket), after the takes of
 *   earlier descriptors on the same bucket ({@link bucketSequence})
 * @param nowUs - the request time, µs since the Unix epoch
 * @param charged - false when all-or-nothing charging refuses the request (nothing is taken)
 * @param notes - notes already due; extended
 * @param givenBack - with `charged` false: the state after the pipeline gave the hits back
 *   ({@link bucketSequence}); the state read when undefined
 */
export function explainBucket(
  limit: RateLimit,
  cacheKey: string,
  tatReadUs: number,
  hits: number,
  nowUs: number,
  charged: boolean,
  nearLimit: NearLimit,
  notes: string[],
  givenBack?: GcraDecision,
): LimitOutcome {
  const algorithm = limit.algorithm;
  if (algorithm.kind !== "token_bucket")
    throw new TypeError(`limit ${limit.fullKey} is not a token bucket`);
  const params = algorithm.bucket;
  const burst = params.burst;
  const check = gcraDecide(tatReadUs, nowUs, 0, params);
  const would = gcraDecide(tatReadUs, nowUs, hits, params);
  // What the store answers: the refusal, or (admitted) the state after the take; a request
  // that all-or-nothing charging refuses takes nothing and is answered from the state its
  // hits were given back to (the state read, unless the request shares the bucket).
  const read: GcraDecision = would.allowed ? check : would;
  const final =
    charged && would.allowed
      ? would
      : would.allowed && givenBack !== undefined
        ? givenBack
        : read;
  const remaining = final.limitRemaining;
  const reset = final.durationUntilResetSeconds;
  const near = tokenBucket.explain(
    limit,
    algorithm,
    {
      hits,
      charged,
      read,
      would,
      final,
      ratio: nearLimit.ratio,
      configuredRatio: nearLimit.configured,
    },
    notes,
  );
  let code = RlsCode.OK;
  let verdict: Verdict;
  if (!would.allowed) {
    if (limit.shadowMode) verdict = Verdict.OVER_LIMIT_SHADOW;
    else {
      code = RlsCode.OVER_LIMIT;
      verdict = Verdict.OVER_LIMIT;
    }
  } else verdict = near ? Verdict.NEAR_LIMIT : Verdict.WITHIN_LIMIT;
  const bucket = create(TokenBucketStateSchema, {
    key: cacheKey,
    tat: timestampFromUs(read.tatUs),
    tatAfter: timestampFromUs(final.tatUs),
    remaining: BigInt(read.limitRemaining),
    remainingAfter: BigInt(remaining),
    untilFull: durationFromUs(final.resetAfterUs),
    ...(!final.allowed && final.retryAfterUs !== undefined
      ? { retryAfter: durationFromUs(final.retryAfterUs) }
      : {}),
    exceedsBurst: hits > burst,
    admitted: would.allowed,
  });
  return {
    status: limitStatus(code, limit, remaining, reset),
    verdict,
    counter: undefined,
    bucket,
    notes,
    unfit: !limit.shadowMode && !would.allowed,
    isBucket: true,
  };
}

/**
 * Whether `status` replaces `before` as a descriptor's status when both come from limits of
 * one `rate_limits:` list: the pipeline's own rule ({@link tighterStatus}); the pipeline sets
 * the window counters' statuses first, in list order, then the token buckets'.
 */
export const tighter = tighterStatus;

/**
 * Returns the position (in `outcomes`, list order) of the limit whose status the descriptor
 * gets ({@link tighter}, window counters before token buckets).
 */
export function decidingLimit(outcomes: readonly LimitOutcome[]): number {
  let best = -1;
  for (const bucketPass of [false, true])
    outcomes.forEach((o, k) => {
      if (o.isBucket !== bucketPass) return;
      if (best < 0 || tighter(outcomes[best]!.status, o.status)) best = k;
    });
  return best;
}

/** A token bucket's GCRA parameters. */
function bucketParams(limit: RateLimit): GcraParams {
  const algorithm = limit.algorithm;
  if (algorithm.kind !== "token_bucket")
    throw new TypeError(`limit ${limit.fullKey} is not a token bucket`);
  return algorithm.bucket;
}

/** One token bucket of a request as the store meets it ({@link bucketSequence}). */
export interface BucketStep {
  /** The TAT this slot's hits meet, µs: the one read, or an earlier slot's take on the key. */
  readonly tatBeforeUs: number;
  /** An earlier slot of the request took from the same bucket first. */
  readonly afterEarlier: boolean;
  /** The state after the pipeline gave this slot's hits back (a refused all-or-nothing request). */
  readonly givenBack: GcraDecision | undefined;
}

/** A token-bucket slot of a request plan, as Explain reads it. */
export interface BucketSlotRead {
  readonly cacheKey: string;
  readonly hitsAddend: number;
  readonly limit: RateLimit;
  /** The state the preview read (`tatUs` = `max(stored TAT, now)`), or undefined unread. */
  readonly decision: GcraDecision | undefined;
}

/**
 * Replays what the pipeline does to a request's token buckets: the store decides the slots one
 * after the other (a later slot on the same key meets the earlier ones' takes); in a refused
 * all-or-nothing request the taken hits are given back, slot by slot, after every take; when
 * the local cache refuses such a request first, every slot is only read.
 *
 * @param slots - the plan's token buckets, in plan order
 * @param nowUs - the request time, µs since the Unix epoch
 * @param givesBack - `(refuses) => whether the request is refused` once the takes are known:
 *   undefined when no slot is taken (the local cache refused first)
 * @returns one step per slot, same order, and whether a slot not in shadow mode refused
 */
export function bucketSequence(
  slots: readonly BucketSlotRead[],
  nowUs: number,
  givesBack: ((bucketRefuses: boolean) => boolean) | undefined,
): BucketStep[] {
  const tat = new Map<string, number>();
  const before: number[] = [];
  const after: (number | undefined)[] = [];
  let refuses = false;
  for (const slot of slots) {
    const read = slot.decision?.tatUs ?? nowUs;
    const earlier =
      givesBack === undefined ? undefined : tat.get(slot.cacheKey);
    const start = earlier !== undefined && earlier > read ? earlier : read;
    before.push(start);
    if (givesBack === undefined) {
      after.push(undefined);
      continue;
    }
    const would = gcraDecide(
      start,
      nowUs,
      slot.hitsAddend,
      bucketParams(slot.limit),
    );
    if (!would.allowed && !slot.limit.shadowMode) refuses = true;
    after.push(
      would.newTatUs !== undefined && slot.hitsAddend > 0
        ? would.newTatUs
        : undefined,
    );
    if (would.newTatUs !== undefined) tat.set(slot.cacheKey, would.newTatUs);
  }
  const back = new Array<GcraDecision | undefined>(slots.length).fill(
    undefined,
  );
  if (givesBack?.(refuses) === true)
    slots.forEach((slot, j) => {
      if (after[j] === undefined) return;
      const current = tat.get(slot.cacheKey)!;
      const refund = gcraDecide(
        current,
        nowUs,
        -slot.hitsAddend,
        bucketParams(slot.limit),
      );
      tat.set(slot.cacheKey, refund.tatUs);
      back[j] = refund;
    });
  return slots.map((slot, j) => ({
    tatBeforeUs: before[j]!,
    afterEarlier: before[j]! > (slot.decision?.tatUs ?? nowUs),
    givenBack: back[j],
  }));
}
