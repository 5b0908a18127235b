import type { RateLimit } from "../config/rate-limit-config.js";
import type { RateLimitDescriptor } from "../proto.js";
import type { BaseLimiter } from "./base-limiter.js";
import type { CacheKey } from "./cache-key.js";
import type { CounterReading } from "./rate-limit-cache.js";
import { windowStartSeconds } from "./window.js";

/** The cache keys a read-only counter read needs (see {@link readingKeys}). */
export interface ReadingKeys {
  /** Current time, whole seconds since the Unix epoch. */
  readonly nowSeconds: number;
  /** Parallel to the descriptors; undefined where no limit applies. */
  readonly keys: readonly (CacheKey | undefined)[];
  /** Parallel to the descriptors: the local cache knows the key over limit. */
  readonly localCacheHits: readonly boolean[] | undefined;
}

/**
 * Returns the cache keys a request would charge, computed by the backend's own base limiter
 * (so they are exactly those of `doLimit`) with zero hits, which leaves `total_hits` unchanged.
 */
export function readingKeys(
  base: BaseLimiter,
  domain: string,
  descriptors: readonly RateLimitDescriptor[],
  limits: readonly (RateLimit | undefined)[],
): ReadingKeys {
  const nowSeconds = base.nowSeconds();
  const zeros = new Array<number>(descriptors.length).fill(0);
  const keys = base.generateCacheKeys(
    domain,
    descriptors,
    limits,
    zeros,
    nowSeconds,
  );
  return { nowSeconds, keys, localCacheHits: base.localCacheHits(keys) };
}

/**
 * Builds the readings from the values read (parallel to the descriptors; absent counters 0).
 *
 * @param values - parallel to the descriptors: the current window's counters
 * @param previousValues - parallel to the descriptors: the previous window's counters of
 *   sliding windows (absent or holes: 0)
 */
export function counterReadings(
  read: ReadingKeys,
  limits: readonly (RateLimit | undefined)[],
  values: readonly number[],
  previousValues?: readonly (number | undefined)[],
): (CounterReading | undefined)[] {
  return read.keys.map((k, i) => {
    const limit = limits[i];
    if (k === undefined || limit === undefined) return undefined;
    const start = windowStartSeconds(read.nowSeconds, limit.windowSeconds);
    return {
      key: k.key,
      value: values[i] ?? 0,
      windowStartSeconds: start,
      windowEndSeconds: start + limit.windowSeconds,
      localCacheHit: read.localCacheHits?.[i] === true,
      ...(k.previousKey !== undefined
        ? {
            previousKey: k.previousKey,
            previousValue: previousValues?.[i] ?? 0,
          }
        : {}),
    };
  });
}
