/** Options of {@link CounterStore}. */
export interface CounterStoreOptions {
  /**
   * Most live counters (`MEMORY_MAX_KEYS`). Adding a new key beyond it first drops the
   * counters of the windows that end soonest, oldest first. @defaultValue 1000000
   */
  readonly maxKeys?: number;
  /** Called with how many live counters one add dropped for {@link maxKeys}. */
  readonly onEvict?: (count: number) => void;
}

/** Keys whose windows end at the same second, in insertion order; `head` skips dropped ones. */
interface ExpiryBucket {
  readonly keys: string[];
  head: number;
}

const flattenPattern = /(?:)/;

/** Default of {@link CounterStoreOptions.maxKeys}. */
export const defaultMemoryMaxKeys = 1_000_000;

/**
 * The counters of the embedded backend: one `Map` from cache key to count (a small integer,
 * stored unboxed by V8) and, per second at which windows end, the list of keys created for it.
 * Per live key that is the key string (flattened), one map entry and one list slot: about
 * 120 bytes of heap for a 40-character key (`bench/memory-store.ts` prints it).
 *
 * Expired windows are dropped by {@link sweep} (the owner calls it on a timer, every second
 * by default): a whole list at once, whatever the access pattern, so memory follows the live
 * windows. The map shrinks when it empties (V8 halves a hash table a quarter full), so the heap
 * comes back after a burst of distinct values.
 */
export class CounterStore {
  private readonly counts = new Map<string, number>();
  /** Keys by the second their window ends (few distinct values: one per unit and window). */
  private readonly buckets = new Map<number, ExpiryBucket>();
  private readonly maxKeys: number;
  private readonly onEvict: ((count: number) => void) | undefined;

  /** @throws RangeError when `maxKeys` is not a positive integer */
  constructor(options: CounterStoreOptions = {}) {
    const maxKeys = options.maxKeys ?? defaultMemoryMaxKeys;
    if (!Number.isSafeInteger(maxKeys) || maxKeys < 1)
      throw new RangeError(
        `maxKeys must be a positive integer (got ${maxKeys})`,
      );
    this.maxKeys = maxKeys;
    this.onEvict = options.onEvict;
  }

  /** Number of live counters. */
  get size(): number {
    return this.counts.size;
  }

  /** The count of `key` in its window; 0 when absent (never created, expired or dropped). */
  count(key: string): number {
    return this.counts.get(key) ?? 0;
  }

  /**
   * Subtracts `hits` (> 0) from an existing counter, never below 0; a missing counter stays
   * missing (a refund of a window that has ended, or was never counted).
   *
   * @returns the counter after it (0 when missing)
   */
  subtract(key: string, hits: number): number {
    const current = this.counts.get(key);
    if (current === undefined) return 0;
    const after = current > hits ? current - hits : 0;
    this.counts.set(key, after);
    return after;
  }

  /**
   * Adds `hits` (≥ 0; 0 creates the counter) to `key`, creating it for a window that ends at
   * `expiresAtSeconds` (epoch seconds) when absent.
   *
   * @returns the count after the addition
   */
  add(key: string, hits: number, expiresAtSeconds: number): number {
    const current = this.counts.get(key);
    if (current !== undefined) {
      const after = current + hits;
      this.counts.set(key, after);
      return after;
    }
    if (this.counts.size >= this.maxKeys)
      this.evict(this.counts.size - this.maxKeys + 1);
    // A cache key built with `+` is a tree of V8 cons strings (~100 bytes more than its
    // characters). A regular expression needs a flat subject, so V8 flattens it in place; the
    // garbage collector then drops the tree. Measured: 172 → 75 bytes per stored key string.
    flattenPattern.test(key);
    this.counts.set(key, hits);
    const bucket = this.buckets.get(expiresAtSeconds);
    if (bucket === undefined)
      this.buckets.set(expiresAtSeconds, { keys: [key], head: 0 });
    else bucket.keys.push(key);
    return hits;
  }

  /**
   * Drops every counter whose window ended at or before `nowSeconds`.
   *
   * @returns how many counters were dropped
   */
  sweep(nowSeconds: number): number {
    let dropped = 0;
    for (const [expiry, bucket] of this.buckets) {
      if (expiry > nowSeconds) continue;
      const keys = bucket.keys;
      for (let i = bucket.head; i < keys.length; i++)
        if (this.counts.delete(keys[i]!)) dropped++;
      this.buckets.delete(expiry);
    }
    return dropped;
  }

  /** Drops `count` live counters, from the windows that end soonest, oldest first. */
  private evict(count: number): void {
    let evicted = 0;
    while (evicted < count) {
      let soonest: number | undefined;
      for (const expiry of this.buckets.keys())
        if (soonest === undefined || expiry < soonest) soonest = expiry;
      if (soonest === undefined) break;
      const bucket = this.buckets.get(soonest)!;
      const keys = bucket.keys;
      while (evicted < count && bucket.head < keys.length) {
        if (this.counts.delete(keys[bucket.head++]!)) evicted++;
      }
      if (bucket.head >= keys.length) this.buckets.delete(soonest);
      // Drop the consumed prefix now and then, so a long-lived bucket does not keep it.
      else if (bucket.head > 4096 && bucket.head * 2 > keys.length) {
        keys.splice(0, bucket.head);
        bucket.head = 0;
      }
    }
    if (evicted > 0) this.onEvict?.(evicted);
  }
}
