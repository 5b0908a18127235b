// The live store's counters as the live decision of one request saw them: what the canary's
// candidate reads (never writes) for a limit that uses the same cache key as a live one. Built
// from the live request plan (`Decision.counted`), so nothing is read
// from the store a second time and the value is exactly the one the live decision compared
// with its limit.

import type { RequestPlan } from "../limiter/request-plan.js";

/**
 * One cache key of the live decision of a request: a window counter (with the previous window's
 * for sliding windows) or a token bucket. The candidate works on a copy per request (`value`,
 * `tatUs`), so its writes never reach the store.
 */
export interface LiveCounter {
  /** A token bucket (`tatUs` holds its state) rather than a window counter. */
  readonly bucket: boolean;
  /** Window counters: the window's length, seconds (a key is shared only at the same length). */
  readonly windowSeconds: number;
  /** When the key may go, seconds since the Unix epoch (the window's end; sliding: one later). */
  readonly expiresAtSeconds: number;
  /**
   * Window counters: the live count before the request; undefined when the live decision did
   * not read it (the local over-limit cache answered, or a refund was clamped at 0).
   */
  readonly before: number | undefined;
  /**
   * The least the live count can be when `before` is undefined: `requests_per_unit + 1` of the
   * live limit for a key the local cache knows over limit, else 0.
   */
  readonly floor: number;
  /**
   * Window counters: the live count after the request; undefined when the live decision did not
   * read it (the local over-limit cache answered). `after − before` is what it charged.
   */
  readonly after: number | undefined;
  /** Sliding windows: the previous window's key; else undefined. */
  readonly previousKey: string | undefined;
  /**
   * Sliding windows: the previous window's live count; undefined when the live decision did not
   * read it (a local-cache hit, or only a refund, which does not read it); else 0.
   */
  readonly livePrevious: number | undefined;
  /**
   * The candidate's count: set to the candidate's count before the request by the canary, then
   * moved by the candidate's charges.
   */
  value: number;
  /** The candidate's count before the request (`value` when the candidate started). */
  start: number;
  /** The candidate's previous-window count (sliding windows). */
  previous: number;
  /** The candidate's decision read or wrote this key. */
  used: boolean;
  /** Token buckets: the TAT before the request (`max(stored, now)`), then the candidate's. */
  tatUs: number;
  /** Token buckets: the live TAT after the request (the live decision's `tatUs`). */
  readonly afterTatUs: number;
}

/** The live counters of one request by cache key (a fresh map per evaluation). */
export type LiveCounters = Map<string, LiveCounter>;

/** The counters of a request whose live decision is unknown: no key is shared. */
export const noLiveCounters: ReadonlyMap<string, LiveCounter> = new Map();

/**
 * Returns the counters a live decision read, by cache key:
 *
 * - a window counter the live pipeline charged: `before` = `current − increment` of its first
 *   entry in the plan (`current` is the value after that entry's charge; the increment is 0
 *   where stop-increment held it back), `after` the last entry's `current`; when all-or-nothing
 *   refused the request (`charged` false) both are `current`;
 * - a key the local over-limit cache answered was not read: both undefined;
 * - a refunded window counter: `before` = `current − increment` (the increment is negative),
 *   undefined when the refund left 0 (it may have been clamped), `after` = `current`;
 * - a token bucket: the TAT before the live step, `tatUs − hits × T` when the live step took
 *   the hits, else the decision's `tatUs`; for a refund `tatUs + |hits| × T` (the same refund
 *   from there gives the same TAT, also where it stopped at now).
 *
 * `value`, `start` and `previous` start at the live counts; the canary adds its ledger's extra.
 *
 * @param charged - false when all-or-nothing charging refused the live request
 * @param sameKeyAccumulates - false for a store that reads every counter before incrementing
 *   (mc): two entries of one key then both answer the value before plus their own hits, and the
 *   count after the request is `before` plus every entry's increment
 */
export function liveCounters(
  plan: RequestPlan,
  charged: boolean,
  sameKeyAccumulates = true,
): LiveCounters {
  const counters: LiveCounters = new Map();
  for (const d of plan.refunds) {
    const params = d.tokenBucket;
    if (params !== undefined) {
      // A refund moved the TAT back by |hits| × T, never below now: from after + |hits| × T
      // the same refund lands on the same TAT.
      const decision = d.decision;
      if (decision !== undefined && !counters.has(d.cacheKey))
        counters.set(
          d.cacheKey,
          bucketCounter(
            decision.tatUs - d.increment * params.emissionIntervalUs,
            decision.tatUs,
          ),
        );
      continue;
    }
    window(
      counters,
      d.cacheKey,
      d.windowSeconds,
      d.windowEndSeconds,
      d.previousCacheKey,
      d.current > 0 ? d.current - d.increment : undefined,
      d.current,
      undefined,
      0,
    );
  }
  for (const d of plan.counted) {
    const read = !d.localCacheHit;
    const increment = charged && read ? d.increment : 0;
    const known = sameKeyAccumulates ? undefined : counters.get(d.cacheKey);
    window(
      counters,
      d.cacheKey,
      d.windowSeconds,
      d.windowEndSeconds,
      d.previousCacheKey,
      read ? d.current - increment : undefined,
      // mc: a later entry of a key read the same value as the first; the count after is the
      // count so far plus its increment.
      !read
        ? undefined
        : known?.after !== undefined
          ? known.after + increment
          : d.current,
      read ? d.previous : undefined,
      read ? 0 : d.limit.requestsPerUnit + 1,
    );
  }
  for (const d of plan.buckets) {
    if (counters.has(d.cacheKey)) continue;
    const decision = d.decision;
    const params = d.tokenBucket;
    if (decision === undefined || params === undefined) continue;
    // An admitted take moved the TAT from max(stored, now) by hits × T (gcra.ts); a refusal
    // or a check left it there.
    const took = charged && decision.newTatUs !== undefined && d.increment > 0;
    counters.set(
      d.cacheKey,
      bucketCounter(
        took
          ? decision.tatUs - d.increment * params.emissionIntervalUs
          : decision.tatUs,
        decision.tatUs,
      ),
    );
  }
  return counters;
}

/**
 * Adds one plan entry of a window counter: the first entry of a key gives `before`; each adds
 * what it charged (`after − before` of the key, summed as `after` moves).
 */
function window(
  counters: LiveCounters,
  cacheKey: string,
  windowSeconds: number,
  windowEndSeconds: number,
  previousKey: string | undefined,
  before: number | undefined,
  after: number | undefined,
  previous: number | undefined,
  floor: number,
): void {
  const known = counters.get(cacheKey);
  if (known !== undefined) {
    // A later entry of the same key: the count after the request is its; a charge reads the
    // previous window's count, which a refund before it did not.
    if (!known.bucket && (after !== undefined || previous !== undefined))
      counters.set(cacheKey, {
        ...known,
        after: after ?? known.after,
        livePrevious: known.livePrevious ?? previous,
      });
    return;
  }
  const base = Math.max(0, before ?? 0);
  counters.set(cacheKey, {
    bucket: false,
    windowSeconds,
    // A sliding window's counter is read as the previous one during the next window.
    expiresAtSeconds:
      previousKey === undefined
        ? windowEndSeconds
        : windowEndSeconds + windowSeconds,
    before: before === undefined ? undefined : base,
    floor,
    after,
    previousKey,
    livePrevious: previousKey === undefined ? 0 : previous,
    value: base,
    start: base,
    previous: previous ?? 0,
    used: false,
    tatUs: 0,
    afterTatUs: 0,
  });
}

function bucketCounter(tatUs: number, afterTatUs: number): LiveCounter {
  return {
    bucket: true,
    windowSeconds: 0,
    expiresAtSeconds: 0,
    before: 0,
    floor: 0,
    after: 0,
    previousKey: undefined,
    livePrevious: 0,
    value: 0,
    start: 0,
    previous: 0,
    used: false,
    tatUs,
    afterTatUs,
  };
}
