import type { HealthChecker } from "../../health/health.js";
import type {
  BucketSlot,
  CounterBackend,
  CounterSlot,
} from "../../limiter/counter-backend.js";
import { KvClient, type KvStartupOptions } from "./kv-client.js";
import {
  resolveKvBackendOptions,
  type KvBackendOptions,
} from "./kv-options.js";

/**
 * The key-value store backend (`BACKEND_TYPE=kv`): fixed-window counters in a store speaking
 * the Redis protocol, byte-compatible with the reference so both services can share live
 * counters (upstream `redis/fixed_cache_impl.go`): per request, one pipeline per instance of
 * `INCRBY <cacheKey> <hitsAddend>` + `EXPIRE <cacheKey> <unit + jitter>` per descriptor with a
 * limit; SECOND limits go to the per-second instance when one is configured (main pipeline
 * first, then per-second); keys the local cache knows over limit are not sent. Token buckets
 * are one `gcraScript` call per bucket, pipelined the same way ({@link takeTokens}).
 *
 * Health: registers the `backend` component as healthy; with `healthCheckActiveConnection` it
 * turns unhealthy while an instance has no connection up, healthy again on reconnect.
 */
export class KvCounterBackend implements CounterBackend {
  private readonly main: KvClient;
  private readonly perSecond: KvClient | undefined;
  private readonly startup: KvStartupOptions;
  private closing: Promise<void> | undefined;

  /**
   * Creates the clients without connecting; {@link KvCounterBackend.start} connects.
   *
   * @throws {@link KvOptionsError} when an option is invalid
   */
  constructor(options: KvBackendOptions) {
    const resolved = resolveKvBackendOptions(options);
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
   * (`KV_STARTUP_*`, docs/reference-parity.md#startup-backoff); main first, then per-second.
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
   * The usual charge (upstream `fixed_cache_impl.go` `DoLimit`): one pipeline per instance
   * (main first, then per-second) of `INCRBY` + `EXPIRE` per slot, plus `GET` of the previous
   * window's key for sliding windows.
   *
   * @throws {@link BackendError} when the store fails or no connection is up in time
   */
  increment(slots: readonly CounterSlot[]): Promise<void> {
    return this.writeAll(slots, true);
  }

  /**
   * Reads the counters with `GET` (one pipeline per instance, main first), the previous
   * window's too for sliding windows, without changing them.
   *
   * @throws {@link BackendError} when the store fails
   */
  async peek(slots: readonly CounterSlot[]): Promise<void> {
    if (this.perSecond === undefined) return this.read(this.main, slots);
    const [main, perSecond] = this.split(slots);
    await this.read(this.main, main);
    if (perSecond !== undefined) await this.read(this.perSecond, perSecond);
  }

  /**
   * Adds each slot's increment (INCRBY + EXPIRE, main instance then per-second); a negative
   * increment is the compensation of a lost all-or-nothing race.
   *
   * @throws {@link BackendError} when the store fails
   */
  add(slots: readonly CounterSlot[]): Promise<void> {
    return this.writeAll(slots, false);
  }

  /**
   * INCRBY + EXPIRE of every slot (with `withPrevious`, GET of sliding windows' previous keys
   * too): main instance first, then the per-second one, as upstream. (The service traces the
   * whole round trip as one span.)
   */
  private writeAll(
    slots: readonly CounterSlot[],
    withPrevious: boolean,
  ): Promise<void> {
    // No async frame on the usual path (one instance): each layer is a promise per decision.
    if (this.perSecond === undefined)
      return this.write(this.main, slots, withPrevious);
    return this.writeSplit(this.perSecond, slots, withPrevious);
  }

  /** {@link writeAll} with a per-second instance: main first, then per-second. */
  private async writeSplit(
    perSecondClient: KvClient,
    slots: readonly CounterSlot[],
    withPrevious: boolean,
  ): Promise<void> {
    const [main, perSecond] = this.split(slots);
    await this.write(this.main, main, withPrevious);
    if (perSecond !== undefined)
      await this.write(perSecondClient, perSecond, withPrevious);
  }

  /**
   * The atomic all-or-nothing charge when every slot is on one single or sentinel instance:
   * one script (`EVALSHA`, {@link allOrNothingScript}) reads, checks and increments them; it is
   * the store-side form of the pipeline's fit check. Undefined (nothing sent) on a cluster or
   * when the slots span the main and the per-second instance.
   *
   * @throws {@link BackendError} when the store fails
   */
  chargeAllOrNothing(
    slots: readonly CounterSlot[],
    nowSeconds: number,
  ): Promise<boolean> | undefined {
    const [main, perSecond] = this.split(slots);
    if (main.length > 0 && perSecond !== undefined && perSecond.length > 0)
      return undefined;
    const client = main.length > 0 ? this.main : this.perSecond!;
    if (client.isCluster) return undefined;
    return this.evalAllOrNothing(client, slots, nowSeconds);
  }

  private async evalAllOrNothing(
    client: KvClient,
    slots: readonly CounterSlot[],
    now: number,
  ): Promise<boolean> {
    const scriptKeys: string[] = [];
    const args: (string | number)[] = [];
    for (const slot of slots) {
      scriptKeys.push(slot.cacheKey, slot.previousCacheKey ?? slot.cacheKey);
      args.push(
        slot.increment,
        slot.requestsPerUnit,
        slot.expirationSeconds,
        slot.windowSeconds,
        // Seconds left in the window: from its end, not `window − now mod window`, so that a
        // calendar window's is right; the same number for epoch-aligned windows.
        slot.windowEndSeconds - now,
        slot.sliding ? 1 : 0,
        slot.shadowMode ? 0 : 1,
      );
    }
    const reply = await client.evalAllOrNothing(scriptKeys, args);
    const charged = reply[0] === 1;
    for (let j = 0; j < slots.length; j++) {
      const slot = slots[j]!;
      // Charged: the value after this slot's INCRBY, as the script ran them in order, so a
      // key two slots share shows the earlier slot's hits too (as memory and mc answer).
      let after = (reply[1 + 2 * j] ?? 0) + (charged ? slot.increment : 0);
      if (charged)
        for (let k = 0; k < j; k++)
          if (slots[k]!.cacheKey === slot.cacheKey)
            after += slots[k]!.increment;
      slot.current = after;
      slot.previous = reply[2 + 2 * j] ?? 0;
    }
    return charged;
  }

  /**
   * Splits slots by instance: `[main, perSecond]`, where perSecond is undefined without a
   * per-second instance (its slots are then in main). No copy when all go to main.
   */
  private split<S extends { readonly perSecond: boolean }>(
    slots: readonly S[],
  ): [readonly S[], S[] | undefined] {
    if (this.perSecond === undefined) return [slots, undefined];
    let main: S[] | undefined;
    let perSecond: S[] | undefined;
    for (let j = 0; j < slots.length; j++) {
      const slot = slots[j]!;
      if (slot.perSecond) {
        if (perSecond === undefined) {
          perSecond = [];
          main = slots.slice(0, j);
        }
        perSecond.push(slot);
      } else {
        main?.push(slot);
      }
    }
    return [main ?? slots, perSecond];
  }

  /**
   * Sends INCRBY + EXPIRE for every slot on one instance (with `withPrevious`, also GET of
   * sliding windows' previous keys); the replies land in the slots.
   */
  private write(
    client: KvClient,
    slots: readonly CounterSlot[],
    withPrevious: boolean,
  ): Promise<void> {
    if (slots.length === 0) return Promise.resolve();
    return client.increment(slots, withPrevious && slots.some(hasPreviousKey));
  }

  /** GETs every slot's counter (and previous window's) on one instance. */
  private async read(
    client: KvClient,
    slots: readonly CounterSlot[],
  ): Promise<void> {
    if (slots.length === 0) return;
    const reads: string[] = [];
    for (const slot of slots) {
      reads.push(slot.cacheKey);
      if (slot.previousCacheKey !== undefined)
        reads.push(slot.previousCacheKey);
    }
    const values = await client.get(reads);
    let k = 0;
    for (const slot of slots) {
      slot.current = values[k++]!;
      if (slot.previousCacheKey !== undefined) slot.previous = values[k++]!;
    }
  }

  /**
   * Token buckets: one `gcraScript` call per slot (`EVALSHA`, falling back to `EVAL` after
   * `NOSCRIPT`), sent with the other commands of the pipeline window; per-second slots go to
   * the per-second instance when one is configured (main first, then per-second, as the other
   * writes); on a cluster each call goes to its key's node. The store runs each call alone,
   * so every decision is atomic; slots of one key are decided in slot order.
   *
   * @param nowUs - the request time, integer µs since the Unix epoch
   * @throws {@link BackendError} when the store fails, a reply is not the script's, or no
   *   connection is up in time
   * @throws TypeError when a slot has no `tokenBucket` params (a caller's bug; nothing sent)
   */
  async takeTokens(slots: readonly BucketSlot[], nowUs: number): Promise<void> {
    for (const slot of slots)
      if (slot.tokenBucket === undefined)
        throw new TypeError(
          `token bucket slot ${slot.cacheKey} has no tokenBucket params`,
        );
    const [main, perSecond] = this.split(slots);
    if (main.length > 0) await this.main.takeTokens(main, nowUs);
    if (perSecond !== undefined && perSecond.length > 0)
      await this.perSecond!.takeTokens(perSecond, nowUs);
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

  /** Healthy while every instance has a connection up. */
  private updateHealth(health: HealthChecker): void {
    const up = this.main.connected && (this.perSecond?.connected ?? true);
    if (up) health.ok("backend");
    else health.fail("backend");
  }
}

/** Whether a slot is a sliding window's (its previous window's key is read too). */
function hasPreviousKey(slot: CounterSlot): boolean {
  return slot.previousCacheKey !== undefined;
}
