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
 * Adds counters to the store's (the guarded backend's `add`); each slot's `increment` is the
 * hits to add.
 */
export type ReplayWrite = (
  slots: readonly CounterSlot[],
  nowSeconds: number,
) => void | Promise<void>;

/** What one {@link OutageJournal.replay} did. */
export type ReplayOutcome =
  | { readonly ok: true; readonly counters: number; readonly hits: number }
  | {
      readonly ok: false;
      readonly counters: number;
      readonly hits: number;
      /** Why the write failed (its rejection or throw); the counters are kept. */
      readonly error: unknown;
    };

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
  private replaying = false;

  /** Distinct counters waiting to be replayed. */
  get size(): number {
    return this.entries.size;
  }

  /**
   * Records the increments of a local charge; a negative increment (an undo, a refund) takes
   * back hits recorded before, never below 0. Each counter lives until its slot's window
   * ends (`windowEndSeconds`; a sliding window's one window later).
   */
  record(slots: readonly CounterSlot[]): void {
    for (const slot of slots) {
      const hits = slot.increment;
      if (hits !== 0) this.add(slot, hits, true);
    }
  }

  /**
   * Takes back a local charge the store counted after all (a call in doubt that it answered
   * late): each slot's increment is subtracted from its counter's hits, never below 0. A
   * counter already taken by a replay is not touched (that hit stays over-counted).
   *
   * @param slots - the charged slots, each with the increment the charge recorded
   */
  takeBack(slots: readonly CounterSlot[]): void {
    for (const slot of slots) {
      const hits = slot.increment;
      if (hits > 0) this.add(slot, -hits, false);
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

  /**
   * Adds the counters of windows still open at `nowSeconds` to the store's through `write`, in
   * the background, when the store answers again: the journal is emptied first (hits recorded
   * meanwhile wait for the next replay), and a failed write puts its counters back, merged with
   * newer hits, for the next recovery. One replay at a time.
   *
   * @returns undefined when a replay is running or nothing is to replay, else a promise that
   *   resolves (never rejects) once `write` has settled
   */
  replay(
    write: ReplayWrite,
    nowSeconds: number,
  ): Promise<ReplayOutcome> | undefined {
    if (this.replaying || this.entries.size === 0) return undefined;
    const slots = this.take(nowSeconds);
    if (slots.length === 0) return undefined;
    this.replaying = true;
    const counters = slots.length;
    const hits = slots.reduce((sum, slot) => sum + slot.increment, 0);
    return Promise.resolve()
      .then(() => write(slots, nowSeconds))
      .then(
        (): ReplayOutcome => {
          this.replaying = false;
          return { ok: true, counters, hits };
        },
        (error: unknown): ReplayOutcome => {
          this.restore(slots);
          this.replaying = false;
          return { ok: false, counters, hits, error };
        },
      );
  }

  /** Puts back slots taken by {@link take} whose replay failed (merged with newer hits). */
  restore(slots: readonly CounterSlot[]): void {
    for (const slot of slots) {
      const hits = slot.increment;
      slot.increment = 0;
      this.add(slot, hits, false);
    }
  }

  /**
   * Adds `hits` to the entry of `slot`'s cache key (never below 0); creates it for positive
   * hits, keeping a copy of the slot (`copy`, for a request's slot) or the slot itself (one
   * taken from this journal).
   */
  private add(slot: CounterSlot, hits: number, copy: boolean): void {
    const entry = this.entries.get(slot.cacheKey);
    if (entry !== undefined) {
      entry.hits = Math.max(0, entry.hits + hits);
      return;
    }
    if (hits < 0) return;
    const window = slot.windowSeconds;
    const windowEnd = slot.windowEndSeconds;
    this.entries.set(slot.cacheKey, {
      slot: copy ? replaySlot(slot) : slot,
      hits,
      // A sliding window's counter still weighs in the next window.
      liveUntilSeconds: windowEnd + (slot.sliding ? window : 0),
    });
  }
}

/** A slot for the replay of `slot`'s counter (no previous key, the increment set at take). */
function replaySlot(slot: CounterSlot): CounterSlot {
  const window = slot.windowSeconds;
  return {
    cacheKey: slot.cacheKey,
    previousCacheKey: undefined,
    perSecond: slot.perSecond,
    // The store's own lifetime rule without the jitter: the window, two for sliding.
    expirationSeconds: window * (slot.sliding ? 2 : 1),
    windowSeconds: window,
    windowEndSeconds: slot.windowEndSeconds,
    sliding: slot.sliding,
    requestsPerUnit: slot.requestsPerUnit,
    shadowMode: slot.shadowMode,
    increment: 0,
    current: 0,
    previous: 0,
  };
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
  /** Records `slots` once `done` (the inner write) has finished. */
  const recorded = (
    done: void | Promise<void>,
    slots: readonly CounterSlot[],
  ): void | Promise<void> => {
    if (done === undefined) {
      journal.record(slots);
      return undefined;
    }
    return done.then(() => {
      journal.record(slots);
    });
  };
  return {
    inProcess: inner.inProcess ?? false,
    increment: (slots, nowSeconds) =>
      recorded(inner.increment(slots, nowSeconds), slots),
    peek: (slots) => inner.peek(slots),
    // Token buckets are not journaled: a bucket's state is one time (its TAT), not a count
    // that adds up, so an outage's token-bucket charges stay in the local limiter only
    // (docs/failure-modes.md#nothing-lost).
    takeTokens: (slots, nowUs) => inner.takeTokens(slots, nowUs),
    add: (slots, nowSeconds) => recorded(inner.add(slots, nowSeconds), slots),
    ...(inner.chargeAllOrNothing !== undefined
      ? {
          chargeAllOrNothing(slots, nowSeconds, fits) {
            const charged = inner.chargeAllOrNothing?.(slots, nowSeconds, fits);
            if (charged === undefined) return undefined;
            if (typeof charged === "boolean") {
              if (charged) journal.record(slots);
              return charged;
            }
            return charged.then((ok) => {
              if (ok) journal.record(slots);
              return ok;
            });
          },
        }
      : {}),
    flush: () => inner.flush(),
    close: () => inner.close(),
  };
}
