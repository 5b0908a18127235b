import type { RateLimit } from "../config/rate-limit-config.js";
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
