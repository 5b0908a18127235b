/**
 * The arithmetic of `algorithm: token_bucket`: the generic cell rate algorithm (GCRA) in its
 * "virtual scheduling" form, as defined for ATM cells in the ATM Forum's Traffic Management
 * Specification 4.0 (af-tm-0056.000) and ITU-T Recommendation I.371, and as publicly
 * described for request rate limiting (a token bucket that stores one timestamp instead of a
 * level and a refill time). Pure: no clock, no store, no statistics; the store operations
 * that apply it atomically are in `gcra-scripts.ts`.
 *
 * **State.** One integer per cache key: the theoretical arrival time (TAT), the instant at
 * which the bucket is full again, in whole microseconds since the Unix epoch. An absent key
 * and any TAT ≤ now mean the same thing (a full bucket), so a key may expire at its TAT.
 *
 * **Why microseconds.** The emission interval T = window / requests_per_unit is rounded up to
 * a whole number of time units. In microseconds that adds less than 1 µs to T: the sustained
 * rate is exact whenever 10⁶ × window is a multiple of requests_per_unit, lowered by less than
 * 0.01 % up to 100 hits per second otherwise, and never raised. In milliseconds 7 per second
 * would already lose 0.1 % and rates above 1,000 per second could not be expressed. The
 * values stay exact integers in IEEE doubles, which both JavaScript and the store's Lua 5.1
 * use: now ≈ 1.8 × 10¹⁵ µs plus at most two capacities of {@link maxGcraCapacityUs} (2⁵¹ µs)
 * stays under 2⁵³ until the year 2112. The caller's clock has millisecond resolution
 * (`Clock.nowMs() × 1000`); that only quantises "now", not T.
 *
 * **Conventions** (T, τ and the capacity are fixed per rate limit by
 * {@link resolveGcraParams}):
 * - emission interval `T = ceil(windowSeconds × 10⁶ / requests_per_unit)` µs (the TM 4.0
 *   "increment" I);
 * - tolerance `τ = T × (burst − 1)` µs (the TM 4.0 "limit" L): a full bucket admits `burst`
 *   hits at the same instant;
 * - capacity `C = τ + T = burst × T` µs.
 *
 * **Decision** at time `now` (µs) for `hits` with `tat' = max(stored TAT, now)`:
 * - hits > 0: admitted when `hits ≤ burst` and `tat' + hits × T − now ≤ C` (for one hit this
 *   is TM 4.0's conformance test `TAT ≤ now + L`); then `TAT ← tat' + hits × T`. A refused
 *   request changes nothing (TM 4.0: a non-conforming cell does not move the TAT).
 * - hits = 0: a check; nothing changes.
 * - hits < 0 (a refund of |hits|): always admitted (never OVER_LIMIT); the TAT moves back by
 *   `|hits| × T` but never below now: `TAT ← max(tat' − |hits| × T, now)`.
 *
 * **Admission bound.** Over any closed interval of length L µs, the hits admitted minus the
 * hits refunded (refund requests counted by their |hits|) are at most `burst + floor(L / T)`,
 * with T the rounded-up interval above. Proof sketch: let t be the interval's start and
 * `Q = max(TAT, t)`; Q ≥ t before the first decision in the interval; an admission of n at
 * s ≥ t raises Q by at least n × T, a refund of m lowers it by at most m × T; an admission at
 * s ≤ t + L leaves `TAT ≤ s + C`. So `t + (admitted − refunded) × T ≤ t + L + burst × T`.
 * The bound is reached (a full bucket drained at t, then one hit every T). Replicas whose
 * clocks differ by δ µs may admit up to `ceil(δ / T)` more in an interval.
 */

import type { GcraParams } from "../config/token-bucket.js";

export {
  gcraCacheKeyTail,
  maxGcraCapacityUs,
  resolveGcraParams,
  type GcraOptions,
  type GcraParams,
} from "../config/token-bucket.js";

const microsPerSecond = 1_000_000;
const microsPerMilli = 1_000;

/** The outcome of one token-bucket decision (see {@link gcraDecide}). */
export interface GcraDecision {
  /**
   * Whether the hits were admitted: always for refunds, and for checks unless another
   * replica's clock put the TAT more than C ahead.
   */
  readonly allowed: boolean;
  /** The TAT after the decision, µs, ≥ now: `max(stored TAT, now)` when nothing changed. */
  readonly tatUs: number;
  /**
   * The TAT to store, µs, or undefined when the decision changes nothing (refused, a check,
   * a refund on a full bucket). Equal to now when a refund filled the bucket (kv deletes the
   * key then; see {@link gcraExpirationMs}).
   */
  readonly newTatUs: number | undefined;
  /**
   * `limit_remaining`: how many more single hits would be admitted at this instant,
   * `floor((C − (tatUs − now)) / T)`, in [0, burst].
   */
  readonly limitRemaining: number;
  /** Time until the bucket is full again, µs: `tatUs − now`, ≥ 0. */
  readonly resetAfterUs: number;
  /**
   * `duration_until_reset`, seconds: `max(1, ceil(resetAfterUs / 10⁶))`. At least 1, as every
   * reset this service reports (docs/reference-parity.md#windows); after that many seconds,
   * without other traffic, the bucket is full (`burst` hits are admitted at once).
   */
  readonly durationUntilResetSeconds: number;
  /**
   * How long until this same request would be admitted, µs: 0 when admitted,
   * `tatUs + hits × T − C − now` (> 0) when refused, undefined when it never can be
   * (`hits > burst`).
   */
  readonly retryAfterUs: number | undefined;
  /** {@link GcraDecision.retryAfterUs} rounded up to whole seconds (0, ≥ 1, or undefined). */
  readonly retryAfterSeconds: number | undefined;
}

/**
 * Decides `hits` on one token bucket at `nowUs` from its stored TAT (the formulas are in the
 * file header). Shadow mode, statistics and the local cache are the caller's business.
 *
 * @param storedTatUs - the key's TAT, µs since the epoch, or undefined when the key is absent
 * @param nowUs - the request time, integer µs since the Unix epoch (`clock.nowMs() × 1000`)
 * @param hits - the hits addend: > 0 to take, 0 to check, < 0 to refund; an integer
 */
export function gcraDecide(
  storedTatUs: number | undefined,
  nowUs: number,
  hits: number,
  params: GcraParams,
): GcraDecision {
  const tat =
    storedTatUs !== undefined && storedTatUs > nowUs ? storedTatUs : nowUs;
  if (hits > 0) {
    // hits ≤ burst first, so that hits × T ≤ C stays exact.
    if (hits <= params.burst) {
      const next = tat + hits * params.emissionIntervalUs;
      if (next - nowUs <= params.capacityUs)
        return gcraOutcome(true, next, next, nowUs, hits, params);
    }
    return gcraOutcome(false, tat, undefined, nowUs, hits, params);
  }
  if (hits < 0 && tat > nowUs) {
    // Compared before subtracting: −hits × T may exceed 2⁵³, but then it is ≥ tat − now too.
    const back = -hits * params.emissionIntervalUs;
    const next = back >= tat - nowUs ? nowUs : tat - back;
    return gcraOutcome(true, next, next, nowUs, hits, params);
  }
  // A check, or a refund on a full bucket. Refused only when another replica's clock put the
  // TAT more than C ahead of ours (a refund is never refused).
  return gcraOutcome(
    hits < 0 || tat - nowUs <= params.capacityUs,
    tat,
    undefined,
    nowUs,
    hits,
    params,
  );
}

/**
 * Builds a {@link GcraDecision} from what a store operation decided: whether the hits were
 * admitted and the TAT after the decision. {@link gcraDecide} ends here, and so does the
 * reading of a kv script's reply, so remaining, reset and retry are computed in one place.
 *
 * @param tatUs - the TAT after the decision, µs, ≥ `nowUs`
 * @param newTatUs - the TAT written, or undefined when nothing was written
 */
export function gcraOutcome(
  allowed: boolean,
  tatUs: number,
  newTatUs: number | undefined,
  nowUs: number,
  hits: number,
  params: GcraParams,
): GcraDecision {
  const interval = params.emissionIntervalUs;
  const resetAfterUs = tatUs - nowUs;
  // Free room in µs; floor(room / T) hits fit. Exact: room < 2⁵², so the quotient cannot round
  // onto the next integer.
  const room = params.capacityUs - resetAfterUs;
  const limitRemaining = room > 0 ? Math.floor(room / interval) : 0;
  let retryAfterUs: number | undefined = 0;
  let retryAfterSeconds: number | undefined = 0;
  if (!allowed) {
    if (hits > params.burst) {
      retryAfterUs = undefined;
      retryAfterSeconds = undefined;
    } else {
      // The same request fits once tat + hits × T − later ≤ C.
      retryAfterUs =
        resetAfterUs + Math.max(hits, 0) * interval - params.capacityUs;
      retryAfterSeconds = Math.ceil(retryAfterUs / microsPerSecond);
    }
  }
  return {
    allowed,
    tatUs,
    newTatUs,
    limitRemaining,
    resetAfterUs,
    durationUntilResetSeconds:
      resetAfterUs <= microsPerSecond
        ? 1
        : Math.ceil(resetAfterUs / microsPerSecond),
    retryAfterUs,
    retryAfterSeconds,
  };
}

/**
 * Returns the lifetime of a stored TAT, in whole milliseconds (the kv backend's `PX`):
 * `ceil((tatUs − nowUs) / 1000)`, the time until the bucket is full, after which an absent key
 * means the same. 0 when `tatUs ≤ nowUs`: delete the key instead of storing it. Relative to
 * the caller's clock, so a store whose clock differs still keeps the key as long as needed.
 */
export function gcraExpirationMs(tatUs: number, nowUs: number): number {
  return tatUs > nowUs ? Math.ceil((tatUs - nowUs) / microsPerMilli) : 0;
}
