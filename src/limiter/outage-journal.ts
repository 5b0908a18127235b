import type { CounterBackend, CounterSlot } from "./counter-backend.js";

/**
 * What the `local` failure mode charged to one counter while the store was failing: the hits
 * to add to the store's counter of the same cache key when it answers again.
 */
interface JournalEntry {
  readonly slot: CounterSlot;
  hits: number;
  /** Until then (seconds since the epoch) the store's counter still matters. */
  readonly liveUntilSeconds: number;
}

/**
 * The hits the `local` failure mode counted while the kv or mc store was failing, by cache
 * key, so they can be added to the store's counters when it answers again
 * (docs/failure-modes.md#nothing-lost). Only windows still open are kept: a fixed window's
 * counter until the window ends, a sliding window's one window more (the next window still
 * weighs it).
 *
 * Memory: one entry per distinct counter charged during the outage (the local limiter holds
 * the same keys); entries of ended windows are dropped at every {@link OutageJournal.take}.
 */
export class OutageJournal {
  private entries = new Map<string, JournalEntry>();

  /** Distinct counters waiting to be replayed. */
  get size(): number {
    return this.entries.size;
  }

  /**
   * Records the increments of a local charge; a negative increment (an undo) takes back hits
   * recorded before, never below 0.
   *
   * @param nowSeconds - the request time, seconds since the Unix epoch
   */
  record(slots: readonly CounterSlot[], nowSeconds: number): void {
    for (const slot of slots) {
      const hits = slot.increment;
      if (hits === 0) continue;
      const entry = this.entries.get(slot.cacheKey);
      if (entry !== undefined) {
        entry.hits = Math.max(0, entry.hits + hits);
        continue;
      }
      if (hits < 0) continue;
      const window = slot.windowSeconds;
      const windowEnd =
        window > 0 ? (Math.floor(nowSeconds / window) + 1) * window : 0;
      this.entries.set(slot.cacheKey, {
        slot: {
          cacheKey: slot.cacheKey,
          previousCacheKey: undefined,
          perSecond: slot.perSecond,
          // The store's own lifetime rule without the jitter: the window, two for sliding.
          expirationSeconds: window * (slot.sliding ? 2 : 1),
          windowSeconds: window,
          sliding: slot.sliding,
          requestsPerUnit: slot.requestsPerUnit,
          shadowMode: slot.shadowMode,
          increment: 0,
          current: 0,
          previous: 0,
        },
        hits,
        liveUntilSeconds: windowEnd + (slot.sliding ? window : 0),
      });
    }
  }

  /**
   * Empties the journal and returns the counters of windows still open at `nowSeconds`, each
   * slot's `increment` set to the hits to add.
   */
  take(nowSeconds: number): CounterSlot[] {
    const out: CounterSlot[] = [];
    for (const entry of this.entries.values()) {
      if (entry.liveUntilSeconds <= nowSeconds || entry.hits === 0) continue;
      entry.slot.increment = entry.hits;
      out.push(entry.slot);
    }
    this.entries = new Map();
    return out;
  }

  /** Puts back slots taken by {@link take} whose replay failed (merged with newer hits). */
  restore(slots: readonly CounterSlot[], nowSeconds: number): void {
    for (const slot of slots) {
      const hits = slot.increment;
      slot.increment = 0;
      const entry = this.entries.get(slot.cacheKey);
      if (entry !== undefined) entry.hits += hits;
      else {
        const window = slot.windowSeconds;
        const windowEnd =
          window > 0 ? (Math.floor(nowSeconds / window) + 1) * window : 0;
        this.entries.set(slot.cacheKey, {
          slot,
          hits,
          liveUntilSeconds: windowEnd + (slot.sliding ? window : 0),
        });
      }
    }
  }
}

/**
 * A {@link CounterBackend} that forwards to `inner` (the local limiter's memory backend) and
 * records in `journal` what each charge added: the counting of the `local` failure mode's
 * answers. Reads (peek) are not recorded.
 *
 * @param inner - the backend that counts (shared with the local limiter's unrecorded pipeline)
 */
export function recordingBackend(
  inner: CounterBackend,
  journal: OutageJournal,
): CounterBackend {
  return {
    inProcess: inner.inProcess ?? false,
    increment(slots, nowSeconds) {
      const done = inner.increment(slots, nowSeconds);
      if (done === undefined) {
        journal.record(slots, nowSeconds);
        return undefined;
      }
      return done.then(() => {
        journal.record(slots, nowSeconds);
      });
    },
    peek: (slots) => inner.peek(slots),
    add(slots, nowSeconds) {
      const done = inner.add(slots, nowSeconds);
      if (done === undefined) {
        journal.record(slots, nowSeconds);
        return undefined;
      }
      return done.then(() => {
        journal.record(slots, nowSeconds);
      });
    },
    ...(inner.chargeAllOrNothing !== undefined
      ? {
          chargeAllOrNothing(slots, nowSeconds, fits) {
            const charged = inner.chargeAllOrNothing?.(slots, nowSeconds, fits);
            if (charged === undefined) return undefined;
            if (typeof charged === "boolean") {
              if (charged) journal.record(slots, nowSeconds);
              return charged;
            }
            return charged.then((ok) => {
              if (ok) journal.record(slots, nowSeconds);
              return ok;
            });
          },
        }
      : {}),
    flush: () => inner.flush(),
    close: () => inner.close(),
  };
}
