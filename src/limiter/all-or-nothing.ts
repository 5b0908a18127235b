import type { RateLimit } from "../config/rate-limit-config.js";
import type { RateLimitResponse_DescriptorStatus } from "../proto.js";
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
 * over with this request's hits (`weighted count before + hits > limit`).
 *
 * @param counters - values before the request
 * @param cached - parallel: keys the local cache knows over limit (undefined: none)
 */
export function allFit(
  base: BaseLimiter,
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
    if (weighted + hitsAddends[i]! > limit.requestsPerUnit) return false;
  }
  return true;
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
      statuses[i] = base.counterStatus(
        k.key,
        limit,
        counters.current[i]!,
        counters.previous[i]!,
        hitsAddends[i]!,
        nowSeconds,
        charged,
      );
    }
  }
  return statuses;
}
