import type { RateLimit } from "../../config/rate-limit-config.js";
import {
  allFit,
  allOrNothingStatuses,
  chargesAllOrNothing,
} from "../../limiter/all-or-nothing.js";
import type { BaseLimiter } from "../../limiter/base-limiter.js";
import type { CacheKey } from "../../limiter/cache-key.js";
import { counterReadings, readingKeys } from "../../limiter/counter-reading.js";
import type {
  CounterReading,
  RateLimitCache,
} from "../../limiter/rate-limit-cache.js";
import type {
  RateLimitDescriptor,
  RateLimitResponse_DescriptorStatus,
} from "../../proto.js";
import type { StatsStore } from "../../stats/stats-store.js";
import type { Clock } from "../../util/clock.js";
import { CounterStore, defaultMemoryMaxKeys } from "./counter-store.js";

/** Options of {@link MemoryRateLimitCache}. */
export interface MemoryRateLimitCacheOptions {
  /** Shared fixed-window logic (thresholds, stats, cache keys). */
  readonly baseLimiter: BaseLimiter;
  /** Time source for expiry sweeps. */
  readonly clock: Clock;
  /**
   * When a request has a descriptor that would go over its limit, increment only the
   * descriptors that would go over (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`, behavior.md
   * §4.8). @defaultValue false
   */
  readonly stopCacheKeyIncrementWhenOverlimit?: boolean;
  /** How often expired windows are removed, in milliseconds. @defaultValue 1000 */
  readonly sweepIntervalMs?: number;
  /**
   * Most live counters (`MEMORY_MAX_KEYS`); beyond it the windows that end soonest are
   * dropped first, counted in `ratelimit.memory.evicted_keys`. @defaultValue 1000000
   */
  readonly maxKeys?: number;
  /**
   * Where `ratelimit.memory.evicted_keys` (created at the first eviction) and
   * `ratelimit.memory.keys` live; none when absent.
   */
  readonly statsStore?: StatsStore;
  /**
   * Keep the gauge `ratelimit.memory.keys` (live counters, set at each sweep) in `statsStore`
   * (`RUNTIME_STATS_ENABLED`). @defaultValue false
   */
  readonly reportKeys?: boolean;
}

/** Statistics of the memory backend. */
export const memoryStatNames = Object.freeze({
  keys: "ratelimit.memory.keys",
  evictedKeys: "ratelimit.memory.evicted_keys",
});

/**
 * The embedded backend (`BACKEND_TYPE=memory`): exact fixed-window counters in this process,
 * keyed by the same cache keys the key-value backend stores, in a {@link CounterStore}. A
 * counter lives until its window ends; expired windows are swept on a timer, so memory is
 * bounded by the keys of the live windows (and by `maxKeys`). Single instance only: counters
 * are not shared between processes.
 */
export class MemoryRateLimitCache implements RateLimitCache {
  private readonly base: BaseLimiter;
  private readonly clock: Clock;
  private readonly stopIncrementWhenOverlimit: boolean;
  private readonly counters: CounterStore;
  private readonly sweepTimer: NodeJS.Timeout;

  constructor(options: MemoryRateLimitCacheOptions) {
    this.base = options.baseLimiter;
    this.clock = options.clock;
    this.stopIncrementWhenOverlimit =
      options.stopCacheKeyIncrementWhenOverlimit ?? false;
    const store = options.statsStore;
    const keys =
      options.reportKeys === true
        ? store?.gauge(memoryStatNames.keys)
        : undefined;
    this.counters = new CounterStore({
      maxKeys: options.maxKeys ?? defaultMemoryMaxKeys,
      ...(store !== undefined
        ? {
            onEvict: (count: number) => {
              store.counter(memoryStatNames.evictedKeys).add(count);
            },
          }
        : {}),
    });
    this.sweepTimer = setInterval(() => {
      this.sweep(this.clock.nowSeconds());
      keys?.set(this.counters.size);
    }, options.sweepIntervalMs ?? 1000);
    this.sweepTimer.unref();
  }

  /** Number of live counters (for tests and stats). */
  get size(): number {
    return this.counters.size;
  }

  doLimit(
    domain: string,
    descriptors: readonly RateLimitDescriptor[],
    limits: readonly (RateLimit | undefined)[],
    hitsAddends: readonly number[],
  ): Promise<RateLimitResponse_DescriptorStatus[]> {
    const now = this.base.nowSeconds();
    const keys = this.base.generateCacheKeys(
      domain,
      descriptors,
      limits,
      hitsAddends,
      now,
    );
    const n = descriptors.length;
    if (chargesAllOrNothing(limits)) {
      return Promise.resolve(
        this.doLimitAllOrNothing(keys, limits, hitsAddends, now),
      );
    }
    // With STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: if any key would go over, only the keys
    // that would go over are incremented (upstream `fixed_cache_impl.go` semantics).
    // Keys the local cache knows to be over limit skip the counters entirely.
    const cached = this.base.localCacheHits(keys);
    let onlyOver: boolean[] | undefined;
    if (cached !== undefined && this.stopIncrementWhenOverlimit) {
      // A local-cache hit freezes every other counter of the request (behavior.md §4.8 step 1).
      onlyOver = new Array<boolean>(n).fill(false);
    } else if (this.stopIncrementWhenOverlimit) {
      const wouldExceed = new Array<boolean>(n).fill(false);
      let any = false;
      for (let i = 0; i < n; i++) {
        const k = keys[i];
        if (k === undefined) continue;
        const limit = limits[i]!;
        const current = this.base.weightedCount(
          limit,
          this.counters.count(k.key),
          this.read(k.previousKey),
          now,
        );
        if (current + hitsAddends[i]! > limit.requestsPerUnit) {
          wouldExceed[i] = true;
          any = true;
        }
      }
      if (any) onlyOver = wouldExceed;
    }
    const statuses = new Array<RateLimitResponse_DescriptorStatus>(n);
    for (let i = 0; i < n; i++) {
      const k = keys[i];
      const limit = limits[i];
      if (k === undefined || limit === undefined) {
        statuses[i] = this.base.okWithoutLimit();
        continue;
      }
      const hits = hitsAddends[i]!;
      if (cached?.[i] === true) {
        statuses[i] = this.base.localCacheStatus(limit, hits, now);
        continue;
      }
      const increment =
        onlyOver === undefined || onlyOver[i] === true ? hits : 0;
      const after = this.increment(k.key, increment, now, limit);
      statuses[i] = limit.sliding
        ? this.base.counterStatus(
            k.key,
            limit,
            after,
            this.read(k.previousKey),
            hits,
            now,
            true,
          )
        : this.base.descriptorStatus(k.key, limit, after, hits, now);
    }
    return Promise.resolve(statuses);
  }

  /** Reads the counters without changing them (see {@link RateLimitCache.peekCounters}). */
  peekCounters(
    domain: string,
    descriptors: readonly RateLimitDescriptor[],
    limits: readonly (RateLimit | undefined)[],
  ): Promise<(CounterReading | undefined)[]> {
    const read = readingKeys(this.base, domain, descriptors, limits);
    const values = read.keys.map((k) =>
      k === undefined ? 0 : this.counters.count(k.key),
    );
    // Sliding windows: the previous window's counter, as doLimit reads it.
    const previous = read.keys.map((k) => this.read(k?.previousKey));
    return Promise.resolve(counterReadings(read, limits, values, previous));
  }

  flush(): Promise<void> {
    return Promise.resolve();
  }

  close(): Promise<void> {
    clearInterval(this.sweepTimer);
    return Promise.resolve();
  }

  /** Removes every counter whose window ended at or before `nowSeconds`. */
  sweep(nowSeconds: number): void {
    this.counters.sweep(nowSeconds);
  }

  /**
   * All-or-nothing charging (`charge: all_or_nothing`): reads every counter, and increments all
   * of them only when every descriptor fits; atomic, as nothing runs in between.
   */
  private doLimitAllOrNothing(
    keys: readonly (CacheKey | undefined)[],
    limits: readonly (RateLimit | undefined)[],
    hitsAddends: readonly number[],
    now: number,
  ): RateLimitResponse_DescriptorStatus[] {
    const n = keys.length;
    const cached = this.base.localCacheHits(keys);
    const current = new Array<number>(n).fill(0);
    const previous = new Array<number>(n).fill(0);
    for (let i = 0; i < n; i++) {
      const k = keys[i];
      if (k === undefined || cached?.[i] === true) continue;
      current[i] = this.read(k.key);
      previous[i] = this.read(k.previousKey);
    }
    const counters = { current, previous };
    const admitted = allFit(
      this.base,
      keys,
      limits,
      hitsAddends,
      counters,
      cached,
      now,
    );
    if (admitted) {
      for (let i = 0; i < n; i++) {
        const k = keys[i];
        if (k === undefined || cached?.[i] === true) continue;
        current[i] = this.increment(k.key, hitsAddends[i]!, now, limits[i]!);
      }
    }
    return allOrNothingStatuses(
      this.base,
      keys,
      limits,
      hitsAddends,
      counters,
      cached,
      now,
      admitted,
    );
  }

  /** The counter of `key`, 0 when absent or when there is no key. */
  private read(key: string | undefined): number {
    return key === undefined ? 0 : this.counters.count(key);
  }

  private increment(
    key: string,
    hits: number,
    now: number,
    limit: RateLimit,
  ): number {
    // The key embeds its window start, so it is dead once the window ends (a sliding
    // window's counter is read during the next window too).
    const windowSeconds = limit.windowSeconds;
    const expiresAt =
      now -
      (now % windowSeconds) +
      (limit.sliding ? 2 * windowSeconds : windowSeconds);
    return this.counters.add(key, hits, expiresAt);
  }
}
