import type { RateLimit } from "../config/rate-limit-config.js";
import type { RateLimitResponse_DescriptorStatus } from "../proto.js";
import type { Counter, StatsStore } from "../stats/stats-store.js";
import type { BaseLimiter } from "./base-limiter.js";
import type { CacheKey } from "./cache-key.js";

/**
 * Whether a request is charged all-or-nothing: its limits all come from one domain, so the
 * first limit decides (`RateLimit.allOrNothing`, from the domain's `charge:` or `CHARGE_MODE`).
 * Stops at the first descriptor with a limit.
 */
export function chargesAllOrNothing(
  limits: readonly (RateLimit | undefined)[],
): boolean {
  for (const limit of limits) {
    if (limit !== undefined) return limit.allOrNothing;
  }
  return false;
}

/** Whether any of a request's limits counts with a sliding window. */
export function anySliding(
  limits: readonly (RateLimit | undefined)[],
): boolean {
  for (const limit of limits) {
    if (limit?.sliding === true) return true;
  }
  return false;
}

/** The counters of one request as read (or as returned by the increment). */
export interface RequestCounters {
  /** Parallel to the descriptors: the current window's counter (0 where not read). */
  readonly current: readonly number[];
  /** Parallel to the descriptors: the previous window's counter (sliding windows, else 0). */
  readonly previous: readonly number[];
}

/**
 * The all-or-nothing check: whether every descriptor of the request fits its limit, i.e. no
 * descriptor that is not in shadow mode is known over limit in the local cache or would go
 * over with this request's hits (`weighted count before + hits > limit`). Descriptors of one
 * request that share a counter (same cache key) are charged together, so each is checked with
 * the hits of the earlier ones on that counter added, as the increments would add them.
 *
 * @param base - the backend's base limiter (only its weighted count is used)
 * @param counters - values before the request
 * @param cached - parallel: keys the local cache knows over limit (undefined: none)
 */
export function allFit(
  base: Pick<BaseLimiter, "weightedCount">,
  keys: readonly (CacheKey | undefined)[],
  limits: readonly (RateLimit | undefined)[],
  hitsAddends: readonly number[],
  counters: RequestCounters,
  cached: readonly boolean[] | undefined,
  nowSeconds: number,
): boolean {
  for (let i = 0; i < keys.length; i++) {
    const limit = limits[i];
    if (keys[i] === undefined || limit === undefined || limit.shadowMode)
      continue;
    if (cached?.[i] === true) return false;
    const weighted = base.weightedCount(
      limit,
      counters.current[i]!,
      counters.previous[i]!,
      nowSeconds,
    );
    const earlier = earlierHitsOnKey(keys, limits, hitsAddends, cached, i);
    if (weighted + earlier + hitsAddends[i]! > limit.requestsPerUnit)
      return false;
  }
  return true;
}

/**
 * Hits of the descriptors before `i` that increment the same counter as descriptor `i`
 * (0 in the usual request, where every descriptor has its own counter).
 */
function earlierHitsOnKey(
  keys: readonly (CacheKey | undefined)[],
  limits: readonly (RateLimit | undefined)[],
  hitsAddends: readonly number[],
  cached: readonly boolean[] | undefined,
  i: number,
): number {
  const key = keys[i]!.key;
  let hits = 0;
  for (let j = 0; j < i; j++) {
    const k = keys[j];
    if (k === undefined || limits[j] === undefined || cached?.[j] === true)
      continue;
    if (k.key === key) hits += hitsAddends[j]!;
  }
  return hits;
}

/**
 * Builds the statuses of an all-or-nothing request (and updates the stats).
 *
 * @param counters - after the increments when `charged`, before the request otherwise
 * @param charged - whether the request's counters were incremented
 */
export function allOrNothingStatuses(
  base: BaseLimiter,
  keys: readonly (CacheKey | undefined)[],
  limits: readonly (RateLimit | undefined)[],
  hitsAddends: readonly number[],
  counters: RequestCounters,
  cached: readonly boolean[] | undefined,
  nowSeconds: number,
  charged: boolean,
): RateLimitResponse_DescriptorStatus[] {
  const n = keys.length;
  const statuses = new Array<RateLimitResponse_DescriptorStatus>(n);
  for (let i = 0; i < n; i++) {
    const k = keys[i];
    const limit = limits[i];
    if (k === undefined || limit === undefined) {
      statuses[i] = base.okWithoutLimit();
    } else if (cached?.[i] === true) {
      statuses[i] = base.localCacheStatus(limit, hitsAddends[i]!, nowSeconds);
    } else {
      // Refused: each descriptor is answered as if charged after the earlier ones, so a
      // counter two descriptors share shows their sum (the one that does not fit says so).
      const current = charged
        ? counters.current[i]!
        : counters.current[i]! +
          earlierHitsOnKey(keys, limits, hitsAddends, cached, i);
      statuses[i] = base.counterStatus(
        k.key,
        limit,
        current,
        counters.previous[i]!,
        hitsAddends[i]!,
        nowSeconds,
        charged,
      );
    }
  }
  return statuses;
}

/**
 * Binds {@link allOrNothingStatuses} to one request: the returned function builds its
 * statuses from counters and whether they were charged.
 */
export function statusesOf(
  base: BaseLimiter,
  keys: readonly (CacheKey | undefined)[],
  limits: readonly (RateLimit | undefined)[],
  hitsAddends: readonly number[],
  cached: readonly boolean[] | undefined,
  nowSeconds: number,
): (
  counters: RequestCounters,
  charged: boolean,
) => RateLimitResponse_DescriptorStatus[] {
  return (counters, charged) =>
    allOrNothingStatuses(
      base,
      keys,
      limits,
      hitsAddends,
      counters,
      cached,
      nowSeconds,
      charged,
    );
}

/**
 * Counter of all-or-nothing requests whose check-then-increment lost a race (another request
 * took the budget between the read and the increment) and were compensated.
 */
export const allOrNothingCompensatedStat =
  "ratelimit.all_or_nothing.compensated";

/**
 * Returns the {@link allOrNothingCompensatedStat} counter, allocated in `statsStore` on its
 * first `add` only, so deployments without all-or-nothing domains keep exactly the reference's
 * set of statistics (nothing new appears at 0 in pull stats or `/stats`).
 */
export function lazyCompensatedCounter(
  statsStore: StatsStore | undefined,
): Pick<Counter, "add"> | undefined {
  if (statsStore === undefined) return undefined;
  let counter: Counter | undefined;
  return {
    add(n) {
      (counter ??= statsStore.counter(allOrNothingCompensatedStat)).add(n);
    },
  };
}

/**
 * The store operations of one all-or-nothing request decided by
 * {@link checkThenIncrement}, each over the request's keys not answered by the local cache.
 */
export interface CheckThenIncrementSteps {
  /** Reads the current (and, for sliding windows, previous) window's counters. */
  read(): Promise<RequestCounters>;
  /**
   * Adds each descriptor's hits to its current window's counter.
   *
   * @param before - what {@link read} returned
   * @returns parallel to the descriptors: the counters after the increment (ignored where
   *   no key was sent)
   */
  increment(before: RequestCounters): Promise<readonly number[]>;
  /** Takes back the hits {@link increment} added (the compensation). */
  undo(): Promise<void>;
}

/**
 * All-or-nothing charging over keys that cannot be changed in one atomic step (kv cluster or
 * two instances, mc): reads the counters; when they do not all fit (see {@link allFit}) the
 * request is refused and nothing is written; otherwise every counter is incremented, and if
 * the values after the increment show that another request took the budget in between (a
 * descriptor not in shadow mode over its limit), the increments are undone, the request is
 * refused and `compensated` counts it. The race window is the time between the read and the
 * increment; a race refuses (never admits over the limit), and concurrent racers may all be
 * refused.
 *
 * @param cached - parallel: keys the local cache knows over limit (undefined: none); they are
 *   neither read nor incremented
 * @param compensated - counter of {@link allOrNothingCompensatedStat} (may allocate it on
 *   first use)
 * @returns the statuses, as {@link allOrNothingStatuses} builds them
 */
export async function checkThenIncrement(
  base: BaseLimiter,
  keys: readonly (CacheKey | undefined)[],
  limits: readonly (RateLimit | undefined)[],
  hitsAddends: readonly number[],
  cached: readonly boolean[] | undefined,
  nowSeconds: number,
  steps: CheckThenIncrementSteps,
  compensated: Pick<Counter, "add"> | undefined,
): Promise<RateLimitResponse_DescriptorStatus[]> {
  const statuses = statusesOf(
    base,
    keys,
    limits,
    hitsAddends,
    cached,
    nowSeconds,
  );
  const before = await steps.read();
  if (!allFit(base, keys, limits, hitsAddends, before, cached, nowSeconds))
    return statuses(before, false);
  const n = keys.length;
  const after = await steps.increment(before);
  const counters = { current: after, previous: before.previous };
  // The values after the increment already hold this request's hits.
  const noHits = new Array<number>(n).fill(0);
  if (allFit(base, keys, limits, noHits, counters, cached, nowSeconds))
    return statuses(counters, true);
  // Lost the race: undo every increment of this request.
  await steps.undo();
  compensated?.add(1);
  const current = new Array<number>(n);
  for (let i = 0; i < n; i++) {
    const sent = keys[i] !== undefined && cached?.[i] !== true;
    current[i] = after[i]! - (sent ? hitsAddends[i]! : 0);
  }
  return statuses({ current, previous: before.previous }, false);
}
