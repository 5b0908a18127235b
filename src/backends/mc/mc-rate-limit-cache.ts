import type { Logger } from "pino";
import type { RateLimit } from "../../config/rate-limit-config.js";
import {
  lazyCompensatedCounter,
  chargesAllOrNothing,
  checkThenIncrement,
} from "../../limiter/all-or-nothing.js";
import type { BaseLimiter } from "../../limiter/base-limiter.js";
import { CacheKeyError } from "../../limiter/cache-key-error.js";
import type { CacheKey } from "../../limiter/cache-key.js";
import type { Counter } from "../../stats/stats-store.js";
import { counterReadings, readingKeys } from "../../limiter/counter-reading.js";
import type {
  CounterReading,
  RateLimitCache,
} from "../../limiter/rate-limit-cache.js";
import type {
  RateLimitDescriptor,
  RateLimitResponse_DescriptorStatus,
} from "../../proto.js";
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
 * The memcached-protocol backend (`BACKEND_TYPE=mc`, experimental), port of upstream
 * `memcached/cache_impl.go`: per request, descriptors known over limit in the local cache are
 * answered without a round trip; the other cache keys are read with one multi-get per node;
 * each descriptor is decided at once with `after = stored value + hits`; then the counters are
 * incremented in the background (created with the hits and an expiration of one unit plus
 * jitter when missing), so a client may briefly exceed its quota under exactly simultaneous
 * requests (spec "Memcached-protocol backend settings"). {@link flush} and {@link close} wait
 * for those increments. Domains charged all-or-nothing are decided by a check-then-increment
 * with compensation instead, whose increments are awaited (docs/mc-backend.md).
 *
 * Node failures fail open as upstream does: the node's keys read as 0, the request succeeds,
 * the failure is logged and counted in `ratelimit.mc.*`. Unlike upstream, a descriptor whose
 * cache key memcached cannot hold (over 250 bytes, whitespace or control characters) fails its
 * request with {@link CacheKeyError} before any counter is touched, and MONTH/YEAR counters
 * live for their window (behavior.md "Where we deliberately differ" item 3).
 * `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` does not apply, as upstream.
 */
export class McRateLimitCache implements RateLimitCache {
  private readonly base: BaseLimiter;
  private readonly logger: Logger;
  private readonly client: McClient;
  /** Counters of the memcached operations (`ratelimit.mc.*`). */
  readonly stats: McStats;
  /**
   * `ratelimit.all_or_nothing.compensated`, as the kv backend's; allocated on the first
   * compensation, so without all-or-nothing domains the statistics are unchanged.
   */
  private readonly compensated: Pick<Counter, "add">;
  private pendingIncrements = 0;
  private flushWaiters: (() => void)[] = [];
  private closing: Promise<void> | undefined;

  /**
   * @throws {@link RangeError} when the options are invalid (see
   *   {@link resolveMcBackendOptions})
   */
  constructor(options: McBackendOptions) {
    const resolved = resolveMcBackendOptions(options);
    this.base = resolved.baseLimiter;
    this.logger = resolved.logger;
    this.stats = createMcStats(resolved.statsStore);
    this.compensated = lazyCompensatedCounter(resolved.statsStore)!;
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
   * Decides a request; see the class description.
   *
   * @throws {@link CacheKeyError} when a descriptor's cache key is over 250 bytes or holds
   *   whitespace or control characters (nothing is read or written then); `total_hits` of the
   *   request's descriptors has been counted, as for a backend failure
   */
  async doLimit(
    domain: string,
    descriptors: readonly RateLimitDescriptor[],
    limits: readonly (RateLimit | undefined)[],
    hitsAddends: readonly number[],
  ): Promise<RateLimitResponse_DescriptorStatus[]> {
    const base = this.base;
    const now = base.nowSeconds();
    const keys = base.generateCacheKeys(
      domain,
      descriptors,
      limits,
      hitsAddends,
      now,
    );
    const n = descriptors.length;
    // Check every key before touching any counter or stat, so a bad descriptor changes nothing.
    for (let i = 0; i < n; i++) {
      const cacheKey = keys[i]?.key;
      if (cacheKey === undefined) continue;
      const problem = mcKeyProblem(cacheKey);
      if (problem !== undefined) {
        throw keyError(
          problem,
          i,
          domain,
          descriptors[i]!,
          limits[i]!,
          cacheKey,
        );
      }
    }
    if (chargesAllOrNothing(limits))
      return this.doLimitAllOrNothing(keys, limits, hitsAddends, now);
    const statuses = new Array<RateLimitResponse_DescriptorStatus>(n);
    const fetched: number[] = [];
    const fetchKeys: string[] = [];
    let previousKeys: string[] | undefined;
    for (let i = 0; i < n; i++) {
      const cacheKey = keys[i]?.key;
      if (cacheKey === undefined) {
        statuses[i] = base.okWithoutLimit();
      } else if (base.isOverLimitWithLocalCache(cacheKey)) {
        statuses[i] = base.localCacheStatus(limits[i]!, hitsAddends[i]!, now);
      } else {
        fetched.push(i);
        fetchKeys.push(cacheKey);
        // Sliding windows: the previous window's counter comes in the same multi-get.
        const previousKey = keys[i]!.previousKey;
        if (previousKey !== undefined) (previousKeys ??= []).push(previousKey);
      }
    }
    if (fetched.length === 0) return statuses;

    // The service traces the whole round trip as one span.
    const found = await this.client.getMulti(
      previousKeys === undefined ? fetchKeys : [...fetchKeys, ...previousKeys],
    );
    const increments = new Array<McIncrement>(fetched.length);
    for (let j = 0; j < fetched.length; j++) {
      const i = fetched[j]!;
      const cacheKey = fetchKeys[j]!;
      const limit = limits[i]!;
      const hits = hitsAddends[i]!;
      const stored = found.get(cacheKey);
      const before =
        stored === undefined ? 0 : this.counterValue(stored, cacheKey);
      statuses[i] = limit.sliding
        ? base.counterStatus(
            cacheKey,
            limit,
            before + hits,
            this.storedCounter(found, keys[i]!.previousKey),
            hits,
            now,
            true,
          )
        : base.descriptorStatus(cacheKey, limit, before + hits, hits, now);
      increments[j] = {
        key: cacheKey,
        hits,
        expiration: toMcExpiration(base.expirationSeconds(limit), now),
      };
    }
    // Background work, tracked so flush()/close() can wait for it (upstream runs it on a
    // worker queue after answering).
    this.pendingIncrements++;
    this.client.incrementMulti(increments, () => {
      if (--this.pendingIncrements > 0 || this.flushWaiters.length === 0)
        return;
      const waiters = this.flushWaiters;
      this.flushWaiters = [];
      for (const resolve of waiters) resolve();
    });
    return statuses;
  }

  /**
   * Reads the counters with one multi-get per node without changing them (see
   * {@link RateLimitCache.peekCounters}); keys known over limit in the local cache, and keys
   * memcached cannot hold, are not read (they read as 0). Node failures read as 0, as in
   * `doLimit`.
   */
  async peekCounters(
    domain: string,
    descriptors: readonly RateLimitDescriptor[],
    limits: readonly (RateLimit | undefined)[],
  ): Promise<(CounterReading | undefined)[]> {
    const read = readingKeys(this.base, domain, descriptors, limits);
    const fetchKeys: string[] = [];
    read.keys.forEach((k, i) => {
      if (k === undefined || read.localCacheHits?.[i] === true) return;
      if (mcKeyProblem(k.key) !== undefined) return;
      fetchKeys.push(k.key);
      // Sliding windows: the previous window's counter, as doLimit reads it.
      if (k.previousKey !== undefined) fetchKeys.push(k.previousKey);
    });
    const found =
      fetchKeys.length === 0
        ? new Map<string, Buffer>()
        : await this.client.getMulti(fetchKeys);
    const values = read.keys.map((k) => {
      const stored = k === undefined ? undefined : found.get(k.key);
      return stored === undefined || k === undefined
        ? 0
        : this.counterValue(stored, k.key);
    });
    const previous = read.keys.map((k) =>
      this.storedCounter(found, k?.previousKey),
    );
    return counterReadings(read, limits, values, previous);
  }

  /**
   * All-or-nothing charging (`charge: all_or_nothing`, docs/configuration.md), a
   * check-then-increment with compensation ({@link checkThenIncrement}): one multi-get of
   * every counter (and previous window); when all fit, the increments are sent and their
   * replies awaited (the increment that answers with the new value; a missing counter is
   * created with the hits and its expiration, as in the default mode); if a value after the
   * increment shows another request took the budget in between (the race window is the time
   * between the read and the increment), the increments this request applied are undone with
   * decrements (never creating a counter; memcached floors them at 0), the request is refused
   * and `ratelimit.all_or_nothing.compensated` counts it. A descriptor known over limit in the
   * local cache (not in shadow mode) refuses the request; its other counters are only read.
   * Fails open as the default mode: counters of a failing node read as 0, and an increment
   * without a reply counts as fitting (its value is taken as read + hits).
   */
  private doLimitAllOrNothing(
    keys: readonly (CacheKey | undefined)[],
    limits: readonly (RateLimit | undefined)[],
    hitsAddends: readonly number[],
    now: number,
  ): Promise<RateLimitResponse_DescriptorStatus[]> {
    const base = this.base;
    const n = keys.length;
    const cached = base.localCacheHits(keys);
    let applied: McDecrement[] | undefined;
    return checkThenIncrement(
      base,
      keys,
      limits,
      hitsAddends,
      cached,
      now,
      {
        read: async () => {
          const reads: string[] = [];
          for (let i = 0; i < n; i++) {
            const k = keys[i];
            if (k === undefined || cached?.[i] === true) continue;
            reads.push(k.key);
            if (k.previousKey !== undefined) reads.push(k.previousKey);
          }
          const found =
            reads.length === 0
              ? new Map<string, Buffer>()
              : await this.client.getMulti(reads);
          const current = new Array<number>(n).fill(0);
          const previous = new Array<number>(n).fill(0);
          for (let i = 0; i < n; i++) {
            const k = keys[i];
            if (k === undefined || cached?.[i] === true) continue;
            current[i] = this.storedCounter(found, k.key);
            previous[i] = this.storedCounter(found, k.previousKey);
          }
          return { current, previous };
        },
        increment: async (before) => {
          const increments: McIncrement[] = [];
          const indexes: number[] = [];
          for (let i = 0; i < n; i++) {
            const k = keys[i];
            if (k === undefined || cached?.[i] === true) continue;
            increments.push({
              key: k.key,
              hits: hitsAddends[i]!,
              expiration: toMcExpiration(
                base.expirationSeconds(limits[i]!),
                now,
              ),
            });
            indexes.push(i);
          }
          const after = new Array<number>(n).fill(0);
          if (increments.length === 0) return after;
          const values = await this.client.incrementMultiValues(increments);
          const undo: McDecrement[] = [];
          for (let j = 0; j < indexes.length; j++) {
            const i = indexes[j]!;
            const value = values[j];
            const hits = hitsAddends[i]!;
            // Fail-open: no reply, take the value as read (the check said it fits).
            after[i] = value ?? before.current[i]! + hits;
            if (value !== undefined && hits > 0)
              undo.push({ key: increments[j]!.key, hits });
          }
          applied = undo;
          return after;
        },
        undo: () =>
          applied === undefined || applied.length === 0
            ? Promise.resolve()
            : this.client.decrementMulti(applied),
      },
      this.compensated,
    );
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

  /** Resolves once every background increment started so far has finished or failed. */
  flush(): Promise<void> {
    if (this.pendingIncrements === 0) return Promise.resolve();
    return new Promise((resolve) => {
      this.flushWaiters.push(resolve);
    });
  }

  /** Waits for pending increments, stops the timers and closes the connections; idempotent. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      await this.flush();
      await this.client.close();
    })();
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

/** Builds the error naming the part of the descriptor that makes its cache key illegal. */
function keyError(
  problem: "too-long" | "illegal-character",
  index: number,
  domain: string,
  descriptor: RateLimitDescriptor,
  limit: RateLimit,
  cacheKey: string,
): CacheKeyError {
  const entries = descriptor.entries;
  const shared = limit.shareThresholdValues;
  const where = `descriptors[${index}]`;
  if (problem === "illegal-character") {
    const bad = hasIllegalKeyCharacter;
    for (let j = 0; j < entries.length; j++) {
      const entry = entries[j]!;
      const value = shared?.[j] ?? entry.value;
      const field = bad(entry.key) ? "key" : bad(value) ? "value" : undefined;
      if (field === undefined) continue;
      const text = field === "key" ? entry.key : value;
      return new CacheKeyError(
        index,
        `${where}.entries[${j}].${field} ${quote(text)} contains whitespace or control characters, which the memcached-protocol backend cannot store in a cache key`,
      );
    }
    const culprit = bad(domain)
      ? `domain ${quote(domain)}`
      : "the cache key prefix";
    return new CacheKeyError(
      index,
      `${where}: ${culprit} contains whitespace or control characters, which the memcached-protocol backend cannot store in a cache key`,
    );
  }
  let longest = 0;
  let longestName = "";
  for (let j = 0; j < entries.length; j++) {
    const entry = entries[j]!;
    const value = shared?.[j] ?? entry.value;
    for (const [field, text] of [
      ["key", entry.key],
      ["value", value],
    ] as const) {
      const bytes = Buffer.byteLength(text);
      if (bytes > longest) {
        longest = bytes;
        longestName = `entries[${j}].${field}`;
      }
    }
  }
  return new CacheKeyError(
    index,
    `${where}: its cache key is ${Buffer.byteLength(cacheKey)} bytes, over the ${maxMcKeyBytes} the memcached-protocol backend allows (longest part: ${where}.${longestName}, ${longest} bytes)`,
  );
}

function quote(text: string): string {
  return JSON.stringify(text.length > 64 ? `${text.slice(0, 64)}…` : text);
}
