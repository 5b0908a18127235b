import type { Logger } from "pino";
import { BackendError } from "../../limiter/backend-error.js";
import type {
  BucketSlot,
  CacheKeyRules,
  CounterBackend,
  CounterSlot,
} from "../../limiter/counter-backend.js";
import type { GcraParams } from "../../limiter/gcra.js";
import { gcraCasStep } from "../../limiter/gcra-scripts.js";
import { createMcStats, McClient, type McStats } from "./mc-client.js";
import type { McDecrement, McIncrement } from "./mc-connection.js";
import {
  hasIllegalKeyCharacter,
  maxMcKeyBytes,
  mcKeyProblem,
  toMcExpiration,
} from "./mc-keys.js";
import {
  resolveMcBackendOptions,
  type McBackendOptions,
} from "./mc-options.js";

/** Largest counter value upstream parses (Go `strconv.ParseInt(value, 10, 32)`). */
const maxCounterValue = 2_147_483_647;

/**
 * Attempts of one token-bucket decision's compare-and-swap loop: only requests for the same
 * bucket contend, and each lost attempt means another decision on it was stored, so a handful
 * is plenty; running out is a store failure (the failure mode answers).
 */
export const maxCasAttempts = 8;

const decimalDigits = /^[0-9]+$/;

/**
 * The answers of one exact charge ({@link McCounterBackend.increment}): each slot's counter
 * after its own increment, from the values memcached returned for the increments sent in slot
 * order (one per slot, those of one key in order on one connection).
 *
 * For slot j on key k, let `c` be the sum of the increments of the slots on k up to and
 * including j whose value came back; `base = value − c` is what k held before this call's
 * increments (with the hits of any concurrent call that came first), and the answer is
 * `base + increment_j`. The first slot on a key therefore answers the value returned. Later
 * slots on the same key answer `base + their own increment`, not the running sum: slots of one
 * call on one key do not see each other's increments, as in the reference, which reads every
 * counter once before it increments (`ReadOnlyBackendOptions.incrementAccumulates` is false
 * for mc). Without concurrent calls, `base` is the stored value the reference reads, so the
 * answers are the reference's.
 *
 * A slot without a value (the increment failed: node down, non-numeric counter) answers its
 * increment alone, as the reference reads a failed node or an unparsable value as 0. A base
 * over 2^31 − 1 is read as 0 (the reference's int32 parse), after calling `onTooLarge`.
 *
 * @param slots - the slots, in the order their increments were sent (`cacheKey` and
 *   `increment`, hits ≥ 0, are read)
 * @param values - parallel to `slots`: each counter's value after its increment, or undefined
 *   where the increment failed
 * @param onTooLarge - called with the cache key and the base read as 0
 * @returns parallel to `slots`: the counter to decide each slot on (`current`)
 */
export function countersAfterIncrements(
  slots: readonly Pick<CounterSlot, "cacheKey" | "increment">[],
  values: readonly (number | undefined)[],
  onTooLarge: (cacheKey: string, base: number) => void = () => undefined,
): number[] {
  const currents = new Array<number>(slots.length);
  // Hits of this call applied so far per key; only needed when a key repeats.
  let applied: Map<string, number> | undefined;
  for (let j = 0; j < slots.length; j++) {
    const { cacheKey, increment } = slots[j]!;
    const value = values[j];
    if (value === undefined) {
      currents[j] = increment;
      continue;
    }
    let before = 0;
    if (applied !== undefined || slots.length > 1) {
      applied ??= new Map();
      before = applied.get(cacheKey) ?? 0;
      applied.set(cacheKey, before + increment);
    }
    let base = value - before - increment;
    if (base > maxCounterValue) {
      onTooLarge(cacheKey, base);
      base = 0;
    } else if (base < 0) {
      // Not from a memcached that counts as documented; never answer below the own hits.
      base = 0;
    }
    currents[j] = base + increment;
  }
  return currents;
}

/** What memcached can hold as a key: at most 250 bytes, no whitespace or control characters. */
const mcCacheKeyRules: CacheKeyRules = Object.freeze({
  backendLabel: "the memcached-protocol backend",
  maxKeyBytes: maxMcKeyBytes,
  problem: mcKeyProblem,
  hasIllegalCharacter: hasIllegalKeyCharacter,
});

/**
 * The memcached-protocol backend (`BACKEND_TYPE=mc`, experimental), port of upstream
 * `memcached/cache_impl.go` with exact counting. The usual charge increments the counters
 * with the binary protocol's increment that answers with the new value (created with the hits
 * and an expiration of one unit plus jitter when missing) and answers from the values it
 * returns ({@link increment}): one round trip, atomic per counter, so concurrent calls on one
 * key never admit more than the limit. Upstream reads, answers `stored + hits`, then
 * increments in the background; without concurrency both answer and store the same
 * (docs/reference-parity.md#diff-mc-exact). All-or-nothing charging has no atomic
 * multi-key operation here: the pipeline runs a check-then-increment over {@link peek} and
 * {@link add} (docs/mc-backend.md).
 *
 * Node failures fail open as upstream does: the node's keys read as 0, the request succeeds,
 * the failure is logged and counted in `ratelimit.mc.*`. Unlike upstream, a cache key
 * memcached cannot hold (over 250 bytes, whitespace or control characters) fails its request
 * with a `CacheKeyError` before any counter is touched ({@link cacheKeyRules}), and MONTH/YEAR
 * counters live for their window (docs/reference-parity.md#deliberate-differences).
 * `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` does not apply, as upstream.
 *
 * Token buckets (an extension, no upstream behaviour to keep) are a compare-and-swap loop per
 * bucket ({@link takeTokens}) and never fail open: a node failure rejects with
 * `BackendError`, so the failure mode answers.
 */
export class McCounterBackend implements CounterBackend {
  private readonly logger: Logger;
  private readonly client: McClient;
  /** Counters of the memcached operations (`ratelimit.mc.*`). */
  readonly stats: McStats;
  readonly cacheKeyRules = mcCacheKeyRules;
  /** `failOpen` of the options: whether a failed node's counters answer as 0 plus the hits. */
  private readonly failOpen: boolean;
  private closing: Promise<void> | undefined;
  /** `onTooLarge` of {@link countersAfterIncrements}: one function, not one per decision. */
  private readonly warnTooLarge = (cacheKey: string, base: number): void => {
    this.logger.warn(
      { cacheKey, value: base },
      "memcached counter over 2^31 - 1; reading it as 0",
    );
  };

  /**
   * @throws {@link RangeError} when the options are invalid (see
   *   {@link resolveMcBackendOptions})
   */
  constructor(options: McBackendOptions) {
    const resolved = resolveMcBackendOptions(options);
    this.logger = resolved.logger;
    this.failOpen = resolved.failOpen;
    this.stats = createMcStats(resolved.statsStore);
    this.client = new McClient(resolved, this.stats);
  }

  /** The ordered node list in force. */
  get nodes(): string[] {
    return this.client.addresses;
  }

  /**
   * Resolves `MC_SRV` (when set), probes the nodes once for the health component and starts
   * the probe and SRV refresh timers. Resolves even when no node answers (fail-open).
   *
   * @throws {@link BackendError} when the initial SRV lookup fails
   */
  start(): Promise<void> {
    return this.client.start();
  }

  /**
   * The usual charge, exact under concurrency: each counter is incremented with the binary
   * protocol's increment that answers with the new value (one batch per connection in use;
   * a missing counter is created with the hits and its expiration in the same operation),
   * and `current` is computed from the value returned ({@link countersAfterIncrements}).
   * Sliding windows' previous counters are read with a multi-get sent at the same time, so a
   * decision costs one round trip either way. Without concurrency the answers, keys, values
   * and expirations are the reference's (which reads, answers `stored + hits`, then increments
   * in the background); under concurrent calls on one key each call sees the others' hits, so
   * no window admits more than its limit (docs/reference-parity.md#diff-mc-exact).
   *
   * Failures fail open as the reference's read does: an increment without a value (node down,
   * no node, non-numeric or unparsable counter) answers as a counter of 0 plus the hits.
   *
   * @param nowSeconds - the request time, seconds since the Unix epoch
   * @throws {@link BackendError} when `failOpen` is false and a node failed (or there is none)
   */
  async increment(
    slots: readonly CounterSlot[],
    nowSeconds: number,
  ): Promise<void> {
    const increments = new Array<McIncrement>(slots.length);
    let previousKeys: string[] | undefined;
    for (let j = 0; j < slots.length; j++) {
      const slot = slots[j]!;
      increments[j] = {
        key: slot.cacheKey,
        hits: slot.increment,
        expiration: toMcExpiration(slot.expirationSeconds, nowSeconds),
      };
      if (slot.previousCacheKey !== undefined)
        (previousKeys ??= []).push(slot.previousCacheKey);
    }
    const [values, previous] = await Promise.all([
      this.client.incrementMultiValues(increments, this.failOpen),
      previousKeys === undefined
        ? undefined
        : this.client.getMulti(previousKeys),
    ]);
    const currents = countersAfterIncrements(slots, values, this.warnTooLarge);
    for (let j = 0; j < slots.length; j++) {
      const slot = slots[j]!;
      slot.current = currents[j]!;
      slot.previous =
        previous === undefined
          ? 0
          : this.storedCounter(previous, slot.previousCacheKey);
    }
  }

  /**
   * Reads the counters (and previous windows') with one multi-get per node, without changing
   * them. Node failures read as 0.
   */
  async peek(slots: readonly CounterSlot[]): Promise<void> {
    let reads: string[] | undefined;
    const fetchKeys = new Array<string>(slots.length);
    for (let j = 0; j < slots.length; j++) {
      const slot = slots[j]!;
      fetchKeys[j] = slot.cacheKey;
      // Sliding windows: the previous window's counter comes in the same multi-get.
      if (slot.previousCacheKey !== undefined)
        (reads ??= []).push(slot.previousCacheKey);
    }
    const found = await this.client.getMulti(
      reads === undefined ? fetchKeys : [...fetchKeys, ...reads],
    );
    for (const slot of slots) {
      slot.current = this.storedCounter(found, slot.cacheKey);
      slot.previous = this.storedCounter(found, slot.previousCacheKey);
    }
  }

  /**
   * The awaited write of a check-then-increment: a positive increment is sent as the
   * increment that answers with the new value (a missing counter is created with the hits and
   * its expiration); without a reply the value is taken as read + increment (fail-open) and
   * the slot's increment set to 0, so an undo skips it. A negative increment (an undo, a
   * refund) is a decrement, never creating a counter; memcached floors it at 0. The counters
   * after the decrements are read back (one multi-get) into `current`; `previous` is left
   * alone.
   */
  async add(slots: readonly CounterSlot[], nowSeconds: number): Promise<void> {
    if (slots.some((slot) => slot.increment < 0)) {
      const undo: McDecrement[] = [];
      for (const slot of slots)
        if (slot.increment < 0)
          undo.push({ key: slot.cacheKey, hits: -slot.increment });
      await this.client.decrementMulti(undo);
      // Read back the current counters only: `previous` stays as it was (the contract), which
      // a peek would overwrite for sliding windows.
      const found = await this.client.getMulti(
        slots.map((slot) => slot.cacheKey),
      );
      for (const slot of slots)
        slot.current = this.storedCounter(found, slot.cacheKey);
      return;
    }
    const increments = slots.map((slot) => ({
      key: slot.cacheKey,
      hits: slot.increment,
      expiration: toMcExpiration(slot.expirationSeconds, nowSeconds),
    }));
    const values = await this.client.incrementMultiValues(increments);
    for (let j = 0; j < slots.length; j++) {
      const slot = slots[j]!;
      const value = values[j];
      slot.current = value ?? slot.current + slot.increment;
      if (value === undefined) slot.increment = 0;
    }
  }

  /** The stored counter of `key` in a multi-get result; 0 when absent or no key. */
  private storedCounter(
    found: ReadonlyMap<string, Buffer>,
    key: string | undefined,
  ): number {
    if (key === undefined) return 0;
    const stored = found.get(key);
    return stored === undefined ? 0 : this.counterValue(stored, key);
  }

  /**
   * Token buckets: per slot, the compare-and-swap loop of `gcraCasStep` (`gcra-scripts.ts`):
   * read the TAT with its CAS token, decide, store the new TAT with that token (or ADD it
   * when the key was missing), and start again when another writer came first, at most
   * {@link maxCasAttempts} times. Buckets of different keys run concurrently (their commands
   * share the connections' writes); slots of one key run in slot order. The value is the TAT
   * as decimal µs, as kv and memory store it; one that is not (unreadable) reads as a full
   * bucket and is replaced. Expirations over 30 days are sent as a Unix time.
   *
   * @param nowUs - the request time, integer µs since the Unix epoch
   * @throws {@link BackendError} when a node fails or answers unusably (never fail-open
   *   here), or a bucket's attempts run out
   * @throws TypeError when a slot has no `tokenBucket` params (a caller's bug; nothing sent)
   */
  async takeTokens(slots: readonly BucketSlot[], nowUs: number): Promise<void> {
    for (const slot of slots)
      if (slot.tokenBucket === undefined)
        throw new TypeError(
          `token bucket slot ${slot.cacheKey} has no tokenBucket params`,
        );
    const nowSeconds = Math.floor(nowUs / 1_000_000);
    if (slots.length === 1) {
      const slot = slots[0]!;
      await this.takeToken(slot, slot.tokenBucket!, nowUs, nowSeconds);
      return;
    }
    // One chain per key: a key's slots are decided in order, different keys at once.
    const chains = new Map<string, Promise<void>>();
    for (const slot of slots) {
      const before = chains.get(slot.cacheKey);
      const params = slot.tokenBucket!;
      chains.set(
        slot.cacheKey,
        before === undefined
          ? this.takeToken(slot, params, nowUs, nowSeconds)
          : before.then(() => this.takeToken(slot, params, nowUs, nowSeconds)),
      );
    }
    // allSettled first, so that no chain is left rejecting unobserved.
    const outcomes = await Promise.allSettled(chains.values());
    for (const outcome of outcomes)
      if (outcome.status === "rejected") throw outcome.reason;
  }

  /** One bucket's compare-and-swap loop (see {@link takeTokens}). */
  private async takeToken(
    slot: BucketSlot,
    params: GcraParams,
    nowUs: number,
    nowSeconds: number,
  ): Promise<void> {
    const key = slot.cacheKey;
    for (let attempt = 0; attempt < maxCasAttempts; attempt++) {
      const found = await this.client.gets(key);
      const step = gcraCasStep(
        found === undefined ? undefined : this.storedTat(found.value, key),
        nowUs,
        slot.increment,
        params,
      );
      if (step.write === undefined) {
        slot.decision = step.decision;
        return;
      }
      const value = step.write.toString();
      const expiration = toMcExpiration(step.expirationSeconds, nowSeconds);
      // A missing key is created only if still missing; a present one (even unreadable)
      // replaced only if unchanged since read.
      const stored =
        found === undefined
          ? await this.client.add(key, value, expiration)
          : await this.client.cas(key, value, expiration, found.cas);
      if (stored) {
        slot.decision = step.decision;
        return;
      }
    }
    throw new BackendError(
      "mc",
      `token bucket ${key}: ${maxCasAttempts} compare-and-swap attempts in a row lost to concurrent writers`,
    );
  }

  /**
   * Parses a stored TAT: decimal µs. Anything else is logged and read as a full bucket (as the
   * kv script reads it), then replaced by the next write.
   */
  private storedTat(stored: Buffer, cacheKey: string): bigint | undefined {
    const text = stored.toString("latin1");
    if (decimalDigits.test(text)) return BigInt(text);
    this.logger.warn(
      { cacheKey, value: text.slice(0, 32) },
      "unexpected non-numeric token bucket value in memcached; reading it as a full bucket",
    );
    return undefined;
  }

  /**
   * Resolves at once: every write is awaited by the call that sent it (the decisions' own
   * increments included), so nothing runs in the background.
   */
  flush(): Promise<void> {
    return Promise.resolve();
  }

  /**
   * Stops the timers and closes the connections, letting pending operations finish (up to
   * the operation timeout); idempotent.
   */
  close(): Promise<void> {
    this.closing ??= this.client.close();
    return this.closing;
  }

  /**
   * Parses a stored counter: decimal digits (trailing spaces, which memcached may leave after
   * a decrement, are ignored). Anything else, or a value over 2^31 − 1, is logged and read as
   * 0, as upstream's int32 parse does.
   */
  private counterValue(stored: Buffer, cacheKey: string): number {
    let value = 0;
    let end = stored.length;
    while (end > 0 && stored[end - 1] === 0x20) end--;
    let valid = end > 0;
    for (let i = 0; i < end && valid; i++) {
      const digit = stored[i]! - 0x30;
      if (digit < 0 || digit > 9) valid = false;
      else value = value * 10 + digit;
    }
    if (valid && value <= maxCounterValue) return value;
    this.logger.warn(
      {
        cacheKey,
        value: stored.toString("latin1", 0, Math.min(stored.length, 32)),
      },
      "unexpected non-numeric value in memcached; reading it as 0",
    );
    return 0;
  }
}
