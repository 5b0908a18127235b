/**
 * The counter backend interface: the I/O half of a decision. A backend (memory, kv, mc) only
 * reads and writes counters; the decision pipeline (`pipeline.ts`) decides. Backends import
 * this file, the two error files and the token-bucket maths (`gcra.ts`, `gcra-scripts.ts`) and
 * nothing else of `limiter/`.
 */
import type { GcraDecision, GcraParams } from "./gcra.js";

/**
 * One counter of one request, as a backend sees it: what to write and where the backend puts
 * what it read. The pipeline builds one per descriptor with a limit (the request plan's
 * descriptors implement it) and passes the ones the local cache did not answer; a backend
 * fills {@link CounterSlot.current} and {@link CounterSlot.previous}.
 */
export interface CounterSlot {
  /** The cache key, as stored (docs/reference-parity.md#cache-key). */
  readonly cacheKey: string;
  /**
   * Sliding windows: the previous window's cache key, read (never written) with the current
   * one; undefined for fixed windows.
   */
  readonly previousCacheKey: string | undefined;
  /** SECOND limits: the per-second instance holds the counter when one is configured. */
  readonly perSecond: boolean;
  /**
   * Lifetime of a counter a write creates, in seconds: the window (two windows for sliding
   * windows) plus the expiration jitter. Stores with expiries (kv, mc) use it; 0 for
   * in-process backends, which expire a counter with its window.
   */
  readonly expirationSeconds: number;
  /**
   * Window length in seconds: windows start at its multiples since the Unix epoch; for a
   * calendar window (`time_zone`), the length of the current period (23–25 h for a day, 28–31
   * days for a month, …).
   */
  readonly windowSeconds: number;
  /**
   * When the current window ends, seconds since the Unix epoch (exclusive): the window start
   * plus `windowSeconds`. A store that expires counters itself (memory) or computes the time
   * left in the window (the kv all-or-nothing script) reads this, never `now mod window`, so
   * that calendar windows expire where their period ends.
   */
  readonly windowEndSeconds: number;
  /** Whether the limit counts with a sliding window (the counter lives two windows). */
  readonly sliding: boolean;
  /** `requests_per_unit` of the limit (the store-side all-or-nothing check reads it). */
  readonly requestsPerUnit: number;
  /** Whether the limit is in shadow mode (it never refuses an all-or-nothing request). */
  readonly shadowMode: boolean;
  /**
   * What the next write adds to the counter: the hits addend, 0 when the pipeline stops the
   * increment, negative to take back a compensated all-or-nothing charge. A backend that could
   * not confirm a write of {@link CounterBackend.add} sets it to 0, so an undo skips it.
   */
  increment: number;
  /** Filled by the backend: the current window's counter (after the write, for writes). */
  current: number;
  /** Filled by the backend: the previous window's counter (sliding windows; else 0). */
  previous: number;
}

/**
 * One token bucket (`algorithm: token_bucket`) of one request, as a backend sees it: the
 * bucket's key and GCRA parameters, the hits to take, and where the backend puts the decision.
 * The stored value at `cacheKey` is the bucket's theoretical arrival time (TAT) as a decimal
 * integer of µs since the Unix epoch, identical on every backend (see `gcra-scripts.ts`).
 */
export interface BucketSlot {
  /** The bucket's cache key (`<stem>tb<window>_<rate>_<burst>`). */
  readonly cacheKey: string;
  /** SECOND rates: the per-second instance holds the bucket when one is configured. */
  readonly perSecond: boolean;
  /** The bucket's GCRA parameters; always set on slots passed to {@link CounterBackend.takeTokens}. */
  readonly tokenBucket: GcraParams | undefined;
  /**
   * Hits to decide: > 0 to take (all or none), 0 to read the state without writing, < 0 to
   * give back (a refund, or the undo of an all-or-nothing charge).
   */
  increment: number;
  /**
   * Filled by the backend: the decision `gcraDecide(stored TAT, nowUs, increment, params)`,
   * applied atomically with the write of its new TAT.
   */
  decision: GcraDecision | undefined;
}

/**
 * Storage rules a backend imposes on cache keys (mc: at most 250 bytes, no whitespace or
 * control characters); a request with a key that breaks them fails with a
 * {@link CacheKeyError} before any counter is read or written.
 */
export interface CacheKeyRules {
  /** The backend named in the error text, e.g. "the memcached-protocol backend". */
  readonly backendLabel: string;
  /** Longest cache key in UTF-8 bytes. */
  readonly maxKeyBytes: number;
  /** Returns what is wrong with a cache key, or undefined when it can be stored. */
  problem(cacheKey: string): "too-long" | "illegal-character" | undefined;
  /** Whether a part of a key (entry key or value, domain) holds a forbidden character. */
  hasIllegalCharacter(text: string): boolean;
}

/**
 * The I/O a decision needs from a counter store. Every method takes the request's slots (in
 * request order, only those the local cache did not answer, never empty) and fills their
 * `current` / `previous` fields; it may finish synchronously (memory) or return a promise.
 *
 * @throws {@link BackendError} (or a rejected promise with one) when the store fails
 */
export interface CounterBackend {
  /**
   * The usual charge: adds each slot's `increment` to its counter (creating it with
   * `expirationSeconds`), and fills `current` with the value after it and, for sliding
   * windows, `previous` with the previous window's counter. A backend may apply the write
   * after answering (see {@link CounterBackend.flush}); mc answers from its increments' values.
   *
   * @param nowSeconds - the request time, seconds since the Unix epoch
   */
  increment(
    slots: readonly CounterSlot[],
    nowSeconds: number,
  ): void | Promise<void>;
  /** Reads `current` and `previous` (sliding windows) without changing any counter. */
  peek(slots: readonly CounterSlot[]): void | Promise<void>;
  /**
   * The write of a check-then-increment (all-or-nothing charging where the store cannot do it
   * atomically), and of refunds: adds each slot's `increment` and waits for the store; fills
   * `current` with the value after it. Leaves `previous` alone. A negative increment (an undo
   * of a lost all-or-nothing race, or a refund) subtracts, never below 0, and never creates a
   * counter (a missing one stays missing and reads 0).
   *
   * @param nowSeconds - the request time, seconds since the Unix epoch
   */
  add(slots: readonly CounterSlot[], nowSeconds: number): void | Promise<void>;
  /**
   * The atomic all-or-nothing charge, where the store can do it in one step: reads every
   * slot's counters, and adds every `increment` only when `fits(slots)` holds for the values
   * read (kv runs the same rule as a script in the store). Fills `current` with the value
   * after the charge when charged, before it otherwise, and `previous`.
   *
   * @returns whether the request was charged, or undefined when this store cannot do it
   *   atomically for these slots (then nothing was read or written, and the pipeline falls
   *   back to a check-then-increment with compensation)
   */
  chargeAllOrNothing?(
    slots: readonly CounterSlot[],
    nowSeconds: number,
    fits: (slots: readonly CounterSlot[]) => boolean,
  ): boolean | Promise<boolean> | undefined;
  /**
   * Token buckets (GCRA): for each slot, one atomic step in the store that reads the stored
   * TAT, decides `increment` hits with `gcraDecide` at `nowUs`, and stores the new TAT when it
   * changes (with a lifetime until the bucket is full: an absent key is a full bucket); fills
   * `decision`. An increment of 0 only reads. kv runs `gcraScript` (one script call per
   * slot, pipelined with the request's other commands), mc loops on compare-and-swap around
   * `gcraCasStep`, memory calls `gcraDecide` directly. Slots are independent: one slot's
   * refusal does not stop the others (all-or-nothing is the pipeline's business).
   *
   * @param nowUs - the request time, integer µs since the Unix epoch (`clock.nowMs() × 1000`)
   */
  takeTokens(slots: readonly BucketSlot[], nowUs: number): void | Promise<void>;
  /**
   * The counters live in this process (memory), so a read costs nothing: a read-only peek
   * reads the keys the local cache knows over limit too, which remote stores skip; and no
   * expiration is drawn for its slots (it expires a counter with its window).
   * @defaultValue false
   */
  readonly inProcess?: boolean;
  /** Cache-key rules to check before any I/O; undefined: every key can be stored. */
  readonly cacheKeyRules?: CacheKeyRules;
  /**
   * Connects and waits until the store answers, retrying as the backend's options say; the
   * service opens its listeners only after it resolves. Absent for in-process backends.
   */
  start?(): Promise<void>;
  /** Waits for pending background writes (none for synchronous backends). */
  flush(): Promise<void>;
  /** Flushes and releases connections and timers; idempotent. */
  close(): Promise<void>;
}
