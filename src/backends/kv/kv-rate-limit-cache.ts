import type { RateLimit } from "../../config/rate-limit-config.js";
import type { HealthChecker } from "../../health/health.js";
import {
  lazyCompensatedCounter,
  statusesOf,
  anySliding,
  chargesAllOrNothing,
  checkThenIncrement,
  type RequestCounters,
} from "../../limiter/all-or-nothing.js";
import type { BaseLimiter } from "../../limiter/base-limiter.js";
import type { CacheKey } from "../../limiter/cache-key.js";
import { counterReadings, readingKeys } from "../../limiter/counter-reading.js";
import type {
  CounterReading,
  RateLimitCache,
} from "../../limiter/rate-limit-cache.js";
import type {
  RateLimitDescriptor,
  RateLimitResponse_DescriptorStatus,
} from "../../proto.js";
import type { Counter } from "../../stats/stats-store.js";
import { KvClient, type KvStartupOptions } from "./kv-client.js";
import {
  resolveKvBackendOptions,
  type KvBackendOptions,
} from "./kv-options.js";

/** The keys of one request that go to one instance, with what to send for each. */
interface InstanceWork {
  readonly cacheKeys: string[];
  readonly hitsAddends: number[];
  readonly expirationSeconds: number[];
  /** Descriptor index of each key. */
  readonly indexes: number[];
  /**
   * Sliding windows: parallel to `cacheKeys` (holes for fixed windows), the previous
   * window's key to read in the same pipeline; undefined when the request has none.
   */
  previousKeys: (string | undefined)[] | undefined;
}

const emptyWork = (): InstanceWork => ({
  cacheKeys: [],
  hitsAddends: [],
  expirationSeconds: [],
  indexes: [],
  previousKeys: undefined,
});

/**
 * The key-value store backend (`BACKEND_TYPE=kv`): fixed-window counters in a store speaking
 * the Redis protocol, byte-compatible with the reference so both services can share live
 * counters (upstream `redis/fixed_cache_impl.go`): per request, one pipeline per instance of
 * `INCRBY <cacheKey> <hitsAddend>` + `EXPIRE <cacheKey> <unit + jitter>` per descriptor with a
 * limit; SECOND limits go to the per-second instance when one is configured (main pipeline
 * first, then per-second); keys the local cache knows over limit are not sent.
 *
 * Health: registers the `backend` component as healthy; with `healthCheckActiveConnection` it
 * turns unhealthy while an instance has no connection up, healthy again on reconnect.
 */
export class KvRateLimitCache implements RateLimitCache {
  private readonly base: BaseLimiter;
  private readonly main: KvClient;
  private readonly perSecond: KvClient | undefined;
  private readonly stopIncrementWhenOverlimit: boolean;
  private readonly startup: KvStartupOptions;
  private readonly compensated: Pick<Counter, "add"> | undefined;
  private closing: Promise<void> | undefined;

  /**
   * Creates the clients without connecting; {@link KvRateLimitCache.start} connects.
   *
   * @throws {@link KvOptionsError} when an option is invalid
   */
  constructor(options: KvBackendOptions) {
    const resolved = resolveKvBackendOptions(options);
    this.base = options.baseLimiter;
    this.stopIncrementWhenOverlimit =
      resolved.stopCacheKeyIncrementWhenOverlimit;
    this.startup = {
      initialIntervalMs: resolved.startupInitialIntervalMs,
      maxIntervalMs: resolved.startupMaxIntervalMs,
      maxElapsedTimeMs: resolved.startupMaxElapsedTimeMs,
    };
    this.compensated = lazyCompensatedCounter(options.statsStore);
    const health = options.health;
    health?.register("backend", true);
    const followHealth =
      resolved.healthCheckActiveConnection && health !== undefined;
    const onConnectionChange = followHealth
      ? () => {
          this.updateHealth(health);
        }
      : undefined;
    const logger = options.logger.child({ component: "kv" });
    const common = {
      ...(options.tls !== undefined ? { tls: options.tls } : {}),
      ...(options.statsStore !== undefined
        ? { statsStore: options.statsStore }
        : {}),
      ...(options.clock !== undefined ? { clock: options.clock } : {}),
      ...(options.random !== undefined ? { random: options.random } : {}),
      ...(onConnectionChange !== undefined ? { onConnectionChange } : {}),
    };
    this.main = new KvClient({
      ...common,
      instance: resolved.main,
      role: "main",
      logger: logger.child({ instance: "main" }),
    });
    this.perSecond =
      resolved.perSecond === undefined
        ? undefined
        : new KvClient({
            ...common,
            instance: resolved.perSecond,
            role: "per-second",
            logger: logger.child({ instance: "per-second" }),
          });
    logger.info(
      {
        url: resolved.main.maskedUrl,
        type: resolved.main.type,
        ...(resolved.perSecond !== undefined
          ? { perSecondUrl: resolved.perSecond.maskedUrl }
          : {}),
      },
      "kv backend created",
    );
  }

  /**
   * Connects both instances and waits until each answers PING, retrying with backoff
   * (`KV_STARTUP_*`, behavior.md §8.6 step 6); main first, then per-second.
   *
   * @throws {@link BackendError} after `startupMaxElapsedTimeMs` (> 0) without an answer; the
   *   cache is closed then
   */
  async start(): Promise<void> {
    try {
      await this.main.start(this.startup);
      await this.perSecond?.start(this.startup);
    } catch (err) {
      await this.close();
      throw err;
    }
  }

  /**
   * Counts the hits of one request (upstream `fixed_cache_impl.go` `DoLimit`).
   *
   * @throws {@link BackendError} when the store fails or no connection is up in time;
   *   `total_hits` was already counted, as upstream
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
    if (chargesAllOrNothing(limits))
      return this.doLimitAllOrNothing(keys, limits, hitsAddends, now);
    // Keys the local cache knows to be over limit are answered without the store.
    const cached = base.localCacheHits(keys);
    const increments = this.stopIncrementWhenOverlimit
      ? await this.incrementsWhenStopping(
          keys,
          limits,
          hitsAddends,
          cached,
          now,
        )
      : hitsAddends;

    const main = emptyWork();
    const perSecond = this.perSecond === undefined ? main : emptyWork();
    for (let i = 0; i < n; i++) {
      const k = keys[i];
      if (k === undefined || cached?.[i] === true) continue;
      const work = k.perSecond ? perSecond : main;
      work.cacheKeys.push(k.key);
      work.hitsAddends.push(increments[i]!);
      work.expirationSeconds.push(base.expirationSeconds(limits[i]!));
      work.indexes.push(i);
      if (k.previousKey !== undefined)
        (work.previousKeys ??= [])[work.cacheKeys.length - 1] = k.previousKey;
    }
    const after = new Array<number>(n);
    let previous: number[] | undefined;
    if (main.cacheKeys.length > 0 || perSecond.cacheKeys.length > 0) {
      if (
        main.previousKeys !== undefined ||
        perSecond.previousKeys !== undefined
      )
        previous = new Array<number>(n).fill(0);
      // Main instance first, then the per-second one, as upstream. (The service traces the
      // whole round trip as one span.)
      await this.increment(this.main, main, after, previous);
      if (perSecond !== main)
        await this.increment(this.perSecond!, perSecond, after, previous);
    }

    const statuses = new Array<RateLimitResponse_DescriptorStatus>(n);
    for (let i = 0; i < n; i++) {
      const k = keys[i];
      const limit = limits[i];
      if (k === undefined || limit === undefined) {
        statuses[i] = base.okWithoutLimit();
        continue;
      }
      const hits = hitsAddends[i]!;
      statuses[i] =
        cached?.[i] === true
          ? base.localCacheStatus(limit, hits, now)
          : limit.sliding
            ? base.counterStatus(
                k.key,
                limit,
                after[i]!,
                previous?.[i] ?? 0,
                hits,
                now,
                true,
              )
            : base.descriptorStatus(k.key, limit, after[i]!, hits, now);
    }
    return statuses;
  }

  /**
   * Reads the counters with `GET` (one pipeline per instance, main first) without changing
   * them (see {@link RateLimitCache.peekCounters}); keys known over limit in the local cache
   * are not read.
   *
   * @throws {@link BackendError} when the store fails
   */
  async peekCounters(
    domain: string,
    descriptors: readonly RateLimitDescriptor[],
    limits: readonly (RateLimit | undefined)[],
  ): Promise<(CounterReading | undefined)[]> {
    const read = readingKeys(this.base, domain, descriptors, limits);
    const values = new Array<number>(descriptors.length).fill(0);
    const previous = new Array<number>(descriptors.length).fill(0);
    // Index i reads into values[i]; index -1 - i into previous[i] (sliding windows).
    const main = { cacheKeys: [] as string[], indexes: [] as number[] };
    const perSecond =
      this.perSecond === undefined
        ? main
        : { cacheKeys: [] as string[], indexes: [] as number[] };
    read.keys.forEach((k, i) => {
      if (k === undefined || read.localCacheHits?.[i] === true) return;
      const group = k.perSecond ? perSecond : main;
      group.cacheKeys.push(k.key);
      group.indexes.push(i);
      if (k.previousKey !== undefined) {
        group.cacheKeys.push(k.previousKey);
        group.indexes.push(-1 - i);
      }
    });
    for (const [client, group] of [
      [this.main, main],
      [this.perSecond, perSecond === main ? undefined : perSecond],
    ] as const) {
      if (client === undefined || group === undefined) continue;
      if (group.cacheKeys.length === 0) continue;
      const got = await client.get(group.cacheKeys);
      got.forEach((value, j) => {
        const index = group.indexes[j]!;
        if (index >= 0) values[index] = value;
        else previous[-1 - index] = value;
      });
    }
    return counterReadings(read, limits, values, previous);
  }

  /**
   * All-or-nothing charging (`charge: all_or_nothing`, docs/configuration.md):
   * - a descriptor known over limit in the local cache (not in shadow mode) rejects the
   *   request: the other counters are only read;
   * - all keys on one single or sentinel instance: one script (`EVALSHA`) checks and
   *   increments them atomically;
   * - cluster, or keys on both the main and the per-second instance: the counters are read,
   *   and incremented only when all fit; if the increments show another request took the
   *   budget in between (the race window is the time between the read and the increment),
   *   the increments are undone with a compensating `INCRBY -hits`, the request is rejected
   *   and `ratelimit.all_or_nothing.compensated` counts it.
   */
  private async doLimitAllOrNothing(
    keys: readonly (CacheKey | undefined)[],
    limits: readonly (RateLimit | undefined)[],
    hitsAddends: readonly number[],
    now: number,
  ): Promise<RateLimitResponse_DescriptorStatus[]> {
    const base = this.base;
    const n = keys.length;
    const cached = base.localCacheHits(keys);
    const statuses = statusesOf(base, keys, limits, hitsAddends, cached, now);
    let onMain = false;
    let onPerSecond = false;
    let cacheRejects = false;
    for (let i = 0; i < n; i++) {
      const k = keys[i];
      if (k === undefined) continue;
      if (cached?.[i] === true) {
        if (limits[i]?.shadowMode !== true) cacheRejects = true;
        continue;
      }
      if (k.perSecond && this.perSecond !== undefined) onPerSecond = true;
      else onMain = true;
    }
    if (cacheRejects) {
      return statuses(await this.readCounters(keys, cached), false);
    }
    if (!onMain && !onPerSecond) {
      return statuses({ current: [], previous: [] }, false);
    }
    const single = onMain !== onPerSecond;
    const client = onPerSecond ? this.perSecond! : this.main;
    if (single && !client.isCluster) {
      return this.scriptAllOrNothing(
        client,
        keys,
        limits,
        hitsAddends,
        cached,
        now,
        statuses,
      );
    }
    return checkThenIncrement(
      base,
      keys,
      limits,
      hitsAddends,
      cached,
      now,
      {
        read: () => this.readCounters(keys, cached),
        increment: () =>
          this.incrementEach(keys, limits, hitsAddends, cached, 1),
        undo: async () => {
          await this.incrementEach(keys, limits, hitsAddends, cached, -1);
        },
      },
      this.compensated,
    );
  }

  /** The atomic all-or-nothing path: one script on one instance. */
  private async scriptAllOrNothing(
    client: KvClient,
    keys: readonly (CacheKey | undefined)[],
    limits: readonly (RateLimit | undefined)[],
    hitsAddends: readonly number[],
    cached: readonly boolean[] | undefined,
    now: number,
    statuses: (
      counters: RequestCounters,
      charged: boolean,
    ) => RateLimitResponse_DescriptorStatus[],
  ): Promise<RateLimitResponse_DescriptorStatus[]> {
    const n = keys.length;
    const scriptKeys: string[] = [];
    const args: (string | number)[] = [];
    const indexes: number[] = [];
    for (let i = 0; i < n; i++) {
      const k = keys[i];
      const limit = limits[i];
      if (k === undefined || limit === undefined || cached?.[i] === true)
        continue;
      const windowSeconds = limit.windowSeconds;
      scriptKeys.push(k.key, k.previousKey ?? k.key);
      args.push(
        hitsAddends[i]!,
        limit.requestsPerUnit,
        this.base.expirationSeconds(limit),
        windowSeconds,
        windowSeconds - (now % windowSeconds),
        limit.sliding ? 1 : 0,
        limit.shadowMode ? 0 : 1,
      );
      indexes.push(i);
    }
    const reply = await client.evalAllOrNothing(scriptKeys, args);
    const charged = reply[0] === 1;
    const current = new Array<number>(n).fill(0);
    const previous = new Array<number>(n).fill(0);
    for (let j = 0; j < indexes.length; j++) {
      const i = indexes[j]!;
      current[i] = (reply[1 + 2 * j] ?? 0) + (charged ? hitsAddends[i]! : 0);
      previous[i] = reply[2 + 2 * j] ?? 0;
    }
    return statuses({ current, previous }, charged);
  }

  /**
   * Reads the current and previous windows' counters of every key not answered by the local
   * cache (GET, main instance then per-second).
   */
  private async readCounters(
    keys: readonly (CacheKey | undefined)[],
    cached: readonly boolean[] | undefined,
  ): Promise<RequestCounters> {
    const n = keys.length;
    const current = new Array<number>(n).fill(0);
    const previous = new Array<number>(n).fill(0);
    const read = async (perSecond: boolean): Promise<void> => {
      const client = perSecond ? this.perSecond : this.main;
      if (client === undefined) return;
      const reads: string[] = [];
      const targets: { index: number; previous: boolean }[] = [];
      for (let i = 0; i < n; i++) {
        const k = keys[i];
        if (k === undefined || cached?.[i] === true) continue;
        if ((k.perSecond && this.perSecond !== undefined) !== perSecond)
          continue;
        reads.push(k.key);
        targets.push({ index: i, previous: false });
        if (k.previousKey !== undefined) {
          reads.push(k.previousKey);
          targets.push({ index: i, previous: true });
        }
      }
      if (reads.length === 0) return;
      const values = await client.get(reads);
      for (let j = 0; j < values.length; j++) {
        const target = targets[j]!;
        (target.previous ? previous : current)[target.index] = values[j]!;
      }
    };
    await read(false);
    await read(true);
    return { current, previous };
  }

  /**
   * Adds `sign × hits` to every key not answered by the local cache (INCRBY + EXPIRE, main
   * instance then per-second); returns the counters after it, parallel to `keys` (0 where not
   * sent).
   */
  private async incrementEach(
    keys: readonly (CacheKey | undefined)[],
    limits: readonly (RateLimit | undefined)[],
    hitsAddends: readonly number[],
    cached: readonly boolean[] | undefined,
    sign: 1 | -1,
  ): Promise<number[]> {
    const main = emptyWork();
    const perSecond = this.perSecond === undefined ? main : emptyWork();
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i];
      if (k === undefined || cached?.[i] === true) continue;
      const work = k.perSecond ? perSecond : main;
      work.cacheKeys.push(k.key);
      work.hitsAddends.push(sign * hitsAddends[i]!);
      work.expirationSeconds.push(this.base.expirationSeconds(limits[i]!));
      work.indexes.push(i);
    }
    const after = new Array<number>(keys.length).fill(0);
    await this.increment(this.main, main, after, undefined);
    if (perSecond !== main)
      await this.increment(this.perSecond!, perSecond, after, undefined);
    return after;
  }

  /** Writes pending pipeline windows and waits for their replies. */
  async flush(): Promise<void> {
    await this.main.flush();
    await this.perSecond?.flush();
  }

  /** Closes both instances' connections; idempotent. */
  close(): Promise<void> {
    this.closing ??= Promise.all([
      this.main.close(),
      this.perSecond?.close(),
    ]).then(() => undefined);
    return this.closing;
  }

  /**
   * `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` (behavior.md §4.8): with a local-cache hit every
   * other key is sent `INCRBY 0`; otherwise the counters are read first (GET, main then
   * per-second), and if any key would go over, only those keys are incremented.
   *
   * @returns parallel to the descriptors: what to add to each counter
   */
  private async incrementsWhenStopping(
    keys: readonly (CacheKey | undefined)[],
    limits: readonly (RateLimit | undefined)[],
    hitsAddends: readonly number[],
    cached: readonly boolean[] | undefined,
    now: number,
  ): Promise<readonly number[]> {
    const n = keys.length;
    if (cached !== undefined) return new Array<number>(n).fill(0);
    if (anySliding(limits)) {
      // Sliding windows compare the weighted count: read both windows.
      const counters = await this.readCounters(keys, undefined);
      let exceeding: boolean[] | undefined;
      for (let i = 0; i < n; i++) {
        const limit = limits[i];
        if (keys[i] === undefined || limit === undefined) continue;
        const weighted = this.base.weightedCount(
          limit,
          counters.current[i]!,
          counters.previous[i]!,
          now,
        );
        if (weighted + hitsAddends[i]! > limit.requestsPerUnit)
          (exceeding ??= new Array<boolean>(n).fill(false))[i] = true;
      }
      if (exceeding === undefined) return hitsAddends;
      const over = exceeding;
      return hitsAddends.map((hits, i) => (over[i] === true ? hits : 0));
    }
    const main: { cacheKeys: string[]; indexes: number[] } = {
      cacheKeys: [],
      indexes: [],
    };
    const perSecond =
      this.perSecond === undefined ? main : { cacheKeys: [], indexes: [] };
    for (let i = 0; i < n; i++) {
      const k = keys[i];
      if (k === undefined) continue;
      const reads = k.perSecond ? perSecond : main;
      reads.cacheKeys.push(k.key);
      reads.indexes.push(i);
    }
    const current = new Array<number>(n).fill(0);
    const read = async (
      client: KvClient,
      reads: { cacheKeys: string[]; indexes: number[] },
    ): Promise<void> => {
      if (reads.cacheKeys.length === 0) return;
      const values = await client.get(reads.cacheKeys);
      for (let j = 0; j < values.length; j++)
        current[reads.indexes[j]!] = values[j]!;
    };
    await read(this.main, main);
    if (perSecond !== main) await read(this.perSecond!, perSecond);
    let wouldExceed: boolean[] | undefined;
    for (let i = 0; i < n; i++) {
      const limit = limits[i];
      if (keys[i] === undefined || limit === undefined) continue;
      if (current[i]! + hitsAddends[i]! > limit.requestsPerUnit)
        (wouldExceed ??= new Array<boolean>(n).fill(false))[i] = true;
    }
    if (wouldExceed === undefined) return hitsAddends;
    const exceeding = wouldExceed;
    return hitsAddends.map((hits, i) => (exceeding[i] === true ? hits : 0));
  }

  private async increment(
    client: KvClient,
    work: InstanceWork,
    after: number[],
    previous: number[] | undefined,
  ): Promise<void> {
    if (work.cacheKeys.length === 0) return;
    if (work.previousKeys !== undefined && previous !== undefined) {
      const read = await client.incrementAndReadPrevious(
        work.cacheKeys,
        work.hitsAddends,
        work.expirationSeconds,
        work.previousKeys,
      );
      for (let j = 0; j < read.current.length; j++) {
        const i = work.indexes[j]!;
        after[i] = read.current[j]!;
        previous[i] = read.previous[j] ?? 0;
      }
      return;
    }
    const values = await client.incrementAndExpire(
      work.cacheKeys,
      work.hitsAddends,
      work.expirationSeconds,
    );
    for (let j = 0; j < values.length; j++)
      after[work.indexes[j]!] = values[j]!;
  }

  /** Healthy while every instance has a connection up. */
  private updateHealth(health: HealthChecker): void {
    const up = this.main.connected && (this.perSecond?.connected ?? true);
    if (up) health.ok("backend");
    else health.fail("backend");
  }
}
