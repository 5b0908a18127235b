import type {
  BucketSlot,
  CounterBackend,
  CounterSlot,
} from "../../limiter/counter-backend.js";
import { gcraDecide } from "../../limiter/gcra.js";
import type { StatsStore } from "../../stats/stats-store.js";
import type { Clock } from "../../util/clock.js";
import { CounterStore, defaultMemoryMaxKeys } from "./counter-store.js";

/** Options of {@link MemoryCounterBackend}. */
export interface MemoryCounterBackendOptions {
  /** Time source for expiry sweeps. */
  readonly clock: Clock;
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
 * The embedded backend (`BACKEND_TYPE=memory`): exact counters in this process, keyed by the
 * same cache keys the key-value backend stores, in a {@link CounterStore}. A counter lives
 * until its window ends (a sliding window's until the next one ends); expired windows are
 * swept on a timer, so memory is bounded by the keys of the live windows (and by `maxKeys`).
 * Single instance only: counters are not shared between processes. Every operation finishes
 * synchronously, so the all-or-nothing charge is atomic.
 */
export class MemoryCounterBackend implements CounterBackend {
  readonly inProcess = true;
  private readonly clock: Clock;
  private readonly counters: CounterStore;
  private readonly sweepTimer: NodeJS.Timeout;

  constructor(options: MemoryCounterBackendOptions) {
    this.clock = options.clock;
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

  increment(slots: readonly CounterSlot[], _nowSeconds: number): void {
    for (const slot of slots) {
      slot.current = this.write(slot);
      if (slot.previousCacheKey !== undefined)
        slot.previous = this.counters.count(slot.previousCacheKey);
    }
  }

  peek(slots: readonly CounterSlot[]): void {
    for (const slot of slots) {
      slot.current = this.counters.count(slot.cacheKey);
      if (slot.previousCacheKey !== undefined)
        slot.previous = this.counters.count(slot.previousCacheKey);
    }
  }

  add(slots: readonly CounterSlot[], _nowSeconds: number): void {
    for (const slot of slots) {
      slot.current = this.write(slot);
    }
  }

  /** Atomic: nothing runs between the read, the check and the writes. */
  chargeAllOrNothing(
    slots: readonly CounterSlot[],
    nowSeconds: number,
    fits: (slots: readonly CounterSlot[]) => boolean,
  ): boolean {
    this.peek(slots);
    if (!fits(slots)) return false;
    this.add(slots, nowSeconds);
    return true;
  }

  /**
   * Token buckets: {@link gcraDecide} on each slot's stored TAT, in slot order (a key repeated
   * in one request sees the earlier slot's write), storing the new TAT until the bucket is
   * full again. Synchronous, so each decision is atomic. A refund that fills the bucket
   * stores now rather than deleting the key (same meaning; the sweep drops it).
   *
   * @param nowUs - the request time, integer µs since the Unix epoch
   * @throws TypeError when a slot has no `tokenBucket` params (a caller's bug)
   */
  takeTokens(slots: readonly BucketSlot[], nowUs: number): void {
    for (const slot of slots) {
      const params = slot.tokenBucket;
      if (params === undefined)
        throw new TypeError(
          `token bucket slot ${slot.cacheKey} has no tokenBucket params`,
        );
      const decision = gcraDecide(
        this.counters.tat(slot.cacheKey),
        nowUs,
        slot.increment,
        params,
      );
      if (decision.newTatUs !== undefined)
        this.counters.setTat(slot.cacheKey, decision.newTatUs);
      slot.decision = decision;
    }
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
   * Adds the slot's increment to its counter; returns the value after it. A negative
   * increment (an undo, a refund) subtracts, never below 0, and never creates a counter.
   */
  private write(slot: CounterSlot): number {
    if (slot.increment < 0)
      return this.counters.subtract(slot.cacheKey, -slot.increment);
    // The key embeds its window start, so it is dead once the window ends (a sliding
    // window's counter is read during the next window too; sliding windows are epoch-aligned,
    // so the next one is as long). `windowEndSeconds`, not `now − now mod window`: a calendar
    // window ends at its local midnight; for epoch-aligned windows the two are equal.
    const windowEnd = slot.windowEndSeconds;
    const expiresAt = slot.sliding ? windowEnd + slot.windowSeconds : windowEnd;
    return this.counters.add(slot.cacheKey, slot.increment, expiresAt);
  }
}
