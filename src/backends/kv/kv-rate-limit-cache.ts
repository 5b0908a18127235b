import type { RateLimit } from "../../config/rate-limit-config.js";
import type { HealthChecker } from "../../health/health.js";
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
}

const emptyWork = (): InstanceWork => ({
  cacheKeys: [],
  hitsAddends: [],
  expirationSeconds: [],
  indexes: [],
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
    // Keys the local cache knows to be over limit are answered without the store.
    const cached = base.localCacheHits(keys);
    const increments = this.stopIncrementWhenOverlimit
      ? await this.incrementsWhenStopping(keys, limits, hitsAddends, cached)
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
    }
    const after = new Array<number>(n);
    if (main.cacheKeys.length > 0 || perSecond.cacheKeys.length > 0) {
      // Main instance first, then the per-second one, as upstream. (The service traces the
      // whole round trip as one span.)
      await this.increment(this.main, main, after);
      if (perSecond !== main)
        await this.increment(this.perSecond!, perSecond, after);
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
          : base.descriptorStatus(k.key, limit, after[i]!, hits, now);
    }
    return statuses;
  }

  /**
   * Reads the counters with `GET` (one pipeline per instance, main first) without changing
   * them (see {@link RateLimitCache.readCounters}); keys known over limit in the local cache
   * are not read.
   *
   * @throws {@link BackendError} when the store fails
   */
  async readCounters(
    domain: string,
    descriptors: readonly RateLimitDescriptor[],
    limits: readonly (RateLimit | undefined)[],
  ): Promise<(CounterReading | undefined)[]> {
    const read = readingKeys(this.base, domain, descriptors, limits);
    const values = new Array<number>(descriptors.length).fill(0);
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
    });
    for (const [client, group] of [
      [this.main, main],
      [this.perSecond, perSecond === main ? undefined : perSecond],
    ] as const) {
      if (client === undefined || group === undefined) continue;
      if (group.cacheKeys.length === 0) continue;
      const got = await client.get(group.cacheKeys);
      got.forEach((value, j) => {
        values[group.indexes[j]!] = value;
      });
    }
    return counterReadings(read, limits, values);
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
  ): Promise<readonly number[]> {
    const n = keys.length;
    if (cached !== undefined) return new Array<number>(n).fill(0);
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
  ): Promise<void> {
    if (work.cacheKeys.length === 0) return;
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
