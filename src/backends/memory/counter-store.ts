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

/**
 * Keys whose windows end (or whose token buckets are full again) at the same second, in
 * insertion order; `head` skips dropped ones.
 */
interface ExpiryBucket {
  readonly keys: string[];
  head: number;
}

const flattenPattern = /(?:)/;
const microsPerSecond = 1_000_000;

/** The second at which a token bucket with this TAT (µs) is full again: the key may go then. */
function tatEndSeconds(tatUs: number): number {
  return Math.ceil(tatUs / microsPerSecond);
}

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
 *
 * Token buckets (`algorithm: token_bucket`) keep their TAT (µs since the epoch, see
 * `limiter/gcra.ts`) in the same map, under their own cache keys (`…tb<window>_…`, never a
 * counter's), so `maxKeys`, eviction and sweeping bound both. A TAT moves with every
 * decision, so its key is listed (in {@link tatLists}, apart from the counters' lists) at the
 * second its bucket was full again when it was listed; the sweep, and eviction, look at the
 * stored TAT and list the key again, later, when the bucket has filled up further since.
 * Listing it at every write instead would cost a list slot per decision.
 */
export class CounterStore {
  /** Counters and token-bucket TATs, by cache key. */
  private readonly counts = new Map<string, number>();
  /** Keys by the second their window ends (few distinct values: one per unit and window). */
  private readonly buckets = new Map<number, ExpiryBucket>();
  /**
   * Token-bucket keys by the second their bucket was full again when listed (µs TATs spread
   * over many seconds, hence apart from {@link buckets}). Each live TAT key is in one list.
   */
  private readonly tatLists = new Map<number, ExpiryBucket>();
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

  /** Number of live counters (token-bucket TATs included). */
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
   * The stored TAT of a token bucket, µs since the epoch; undefined when absent (never
   * written, swept or evicted), which means a full bucket, as does any TAT ≤ now.
   */
  tat(key: string): number | undefined {
    return this.counts.get(key);
  }

  /**
   * Stores the TAT of a token bucket (µs since the epoch), kept at least until the second it
   * is reached (the bucket is full then, as when the key is absent). Creating a key beyond
   * `maxKeys` evicts as {@link add} does.
   */
  setTat(key: string, tatUs: number): void {
    if (this.counts.has(key)) {
      // Listed already; the sweep finds the later TAT and lists the key again then.
      this.counts.set(key, tatUs);
      return;
    }
    if (this.counts.size >= this.maxKeys)
      this.evict(this.counts.size - this.maxKeys + 1);
    flattenPattern.test(key);
    this.counts.set(key, tatUs);
    this.listTat(key, tatEndSeconds(tatUs));
  }

  /**
   * Drops every counter whose window ended at or before `nowSeconds`, and every token bucket
   * full again by then (TAT ≤ `nowSeconds` × 10⁶).
   *
   * @returns how many counters (and TATs) were dropped
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
    if (this.tatLists.size === 0) return dropped;
    for (const [expiry, list] of this.tatLists) {
      // Lists added below (for later seconds) are visited too, and skipped here.
      if (expiry > nowSeconds) continue;
      this.tatLists.delete(expiry);
      const keys = list.keys;
      for (let i = list.head; i < keys.length; i++) {
        const key = keys[i]!;
        const tat = this.counts.get(key);
        if (tat === undefined) continue;
        const end = tatEndSeconds(tat);
        if (end > nowSeconds) this.listTat(key, end);
        else if (this.counts.delete(key)) dropped++;
      }
    }
    return dropped;
  }

  /** Lists a token-bucket key at the second its bucket is full again. */
  private listTat(key: string, endSeconds: number): void {
    const list = this.tatLists.get(endSeconds);
    if (list === undefined)
      this.tatLists.set(endSeconds, { keys: [key], head: 0 });
    else list.keys.push(key);
  }

  /**
   * Drops `count` live counters, from the windows that end soonest, oldest first; a token
   * bucket counts as ending when it is full again (one whose TAT moved later since it was
   * listed is listed again, not dropped).
   */
  private evict(count: number): void {
    let evicted = 0;
    while (evicted < count) {
      let soonest: number | undefined;
      for (const expiry of this.buckets.keys())
        if (soonest === undefined || expiry < soonest) soonest = expiry;
      let tats = false;
      for (const expiry of this.tatLists.keys())
        if (soonest === undefined || expiry < soonest) {
          soonest = expiry;
          tats = true;
        }
      if (soonest === undefined) break;
      const lists = tats ? this.tatLists : this.buckets;
      const bucket = lists.get(soonest)!;
      const keys = bucket.keys;
      while (evicted < count && bucket.head < keys.length) {
        const key = keys[bucket.head++]!;
        if (tats) {
          const tat = this.counts.get(key);
          if (tat === undefined) continue;
          // Re-listed at a later second: it terminates, each key moving strictly later.
          const end = tatEndSeconds(tat);
          if (end > soonest) {
            this.listTat(key, end);
            continue;
          }
        }
        if (this.counts.delete(key)) evicted++;
      }
      if (bucket.head >= keys.length) lists.delete(soonest);
      // Drop the consumed prefix now and then, so a long-lived bucket does not keep it.
      else if (bucket.head > 4096 && bucket.head * 2 > keys.length) {
        keys.splice(0, bucket.head);
        bucket.head = 0;
      }
    }
    if (evicted > 0) this.onEvict?.(evicted);
  }
}
