/**
 * Hot-key leases (`lease: true`, issue 33 item 2; docs/configuration.md#leases): a modifier of
 * the window kinds (fixed, multi-unit, calendar, sliding), not a kind of its own. Per cache key
 * and window, a replica takes n hits of the current window with one store increment, keeps the
 * ones that fit under the limit, and admits from them in process until they are spent; then
 * the next call takes a new lease.
 *
 * **Guarantee.** A hit is admitted only from hits the store granted, and the store grants a hit
 * only while its counter (every replica's leases and direct counts included) is under the
 * limit, so a window never admits more than its limit across replicas and workers. What a
 * lease still holds when its window ends is never admitted: under-admission per window is at
 * most replicas × workers × `lease_max` (each table holds at most `lease_max` unspent hits per
 * key).
 *
 * **Clipping.** An increment of n that returns the value v found `v − n` hits before it, so
 * `fit = max(0, min(n, room − (v − n)))` of them are under the limit (`room` is the limit, less
 * the previous window's weighted count for sliding windows); the rest are never admitted.
 *
 * **Sizing.** n is about {@link LeaseTableOptions.leaseSpanMs} (50 ms) of the key's traffic as
 * this table saw it since its last lease, at least the hits the calling and the queued calls
 * need, at most `lease_max`; the first lease of a window takes only what the calls need.
 */
import type { Lease } from "../config/lease.js";
import type { RateLimit } from "../config/rate-limit-config.js";
import type { Clock } from "../util/clock.js";
import { weightedCount } from "./algorithms.js";
import type { CounterBackend, CounterSlot } from "./counter-backend.js";
import type { PlannedDescriptor } from "./request-plan.js";

/** Options of {@link LeaseTable}. */
export interface LeaseTableOptions {
  /** The store a lease is taken from, with one `increment` of n hits. */
  readonly backend: Pick<CounterBackend, "increment">;
  /** Time source for the rate a lease is sized by (`nowMs`). */
  readonly clock: Clock;
  /**
   * How much of a key's observed traffic one lease covers, in ms, > 0.
   * @defaultValue 50
   */
  readonly leaseSpanMs?: number;
}

/** The lease of one cache key (one window) in this table. */
interface LeaseEntry {
  readonly cacheKey: string;
  readonly windowEndSeconds: number;
  readonly lease: Lease;
  /** Granted hits not admitted yet (≤ `lease.max`). */
  remaining: number;
  /**
   * The window's count as the last lease saw it: the store's value before it plus the hits of
   * it that fit (`v − n + fit`); the answer's count is `base − remaining`.
   */
  base: number;
  /** Sliding windows: the previous window's counter, as the last lease read it. */
  previous: number;
  /** Hits asked of this entry since its last lease was taken (the rate's numerator). */
  demand: number;
  /** Hits of the callers waiting for the lease being taken. */
  queued: number;
  /** When the last lease was taken, ms since the Unix epoch; -1 before the first. */
  takenAtMs: number;
  /** The lease being taken; callers on this key wait for it (one store call at a time). */
  taking: Promise<void> | undefined;
  /**
   * Until when (seconds since the Unix epoch) a call that the lease cannot serve is refused
   * without a store call: set when a lease was clipped (the store had no room), for at most
   * one second so that refunds elsewhere and a sliding window's shrinking weight are seen.
   */
  fullUntilSeconds: number;
}

/** A copy of a plan entry's slot for the lease's own increment (its `increment` is n). */
function leaseSlot(d: PlannedDescriptor, n: number): CounterSlot {
  return {
    cacheKey: d.cacheKey,
    previousCacheKey: d.previousCacheKey,
    perSecond: d.perSecond,
    expirationSeconds: d.expirationSeconds,
    windowSeconds: d.windowSeconds,
    windowEndSeconds: d.windowEndSeconds,
    sliding: d.sliding,
    requestsPerUnit: d.requestsPerUnit,
    shadowMode: d.shadowMode,
    increment: n,
    current: 0,
    previous: 0,
  };
}

/** The previous window's weighted count (sliding windows), 0 for fixed windows. */
function previousWeight(
  limit: RateLimit,
  previous: number,
  nowSeconds: number,
): number {
  return previous === 0 ? 0 : weightedCount(limit, 0, previous, nowSeconds);
}

/**
 * The leases of one pipeline (one worker): one {@link LeaseEntry} per leased cache key of a
 * live window. Entries of ended windows are dropped at the first call after their end, their
 * unspent hits counted in `lease_unused`. Memory: one entry per leased key with traffic in the
 * current window.
 */
export class LeaseTable {
  private readonly backend: Pick<CounterBackend, "increment">;
  private readonly clock: Clock;
  private readonly spanMs: number;
  private readonly entries = new Map<string, LeaseEntry>();
  /** The earliest window end among the entries (Infinity when none): when to sweep next. */
  private nextSweepSeconds = Infinity;

  /** @throws RangeError when `leaseSpanMs` is not a number > 0 */
  constructor(options: LeaseTableOptions) {
    this.backend = options.backend;
    this.clock = options.clock;
    const span = options.leaseSpanMs ?? 50;
    if (!(span > 0) || !Number.isFinite(span))
      throw new RangeError(
        `invalid leaseSpanMs ${String(span)}: expected a number of ms > 0`,
      );
    this.spanMs = span;
  }

  /** Number of live entries (tests, runtime statistics). */
  get size(): number {
    return this.entries.size;
  }

  /** Unspent hits this table holds for a cache key (0 when it has no lease on it). */
  unspent(cacheKey: string): number {
    return this.entries.get(cacheKey)?.remaining ?? 0;
  }

  /**
   * Charges a plan entry of a leased limit (`d.limit.lease` set, `d.hitsAddend` ≥ 0): admits
   * its hits from this table's lease on its cache key, taking a new lease when that one cannot
   * serve them, and leaves the answer's counters in `d.current` and `d.previous` (as an
   * increment would: within the limit when admitted, over it when refused). Hits above
   * `lease_max` are counted directly with one increment of their own (a lease never holds
   * more than `lease_max`), and so are checks of 0 hits. May finish synchronously (served from
   * the lease).
   *
   * @throws {@link BackendError} (a rejected promise) when the lease's increment fails; the
   *   callers waiting on that lease get the same error
   */
  take(d: PlannedDescriptor, nowSeconds: number): void | Promise<void> {
    const lease = d.limit.lease!;
    if (nowSeconds >= this.nextSweepSeconds) this.sweep(nowSeconds);
    // Hits above lease_max, and checks of 0 hits (a read: the store's counter answers), go to
    // the store as without a lease.
    if (d.hitsAddend > lease.max || d.hitsAddend === 0)
      return this.direct(d, nowSeconds);
    let entry = this.entries.get(d.cacheKey);
    if (entry === undefined) {
      entry = {
        cacheKey: d.cacheKey,
        windowEndSeconds: d.windowEndSeconds,
        lease,
        remaining: 0,
        base: 0,
        previous: 0,
        demand: 0,
        queued: 0,
        takenAtMs: -1,
        taking: undefined,
        fullUntilSeconds: 0,
      };
      this.entries.set(d.cacheKey, entry);
      if (d.windowEndSeconds < this.nextSweepSeconds)
        this.nextSweepSeconds = d.windowEndSeconds;
    }
    entry.demand += d.hitsAddend;
    return this.spend(entry, d, nowSeconds);
  }

  /**
   * Gives a refund (`d.hitsAddend` < 0) of a leased limit back to this table's lease on its
   * key first: up to what the lease can hold (`lease_max`) and never below a count of 0. The
   * answer's counters go to `d.current` and `d.previous` when the lease took all of it.
   *
   * @returns the hits (≥ 0) still to give back to the store: all of them when the table has no
   *   lease on the key (or one being taken)
   */
  refund(d: PlannedDescriptor): number {
    const back = -d.hitsAddend;
    const entry = this.entries.get(d.cacheKey);
    if (entry?.taking !== undefined || entry === undefined) return back;
    const count = entry.base - entry.remaining;
    const local = Math.max(
      0,
      Math.min(back, count, entry.lease.max - entry.remaining),
    );
    entry.remaining += local;
    if (local > 0) entry.fullUntilSeconds = 0;
    d.current = entry.base - entry.remaining;
    d.previous = entry.previous;
    return back - local;
  }

  /**
   * Drops every entry, counting the hits they still hold in `lease_unused` (a config swap or
   * shutdown: those hits are never admitted).
   */
  clear(): void {
    for (const entry of this.entries.values())
      entry.lease.unused.add(entry.remaining);
    this.entries.clear();
    this.nextSweepSeconds = Infinity;
  }

  /** Serves `d` from the entry's lease, waiting for one being taken or taking a new one. */
  private spend(
    entry: LeaseEntry,
    d: PlannedDescriptor,
    nowSeconds: number,
  ): void | Promise<void> {
    const hits = d.hitsAddend;
    const taking = entry.taking;
    if (taking !== undefined) {
      // Queued hits are demand the next lease must cover, beside the rate.
      entry.queued += hits;
      return taking.then(
        () => {
          entry.queued -= hits;
          return this.spend(entry, d, nowSeconds);
        },
        (err: unknown) => {
          entry.queued -= hits;
          throw err;
        },
      );
    }
    if (entry.remaining >= hits) {
      entry.remaining -= hits;
      this.admitted(entry, d);
      return;
    }
    if (entry.fullUntilSeconds > nowSeconds) {
      this.refused(entry, d, nowSeconds);
      return;
    }
    const taken = this.takeLease(entry, d, hits - entry.remaining, nowSeconds);
    entry.taking = taken;
    // The taker's continuation is attached first, so it is served from its own lease before
    // any caller that waited on it.
    return taken.then(() => {
      if (entry.remaining >= hits) {
        entry.remaining -= hits;
        this.admitted(entry, d);
      } else this.refused(entry, d, nowSeconds);
    });
  }

  /**
   * Takes a new lease of at least `need` hits (≤ `lease_max`) for the entry: one increment,
   * clipped to what fits. Clears `entry.taking` when done, failed or not.
   */
  private async takeLease(
    entry: LeaseEntry,
    d: PlannedDescriptor,
    need: number,
    nowSeconds: number,
  ): Promise<void> {
    const lease = entry.lease;
    const nowMs = this.clock.nowMs();
    // The caller's need plus the hits of callers queued behind it, at least.
    let n = need + entry.queued;
    if (entry.takenAtMs >= 0) {
      // About spanMs of the traffic seen since the last lease (at least 1 ms of it).
      const elapsedMs = Math.max(1, nowMs - entry.takenAtMs);
      n = Math.max(n, Math.ceil((entry.demand * this.spanMs) / elapsedMs));
    }
    // The entry never holds more than lease_max unspent hits (the under-admission bound);
    // need ≤ lease_max − remaining, since a call's hits are at most lease_max.
    n = Math.min(lease.max - entry.remaining, Math.max(1, n));
    entry.takenAtMs = nowMs;
    entry.demand = 0;
    const slot = leaseSlot(d, n);
    try {
      await this.backend.increment([slot], nowSeconds);
    } finally {
      entry.taking = undefined;
    }
    const before = slot.current - n;
    const room =
      d.limit.requestsPerUnit -
      previousWeight(d.limit, slot.previous, nowSeconds);
    const fit = Math.max(0, Math.min(n, room - before));
    entry.remaining += fit;
    entry.base = before + fit;
    entry.previous = slot.previous;
    entry.fullUntilSeconds =
      fit < n ? Math.min(entry.windowEndSeconds, nowSeconds + 1) : 0;
    lease.taken.add(fit);
  }

  /** The counters of an admitted call: the count so far, within the limit. */
  private admitted(entry: LeaseEntry, d: PlannedDescriptor): void {
    d.current = entry.base - entry.remaining;
    d.previous = entry.previous;
  }

  /**
   * The counters of a refused call: its hits on top of the count, and at least one over the
   * limit at the current weight (a sliding window's previous part only shrinks), so the status
   * is OVER_LIMIT.
   */
  private refused(
    entry: LeaseEntry,
    d: PlannedDescriptor,
    nowSeconds: number,
  ): void {
    const limit = d.limit;
    const weighted =
      previousWeight(limit, entry.previous, nowSeconds) +
      entry.base -
      entry.remaining +
      d.hitsAddend;
    d.current = Math.max(weighted, limit.requestsPerUnit + 1);
    d.previous = 0;
  }

  /** Hits above `lease_max` or 0 hits: one increment of their own, answered from its value. */
  private async direct(
    d: PlannedDescriptor,
    nowSeconds: number,
  ): Promise<void> {
    await this.backend.increment([d], nowSeconds);
  }

  /** Drops the entries of ended windows, counting their unspent hits in `lease_unused`. */
  private sweep(nowSeconds: number): void {
    let next = Infinity;
    for (const [cacheKey, entry] of this.entries) {
      if (entry.windowEndSeconds <= nowSeconds && entry.taking === undefined) {
        entry.lease.unused.add(entry.remaining);
        this.entries.delete(cacheKey);
      } else if (entry.windowEndSeconds < next) next = entry.windowEndSeconds;
    }
    this.nextSweepSeconds = next;
  }
}
