import { LRUCache } from "lru-cache";
import type { Gauge, StatsStore } from "../stats/stats-store.js";
import type { Clock } from "../util/clock.js";

/**
 * In-process set of cache keys known to be over their limit in the current window
 * (`LOCAL_CACHE_SIZE_IN_BYTES`): a hit answers OVER_LIMIT without a backend round trip.
 */
export interface LocalCache {
  /** Whether `cacheKey` is known to be over its limit (and not expired). */
  has(cacheKey: string): boolean;
  /** Remembers `cacheKey` as over limit for `expirationSeconds` (> 0). */
  add(cacheKey: string, expirationSeconds: number): void;
  /** Forgets a cache key (a refund made its over-limit verdict stale). */
  delete(cacheKey: string): void;
  /** Number of keys held. */
  readonly size: number;
}

/** Options of {@link createLocalCache}. */
export interface LocalCacheOptions {
  /** Memory budget in bytes (`LOCAL_CACHE_SIZE_IN_BYTES`), > 0; least recently used keys go first. */
  readonly maxBytes: number;
  /** Time source for expiry. */
  readonly clock: Clock;
  /** Where the `ratelimit.localcache.*` gauges live (docs/reference-parity.md#stat-names). */
  readonly statsStore?: StatsStore;
}

// Accounted size of one entry: the key's UTF-16 payload plus a fixed estimate of the map node,
// list links and TTL slots lru-cache keeps per entry.
const entryOverheadBytes = 96;

/**
 * Creates the local over-limit cache on `lru-cache`, bounded by bytes, with a TTL per key.
 * Same role as upstream's freecache; its stats keep upstream's gauge names.
 */
export function createLocalCache(options: LocalCacheOptions): LocalCache {
  const store = options.statsStore;
  const gauge = (name: string): Gauge | undefined =>
    store?.gauge(`ratelimit.localcache.${name}`);
  const gauges = {
    entryCount: gauge("entryCount"),
    hitCount: gauge("hitCount"),
    missCount: gauge("missCount"),
    lookupCount: gauge("lookupCount"),
    overwriteCount: gauge("overwriteCount"),
    evacuateCount: gauge("evacuateCount"),
    expiredCount: gauge("expiredCount"),
  };
  let hits = 0;
  let misses = 0;
  let overwrites = 0;
  let evictions = 0;
  let expirations = 0;
  const clock = options.clock;
  const cache = new LRUCache<string, true>({
    maxSize: Math.max(1, options.maxBytes),
    sizeCalculation: (_value, key) => key.length * 2 + entryOverheadBytes,
    ttlAutopurge: false,
    // Read the injected clock on every check (the default caches "now" for 1 ms via a timer).
    ttlResolution: 0,
    perf: { now: () => clock.nowMs() },
    dispose: (_value, _key, reason) => {
      if (reason === "evict") gauges.evacuateCount?.set(++evictions);
      else if (reason === "expire") gauges.expiredCount?.set(++expirations);
    },
  });
  return {
    has(cacheKey) {
      const found = cache.get(cacheKey) === true;
      if (found) gauges.hitCount?.set(++hits);
      else gauges.missCount?.set(++misses);
      gauges.lookupCount?.set(hits + misses);
      return found;
    },
    add(cacheKey, expirationSeconds) {
      if (cache.has(cacheKey)) gauges.overwriteCount?.set(++overwrites);
      cache.set(cacheKey, true, { ttl: expirationSeconds * 1000 });
      gauges.entryCount?.set(cache.size);
    },
    delete(cacheKey) {
      if (cache.delete(cacheKey)) gauges.entryCount?.set(cache.size);
    },
    get size() {
      return cache.size;
    },
  };
}
