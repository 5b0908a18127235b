import type { RateLimit } from "../config/rate-limit-config.js";
import {
  RateLimitResponse_RateLimit_Unit as Unit,
  type RateLimitDescriptor,
} from "../proto.js";
import { windowStartSeconds } from "./window.js";

/** A backend counter key for (domain, descriptor, window). */
export interface CacheKey {
  /** The key as stored: `<prefix><domain>_<k1>_<v1>_..._<windowStart>`. */
  readonly key: string;
  /** True for SECOND limits, which go to the per-second backend when one is configured. */
  readonly perSecond: boolean;
}

/**
 * Returns the cache key string for one descriptor in the current window, byte-identical to
 * upstream `cache_key.go` `GenerateCacheKey` so both services can share live counters:
 * `CACHE_KEY_PREFIX + domain + "_" + (entry.key + "_" + value + "_")* + windowStart`, where an
 * entry matched through a share_threshold wildcard uses the configured pattern value and the
 * prefix is glued on with no separator (behavior.md §4.2, §3.7).
 *
 * @param nowSeconds - seconds since the Unix epoch
 */
export function cacheKeyString(
  prefix: string,
  domain: string,
  descriptor: RateLimitDescriptor,
  limit: RateLimit,
  nowSeconds: number,
): string {
  let key = prefix + domain + "_";
  const entries = descriptor.entries;
  const shared = limit.shareThresholdValues;
  for (let i = 0; i < entries.length; i++) {
    const entry = entries[i]!;
    const value = shared?.[i] ?? entry.value;
    key += entry.key + "_" + value + "_";
  }
  return key + String(windowStartSeconds(nowSeconds, limit.unitSeconds));
}

/** Returns whether a limit's counters belong on the per-second backend. */
export function isPerSecond(limit: RateLimit): boolean {
  return limit.unit === Unit.SECOND;
}
