/**
 * A read-only {@link CounterBackend}: it reads the counters and token buckets of the store it
 * wraps and answers every write as the store would answer it, without writing. What a write
 * would have stored is kept in memory (one overlay per adapter, so one adapter per request),
 * so later operations of the same request see it, as they would see the store's write. The
 * Explain API runs the decision pipeline over one (issue 32 item 4): the pipeline's own
 * charge modes, sequencing and statuses then say what a charge would do, changing nothing.
 *
 * The arithmetic of a write is the store's contract (`counter-backend.ts`): `increment` and
 * `add` add the slot's increment (a negative `add` never below 0); token buckets are decided
 * by {@link gcraDecide} on the TAT read, as every store decides them. A key the store cannot
 * hold (its `cacheKeyRules`) is not read and counts from 0, rather than failing the request.
 * What the store itself held stays readable ({@link ReadOnlyCounterBackend.storedValue},
 * {@link ReadOnlyCounterBackend.bucketReading}) for Explain's counter and bucket fields.
 */
import type {
  BucketSlot,
  CacheKeyRules,
  CounterBackend,
  CounterSlot,
} from "./counter-backend.js";
import { gcraDecide } from "./gcra.js";

/** Options of {@link ReadOnlyCounterBackend}. */
export interface ReadOnlyBackendOptions {
  /**
   * Whether two slots of one `increment` call with the same cache key see each other's
   * increments, as memory and kv do; mc reads every counter before it increments, so each
   * slot sees only its own. Writes of `add` always accumulate. @defaultValue true
   */
  readonly incrementAccumulates?: boolean;
}

/** Runs `then` after `step`, synchronously when `step` finished synchronously. */
function andThen(
  step: void | Promise<void>,
  then: () => void,
): void | Promise<void> {
  if (step instanceof Promise) return step.then(then);
  then();
}

/** What {@link ReadOnlyCounterBackend.bucketReading} says of one bucket slot. */
export interface BucketReading {
  /** The TAT the store holds, as its decisions meet it: `max(stored TAT, now)`, µs. */
  readonly storedUs: number;
  /**
   * The TAT the slot's first decision met, µs: the stored one, or the one an earlier slot of
   * the request would have stored on the same key.
   */
  readonly metUs: number;
}

/** The read-only adapter (see the file comment); one per request. */
export class ReadOnlyCounterBackend implements CounterBackend {
  readonly inProcess: boolean;
  private readonly store: CounterBackend;
  private readonly rules: CacheKeyRules | undefined;
  /** What the store holds per counter read, before this request's writes. */
  private readonly stored = new Map<string, number>();
  /** Per bucket slot decided, the TATs of its first decision. */
  private readonly buckets = new WeakMap<BucketSlot, BucketReading>();
  private readonly accumulates: boolean;
  /** What the writes answered so far would have added to each counter. */
  private readonly added = new Map<string, number>();
  /** The TAT the token-bucket writes answered so far would have stored, µs. */
  private readonly tats = new Map<string, number>();

  /** @param store - the store read; nothing is ever written to it */
  constructor(store: CounterBackend, options: ReadOnlyBackendOptions = {}) {
    this.store = store;
    this.inProcess = store.inProcess === true;
    this.rules = store.cacheKeyRules;
    this.accumulates = options.incrementAccumulates ?? true;
  }

  /**
   * What the store holds at `cacheKey` (0 when absent or not storable), as first read by this
   * request; undefined when the request never read it.
   */
  storedValue(cacheKey: string): number | undefined {
    return this.stored.get(cacheKey);
  }

  /** The TATs a bucket slot's first decision met; undefined when it was never decided. */
  bucketReading(slot: BucketSlot): BucketReading | undefined {
    return this.buckets.get(slot);
  }

  /** Reads `current` and `previous` from the store, with this request's writes applied. */
  peek(slots: readonly CounterSlot[]): void | Promise<void> {
    const rules = this.rules;
    const read =
      rules === undefined
        ? slots
        : slots.filter((slot) => rules.problem(slot.cacheKey) === undefined);
    if (read !== slots)
      for (const slot of slots) {
        slot.current = 0;
        slot.previous = 0;
      }
    return andThen(read.length > 0 ? this.store.peek(read) : undefined, () => {
      for (const slot of slots) {
        if (!this.stored.has(slot.cacheKey))
          this.stored.set(slot.cacheKey, slot.current);
        slot.current += this.added.get(slot.cacheKey) ?? 0;
        if (slot.previousCacheKey !== undefined)
          slot.previous += this.added.get(slot.previousCacheKey) ?? 0;
      }
    });
  }

  /** The usual charge, answered as the store answers it: the value after each increment. */
  increment(
    slots: readonly CounterSlot[],
    _nowSeconds: number,
  ): void | Promise<void> {
    return andThen(this.peek(slots), () => {
      const call = new Map<string, number>();
      for (const slot of slots) {
        const earlier = call.get(slot.cacheKey) ?? 0;
        if (this.accumulates) slot.current += earlier;
        slot.current += slot.increment;
        call.set(slot.cacheKey, earlier + slot.increment);
      }
      this.keep(call);
    });
  }

  /**
   * The awaited write: each slot's increment in slot order, a negative one never below 0;
   * `previous` is left alone, as the store leaves it.
   */
  add(
    slots: readonly CounterSlot[],
    _nowSeconds: number,
  ): void | Promise<void> {
    const previous = slots.map((slot) => slot.previous);
    return andThen(this.peek(slots), () => {
      const call = new Map<string, number>();
      slots.forEach((slot, j) => {
        slot.previous = previous[j]!;
        const earlier = call.get(slot.cacheKey) ?? 0;
        const before = slot.current + earlier;
        const after = Math.max(0, before + slot.increment);
        slot.current = after;
        call.set(slot.cacheKey, earlier + after - before);
      });
      this.keep(call);
    });
  }

  /** The atomic all-or-nothing charge: a read, the check, and the writes when it passes. */
  chargeAllOrNothing(
    slots: readonly CounterSlot[],
    nowSeconds: number,
    fits: (slots: readonly CounterSlot[]) => boolean,
  ): Promise<boolean> {
    return Promise.resolve(this.peek(slots)).then(() => {
      if (!fits(slots)) return false;
      // The values read are before the charge; add() reads them again and adds.
      return Promise.resolve(this.add(slots, nowSeconds)).then(() => true);
    });
  }

  /**
   * Token buckets: reads each bucket (a take of 0 hits, which writes nothing) and decides the
   * slot's increment on the TAT read, or the TAT an earlier slot of this request would have
   * stored, with {@link gcraDecide}, as every store does.
   */
  takeTokens(
    slots: readonly BucketSlot[],
    nowUs: number,
  ): void | Promise<void> {
    const reads: BucketSlot[] = slots.map((slot) => ({
      cacheKey: slot.cacheKey,
      perSecond: slot.perSecond,
      tokenBucket: slot.tokenBucket,
      increment: 0,
      decision: undefined,
    }));
    return andThen(this.store.takeTokens(reads, nowUs), () => {
      slots.forEach((slot, j) => {
        const params = slot.tokenBucket;
        if (params === undefined)
          throw new TypeError(
            `token bucket slot ${slot.cacheKey} has no tokenBucket params`,
          );
        const storedUs = reads[j]!.decision?.tatUs ?? nowUs;
        const metUs = this.tats.get(slot.cacheKey) ?? storedUs;
        if (!this.buckets.has(slot))
          this.buckets.set(slot, { storedUs, metUs });
        const decision = gcraDecide(metUs, nowUs, slot.increment, params);
        if (decision.newTatUs !== undefined)
          this.tats.set(slot.cacheKey, decision.newTatUs);
        slot.decision = decision;
      });
    });
  }

  /** Nothing is pending: nothing is written. */
  flush(): Promise<void> {
    return Promise.resolve();
  }

  /** Leaves the store open: it belongs to the pipeline that serves ShouldRateLimit. */
  close(): Promise<void> {
    return Promise.resolve();
  }

  /** Keeps what one call's writes added, for the request's later reads. */
  private keep(call: ReadonlyMap<string, number>): void {
    for (const [key, delta] of call)
      this.added.set(key, (this.added.get(key) ?? 0) + delta);
  }
}
