import type { RateLimit } from "../config/rate-limit-config.js";
import {
  RateLimitResponse_RateLimit_Unit as Unit,
  type RateLimitDescriptor,
} from "../proto.js";
import { windowStartSeconds } from "./window.js";

/** A backend counter key for (domain, descriptor, window). */
export interface CacheKey {
  /** The key as stored: `<prefix><domain>_<k1>_<v1>_..._<windowStart>[suffix]`. */
  readonly key: string;
  /** True for SECOND limits, which go to the per-second backend when one is configured. */
  readonly perSecond: boolean;
  /**
   * Sliding windows only: the key of the previous window's counter (read, never written, by
   * the decision); undefined for fixed windows.
   */
  readonly previousKey: string | undefined;
}

/**
 * Returns the cache key string for one descriptor in the current window. For the reference's
 * fixed one-unit windows it is byte-identical to upstream `cache_key.go` `GenerateCacheKey`
 * so both services can share live counters:
 * `CACHE_KEY_PREFIX + domain + "_" + (entry.key + "_" + value + "_")* + windowStart`, where an
 * entry matched through a share_threshold wildcard uses the configured pattern value and the
 * prefix is glued on with no separator (docs/reference-parity.md#cache-key and #share-threshold).
 * Windows of several units and sliding windows append the limit's `cacheKeySuffix` (`_w<seconds>` /
 * `_s<seconds>`).
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
  return (
    cacheKeyStem(prefix, domain, descriptor, limit) +
    String(windowStartSeconds(nowSeconds, limit.windowSeconds)) +
    limit.cacheKeySuffix
  );
}

/** The cache key up to (not including) the window start: `<prefix><domain>_<k>_<v>_…`. */
export function cacheKeyStem(
  prefix: string,
  domain: string,
  descriptor: RateLimitDescriptor,
  limit: RateLimit,
): string {
  let key = prefix + domain + "_";
  const entries = descriptor.entries;
  const shared = limit.shareThresholdValues;
  for (let i = 0; i < entries.length; i++) {
    const entry = entries[i]!;
    const value = shared?.[i] ?? entry.value;
    key += entry.key + "_" + value + "_";
  }
  return key;
}

/** Returns whether a limit's counters belong on the per-second backend. */
export function isPerSecond(limit: RateLimit): boolean {
  return limit.unit === Unit.SECOND;
}
