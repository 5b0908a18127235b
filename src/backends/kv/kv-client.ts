import { Cluster, Redis } from "ioredis";
import type { Logger } from "pino";
import { BackendError } from "../../limiter/backend-error.js";
import type { Counter, Gauge, StatsStore } from "../../stats/stats-store.js";
import { createExponentialBackoff } from "../../util/backoff.js";
import { systemClock, type Clock } from "../../util/clock.js";
import { isFailoverReply, toKvConnectionOptions } from "./kv-client-options.js";
import { executeOnCluster } from "./kv-cluster-routing.js";
import type { BucketSlot, CounterSlot } from "../../limiter/counter-backend.js";
import {
  gcraScript,
  gcraScriptArgs,
  gcraScriptSha,
} from "../../limiter/gcra-scripts.js";
import { applyBucketReply, type KvBucketJob, type KvJob } from "./kv-job.js";
import type { KvTlsOptions, ResolvedKvInstanceOptions } from "./kv-options.js";
import { kvSecrets, redactSecrets } from "./kv-redact.js";
import {
  allOrNothingScript,
  allOrNothingScriptSha,
  decrementScript,
  isNoScript,
} from "./kv-scripts.js";

/** Which instance a client talks to; names its log lines and its pool statistics scope. */
export type KvRole = "main" | "per-second";

/**
 * Statistics scope of an instance's connection stats: `ratelimit.kv_pool` (main) or
 * `ratelimit.kv_per_second_pool` (per-second), upstream's `redis_pool` scopes with the neutral
 * word (docs/reference-parity.md#stat-names).
 */
export function kvPoolStatsScope(role: KvRole): string {
  return role === "main" ? "ratelimit.kv_pool" : "ratelimit.kv_per_second_pool";
}

/** Backoff of the startup PING loop (docs/reference-parity.md#startup-backoff). */
export interface KvStartupOptions {
  /** First wait between attempts, ms (`KV_STARTUP_INITIAL_INTERVAL`). */
  readonly initialIntervalMs: number;
  /** Largest wait, ms (`KV_STARTUP_MAX_INTERVAL`). */
  readonly maxIntervalMs: number;
  /** Give up after this many ms; 0 never gives up (`KV_STARTUP_MAX_ELAPSED_TIME`). */
  readonly maxElapsedTimeMs: number;
}

/** Options of {@link KvClient}. */
export interface KvClientOptions {
  /** The instance to connect to, as `resolveKvInstanceOptions` returns it. */
  readonly instance: ResolvedKvInstanceOptions;
  /** TLS material, used when `instance.tls`. @defaultValue none (system roots only) */
  readonly tls?: KvTlsOptions;
  /** Which instance this is: names log lines and the statistics scope. */
  readonly role: KvRole;
  /** Where connection events go (info: up, warn: lost / errors / startup retries). */
  readonly logger: Logger;
  /** Where `<scope>.cx_active`, `cx_total`, `cx_local_close` live ({@link kvPoolStatsScope}). */
  readonly statsStore?: StatsStore;
  /** Called with `true` when the first connection comes up, `false` when the last goes down. */
  readonly onConnectionChange?: (up: boolean) => void;
  /** @defaultValue the system clock */
  readonly clock?: Clock;
  /** Random source in [0, 1) for the startup backoff jitter. @defaultValue Math.random */
  readonly random?: () => number;
}

/** The part of ioredis's connection stream used to write a request's commands at once. */
interface NetStreamLike {
  readonly writable: boolean;
  cork(): void;
  uncork(): void;
}

interface Batch {
  readonly jobs: KvJob[];
  readonly done: Promise<void>;
  readonly release: () => void;
  /** Cancels the scheduled write. */
  cancel: () => void;
}

interface Waiter {
  resolve(): void;
  reject(err: Error): void;
  timer: NodeJS.Timeout | undefined;
}

const noop = (): void => undefined;
/** The reply slot of a command a refund does not send (its EXPIRE). */
const zeroReply: Promise<number> = Promise.resolve(0);

/**
 * One store instance (single, sentinel or cluster) over ioredis: connection lifecycle and
 * health, the startup PING with backoff, and one pipeline per request (or per pipeline window)
 * of `INCRBY`+`EXPIRE`, `GET` or token-bucket script commands. Every failure surfaces as
 * {@link BackendError}.
 */
export class KvClient {
  private readonly instance: ResolvedKvInstanceOptions;
  private readonly role: KvRole;
  private readonly logger: Logger;
  private readonly clock: Clock;
  private readonly random: () => number;
  private readonly onConnectionChange: ((up: boolean) => void) | undefined;
  private readonly redis: Redis | Cluster;
  private readonly cluster: Cluster | undefined;
  private readonly secrets: string[];
  private readonly cxActive: Gauge | undefined;
  private readonly cxTotal: Counter | undefined;
  private readonly cxLocalClose: Counter | undefined;
  private readonly waiters = new Set<Waiter>();
  private activeConnections = 0;
  private batch: Batch | undefined;
  /** The connection stream corked until the end of this event-loop turn (window 0), if any. */
  private corkedStream: NetStreamLike | undefined;
  private readonly uncorkAtTickEnd = (): void => {
    const stream = this.corkedStream;
    this.corkedStream = undefined;
    stream?.uncork();
  };
  private closed = false;
  private closing: Promise<void> | undefined;
  private startSleep: { timer: NodeJS.Timeout; wake: () => void } | undefined;
  /** Last connection error logged at warn since the connection was last up. */
  private lastErrorLogged: string | undefined;
  /** A failover reply was logged since a connection last came up (one warning per event). */
  private failoverReplyLogged = false;
  /** The client has been connected once (a lost connection then fails requests at once). */
  private everConnected = false;
  /** {@link KvClient.start} was called (requests no longer wait for the first connection). */
  private starting = false;

  constructor(options: KvClientOptions) {
    this.instance = options.instance;
    this.role = options.role;
    this.logger = options.logger;
    this.clock = options.clock ?? systemClock;
    this.random = options.random ?? Math.random;
    this.onConnectionChange = options.onConnectionChange;
    this.secrets = kvSecrets(options.instance);
    const scope = kvPoolStatsScope(options.role);
    this.cxActive = options.statsStore?.gauge(`${scope}.cx_active`);
    this.cxTotal = options.statsStore?.counter(`${scope}.cx_total`);
    this.cxLocalClose = options.statsStore?.counter(`${scope}.cx_local_close`);

    const connection = toKvConnectionOptions(options.instance, options.tls);
    // The options' own reconnectOnError, plus a warning: the connection that answered it is
    // closed and opened again (docs/failure-modes.md#failover-behind-one-name).
    const reconnectOnError = (err: Error): boolean => {
      if (!isFailoverReply(err)) return false;
      this.logFailoverReply(err);
      return true;
    };
    if (connection.kind === "cluster") {
      // replyMapping is spelled out: the constructor's typing rejects an optional one.
      const cluster = new Cluster(
        connection.nodes.map(({ host, port }) => ({ host, port })),
        {
          ...connection.options,
          redisOptions: {
            ...connection.options.redisOptions,
            reconnectOnError,
            replyMapping: "legacy",
          },
        },
      );
      this.redis = cluster;
      this.cluster = cluster;
      cluster.on("+node", (node: Redis) => {
        this.watchConnection(node);
      });
      cluster.on("ready", () => {
        this.wakeWaiters();
      });
      cluster.on("node error", (err: unknown) => {
        this.logConnectionError(err);
      });
    } else {
      const redis = new Redis({
        ...connection.options,
        reconnectOnError,
        replyMapping: "legacy",
      });
      this.redis = redis;
      this.cluster = undefined;
      this.watchConnection(redis);
      redis.on("ready", () => {
        this.wakeWaiters();
      });
    }
    this.redis.on("error", (err: unknown) => {
      this.logConnectionError(err);
    });
  }

  /** Whether at least one connection to the instance is up. */
  get connected(): boolean {
    return this.activeConnections > 0;
  }

  /**
   * Connects and PINGs until the store answers, waiting `initialIntervalMs` (±50 % jitter)
   * after the first failure, doubling up to `maxIntervalMs`; logs one warning per retry
   * (upstream `driver_impl.go` startup loop).
   *
   * @throws {@link BackendError} after `maxElapsedTimeMs` (> 0) without an answer, or when
   *   closed meanwhile; the client is closed then
   */
  async start(startup: KvStartupOptions): Promise<void> {
    this.starting = true;
    const began = this.clock.nowMs();
    // Upstream waits 1 s → 30 s, doubling, ±50 % jitter (docs/reference-parity.md#startup-backoff).
    const backoff = createExponentialBackoff({
      initialIntervalMs: startup.initialIntervalMs,
      maxIntervalMs: startup.maxIntervalMs,
      multiplier: 2,
      randomFactor: 0.5,
      jitter: true,
      random: this.random,
    });
    this.redis.connect().catch(noop);
    for (;;) {
      let failure: unknown;
      try {
        await this.waitForStartupConnection();
        await this.redis.ping();
        // Best effort: a store or proxy without scripting still serves the other modes; the
        // first all-or-nothing or token-bucket request then reports the error.
        await this.loadScripts().catch((err: unknown) => {
          this.logger.warn(
            {
              url: this.instance.maskedUrl,
              err: this.redact(errorMessage(err)),
            },
            "kv store did not load the all-or-nothing and token bucket scripts",
          );
        });
        this.logger.info({ url: this.instance.maskedUrl }, "kv store answered");
        return;
      } catch (err) {
        failure = err;
      }
      const message = this.redact(errorMessage(failure));
      if (this.closed) {
        throw new BackendError(
          "kv",
          `closed while waiting for kv connection to ${this.instance.maskedUrl}: ${message}`,
        );
      }
      const elapsedMs = this.clock.nowMs() - began;
      const maxMs = startup.maxElapsedTimeMs;
      if (maxMs > 0 && elapsedMs >= maxMs) {
        await this.close();
        throw new BackendError(
          "kv",
          `timed out waiting for kv connection to ${this.instance.maskedUrl} after ${maxMs} ms: ${message}`,
        );
      }
      let delayMs = Math.round(backoff.next());
      if (maxMs > 0) delayMs = Math.min(delayMs, maxMs - elapsedMs);
      this.logger.warn(
        {
          url: this.instance.maskedUrl,
          delayMs,
          elapsedMs,
          err: message,
        },
        "retrying kv connection",
      );
      await this.sleep(delayMs);
    }
  }

  /**
   * Sends `INCRBY cacheKey increment` then `EXPIRE cacheKey expirationSeconds` for every slot
   * in one pipeline (shared with concurrent requests within the pipeline window), and stores
   * each counter after the increment in the slot's `current` (upstream `fixed_cache_impl.go`
   * `DoLimit`). With `readPrevious`, the same write also sends `GET previousKey` for the slots
   * of sliding windows (the one extra read of the sliding-window counter) into `previous`.
   *
   * @param slots - counters of this instance; an increment of 0 is sent as `INCRBY key 0`
   * @throws {@link BackendError} when any command fails or no connection is up in time
   */
  increment(
    slots: readonly CounterSlot[],
    readPrevious: boolean,
  ): Promise<void> {
    return this.run({ kind: "incr", slots, readPrevious, failure: undefined });
  }

  /**
   * Decides each slot's hits on its token bucket: one `gcraScript` call per slot
   * (`EVALSHA`, or `EVAL` of the whole script after `NOSCRIPT`), in the same pipeline as the
   * other requests' commands (the pipeline window, or this event-loop turn); on a cluster
   * each call goes to the node of its key's slot. Each decision lands in the slot's
   * `decision`.
   *
   * @param slots - token buckets of this instance, each with its `tokenBucket` params
   * @param nowUs - the request time, integer µs since the Unix epoch
   * @throws {@link BackendError} when any call fails, a reply is not the script's, or no
   *   connection is up in time
   */
  takeTokens(slots: readonly BucketSlot[], nowUs: number): Promise<void> {
    return this.run({ kind: "gcra", slots, nowUs, failure: undefined });
  }

  /**
   * Runs the all-or-nothing script ({@link allOrNothingScript}) with `EVALSHA`; when the store
   * answers `NOSCRIPT` (restarted, flushed, failed over) the script is loaded again and the
   * call retried once. Not batched with other requests; single and sentinel instances only.
   *
   * @returns the script's reply as numbers
   * @throws {@link BackendError} when the store fails or no connection is up in time
   */
  async evalAllOrNothing(
    keys: readonly string[],
    args: readonly (string | number)[],
  ): Promise<number[]> {
    if (this.closed) {
      throw new BackendError("kv", `kv client (${this.role}) is closed`);
    }
    if (this.redis.status !== "ready") await this.waitForConnection();
    try {
      let reply: unknown;
      try {
        reply = await this.redis.evalsha(
          allOrNothingScriptSha,
          keys.length,
          ...keys,
          ...args,
        );
      } catch (err) {
        if (!isNoScript(err)) throw err;
        await this.loadScripts();
        reply = await this.redis.evalsha(
          allOrNothingScriptSha,
          keys.length,
          ...keys,
          ...args,
        );
      }
      return (reply as unknown[]).map(Number);
    } catch (err) {
      throw this.toBackendError(err);
    }
  }

  /** Whether this client talks to a cluster (no multi-key scripts across slots). */
  get isCluster(): boolean {
    return this.cluster !== undefined;
  }

  /**
   * `SCRIPT LOAD`s the scripts (at start, and the all-or-nothing one after `NOSCRIPT`); single
   * and sentinel only (a cluster's token-bucket calls fall back to `EVAL` per node).
   */
  private async loadScripts(): Promise<void> {
    if (this.cluster !== undefined) return;
    const redis = this.redis as Redis;
    await Promise.all([
      redis.script("LOAD", allOrNothingScript),
      redis.script("LOAD", gcraScript),
    ]);
  }

  /**
   * Reads the current counters (`GET` per key, one pipeline); absent keys read as 0. The
   * pre-read of `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`.
   *
   * @returns parallel to `cacheKeys`
   * @throws {@link BackendError} when any command fails or no connection is up in time
   */
  async get(cacheKeys: readonly string[]): Promise<number[]> {
    const results = new Array<number>(cacheKeys.length);
    await this.run({ kind: "get", cacheKeys, results, failure: undefined });
    return results;
  }

  /** Writes the pending pipeline window at once and waits for its replies. */
  async flush(): Promise<void> {
    const batch = this.batch;
    if (batch === undefined) return;
    this.writeBatch(batch);
    await batch.done;
  }

  /**
   * Writes any pending batch, then closes the connections (QUIT, then disconnect) and stops
   * reconnecting; waiting requests fail with {@link BackendError}. Idempotent.
   */
  close(): Promise<void> {
    this.closing ??= (async () => {
      this.closed = true;
      if (this.startSleep !== undefined) {
        clearTimeout(this.startSleep.timer);
        this.startSleep.wake();
      }
      for (const waiter of this.waiters) {
        if (waiter.timer !== undefined) clearTimeout(waiter.timer);
        waiter.reject(
          new BackendError("kv", `kv client (${this.role}) is closed`),
        );
      }
      this.waiters.clear();
      await this.flush();
      this.cxLocalClose?.add(this.activeConnections);
      if (this.redis.status === "ready") {
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([
          this.redis.quit().catch(noop),
          new Promise<void>((resolve) => {
            timer = setTimeout(resolve, 1000);
          }),
        ]);
        clearTimeout(timer);
      }
      this.redis.disconnect();
    })();
    return this.closing;
  }

  // --- requests ------------------------------------------------------------------------------

  /**
   * Sends a job's commands and settles when their replies are in (recorded in the job);
   * no async frame of its own on the usual path (each layer is a promise per decision).
   *
   * @throws {@link BackendError} (rejects) when a command failed or no connection is up in time
   */
  private run(job: KvJob): Promise<void> {
    // The common case (single or sentinel, connected, no window) without async frames: the
    // commands are written at the end of this loop turn, with those of every other request.
    if (
      !this.closed &&
      this.cluster === undefined &&
      this.instance.pipelineWindowMs <= 0 &&
      this.redis.status === "ready"
    ) {
      const redis = this.redis as Redis;
      this.corkUntilTickEnd(redis);
      return this.issue(redis, job).then(() => {
        if (job.failure !== undefined) throw this.toBackendError(job.failure);
      });
    }
    return this.runQueued(job);
  }

  private async runQueued(job: KvJob): Promise<void> {
    if (this.closed) {
      throw new BackendError("kv", `kv client (${this.role}) is closed`);
    }
    if (this.redis.status !== "ready") await this.waitForConnection();
    if (this.instance.pipelineWindowMs > 0) await this.enqueue(job);
    else await this.execute([job]);
    if (job.failure !== undefined) throw this.toBackendError(job.failure);
  }

  private enqueue(job: KvJob): Promise<void> {
    let batch = this.batch;
    if (batch === undefined) {
      let release = noop;
      const done = new Promise<void>((resolve) => {
        release = resolve;
      });
      const opened: Batch = { jobs: [], done, release, cancel: noop };
      const write = (): void => {
        this.writeBatch(opened);
      };
      // Node timers cannot wait less than 1 ms: a sub-millisecond window collects the
      // requests of the current event-loop turn instead.
      const windowMs = this.instance.pipelineWindowMs;
      if (windowMs < 1) {
        const immediate = setImmediate(write);
        opened.cancel = () => {
          clearImmediate(immediate);
        };
      } else {
        const timer = setTimeout(write, windowMs);
        opened.cancel = () => {
          clearTimeout(timer);
        };
      }
      this.batch = batch = opened;
    }
    batch.jobs.push(job);
    return batch.done;
  }

  private writeBatch(batch: Batch): void {
    if (this.batch !== batch) return;
    this.batch = undefined;
    batch.cancel();
    void this.execute(batch.jobs).then(batch.release);
  }

  /** Runs the jobs' commands; never rejects: failures are recorded in `job.failure`. */
  private async execute(jobs: readonly KvJob[]): Promise<void> {
    try {
      if (this.cluster !== undefined) {
        await executeOnCluster(
          this.cluster,
          jobs,
          this.instance.clusterPipelineParallelism,
        );
        return;
      }
      await this.executeOnOne(this.redis as Redis, jobs);
    } catch (err) {
      // Not expected from ioredis (it reports through replies), but a batch must never be
      // left unanswered.
      for (const job of jobs) job.failure ??= err;
    }
  }

  /**
   * Single and sentinel: the commands are issued one by one while the connection is corked
   * ({@link corkUntilTickEnd}), so they leave in one write, exactly like a pipeline (not
   * MULTI), without ioredis's Pipeline object: measured at about half the client CPU per
   * decision.
   */
  private async executeOnOne(
    redis: Redis,
    jobs: readonly KvJob[],
  ): Promise<void> {
    this.corkUntilTickEnd(redis);
    const done = new Array<Promise<void>>(jobs.length);
    for (let j = 0; j < jobs.length; j++) done[j] = this.issue(redis, jobs[j]!);
    await Promise.all(done);
  }

  /**
   * Corks the connection until the end of the current event-loop turn (`setImmediate`, which
   * runs right after the I/O callbacks of this turn): the commands of every request decided
   * in this turn leave in one `writev`. No timer: on an idle loop the write happens as soon
   * as the callback that issued it returns. Measured at 64 in flight: one write syscall per
   * request (`process.nextTick` does not coalesce, HTTP/2 streams end in separate callbacks)
   * was the largest single item of the kv profile; per turn it is about 8× fewer syscalls.
   */
  private corkUntilTickEnd(redis: Redis): void {
    if (this.corkedStream !== undefined) return;
    const stream = redis.stream as NetStreamLike | undefined;
    if (stream?.writable !== true) return;
    stream.cork();
    this.corkedStream = stream;
    setImmediate(this.uncorkAtTickEnd);
  }

  /** Sends one job's commands; the promise records the outcome in the job, never rejects. */
  private issue(redis: Redis, job: KvJob): Promise<void> {
    if (job.kind === "gcra") return issueBuckets(redis, job);
    if (job.kind === "get") {
      const results = job.results;
      const replies = job.cacheKeys.map((cacheKey) => redis.get(cacheKey));
      return Promise.all(replies).then(
        (values) => {
          for (let i = 0; i < values.length; i++) {
            const value = values[i];
            results[i] =
              value === null || value === undefined ? 0 : Number(value);
          }
        },
        (err: unknown) => {
          job.failure ??= err;
        },
      );
    }
    const slots = job.slots;
    // INCRBY then EXPIRE per key; EXPIRE's reply only matters when it is an error. A negative
    // increment (a refund, an undo) is the clamped decrement script instead: never below 0,
    // never creating the key.
    const replies = new Array<Promise<number>>(slots.length * 2);
    for (let i = 0; i < slots.length; i++) {
      const slot = slots[i]!;
      if (slot.increment < 0) {
        replies[2 * i] = redis.eval(
          decrementScript,
          1,
          slot.cacheKey,
          -slot.increment,
        ) as Promise<number>;
        replies[2 * i + 1] = zeroReply;
        continue;
      }
      replies[2 * i] = redis.incrby(slot.cacheKey, slot.increment);
      replies[2 * i + 1] = redis.expire(slot.cacheKey, slot.expirationSeconds);
    }
    if (job.readPrevious) {
      // After every INCRBY/EXPIRE, in the same write: GET of each previous window's key.
      const gets: Promise<string | null>[] = [];
      for (const slot of slots) {
        gets.push(
          slot.previousCacheKey === undefined
            ? Promise.resolve(null)
            : redis.get(slot.previousCacheKey),
        );
      }
      return Promise.all([Promise.all(replies), Promise.all(gets)]).then(
        ([values, previous]) => {
          for (let i = 0; i < slots.length; i++) {
            const slot = slots[i]!;
            slot.current = values[2 * i]!;
            const value = previous[i];
            if (slot.previousCacheKey !== undefined)
              slot.previous =
                value === null || value === undefined ? 0 : Number(value);
          }
        },
        (err: unknown) => {
          job.failure ??= err;
        },
      );
    }
    return Promise.all(replies).then(
      (values) => {
        for (let i = 0; i < slots.length; i++)
          slots[i]!.current = values[2 * i]!;
      },
      (err: unknown) => {
        job.failure ??= err;
      },
    );
  }

  // --- connection state ----------------------------------------------------------------------

  /**
   * Waits for a connection as `KV_POOL_ON_EMPTY_BEHAVIOR` says: ERROR waits
   * `poolOnEmptyWaitMs` (0: fails at once); WAIT waits up to `timeoutMs` (0: no bound);
   * CREATE (the default) waits so only before {@link KvClient.start}, and fails at once while
   * the start-up waits for the store or a connection that was up is lost (a decision must not
   * wait for a store that is not there: the backend guard answers by the failure mode at
   * once, docs/failure-modes.md). Waiters hold no commands: nothing is queued for a store
   * that is down.
   */
  private waitForConnection(): Promise<void> {
    const status = this.redis.status;
    if (
      status === "wait" ||
      (status === "reconnecting" &&
        this.instance.reconnectOnRequest &&
        this.cluster === undefined)
    ) {
      // Reconnecting: ioredis's own pending attempt finds the connection up (or connecting)
      // and gives up quietly.
      this.redis.connect().catch(noop);
    }
    const instance = this.instance;
    if (
      instance.poolOnEmptyBehavior === "CREATE" &&
      (this.everConnected || this.starting) &&
      status !== "connect"
    ) {
      return Promise.reject(
        new BackendError(
          "kv",
          `the connection to the kv store (${this.role}) is down (${status}); not waiting for it`,
        ),
      );
    }
    const waitMs =
      instance.poolOnEmptyBehavior === "ERROR"
        ? instance.poolOnEmptyWaitMs
        : instance.timeoutMs;
    const failure = (): BackendError =>
      new BackendError(
        "kv",
        `no connection to the kv store (${this.role}) within ${waitMs} ms`,
      );
    if (instance.poolOnEmptyBehavior === "ERROR" && waitMs === 0) {
      return Promise.reject(failure());
    }
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = { resolve, reject, timer: undefined };
      if (waitMs > 0) {
        waiter.timer = setTimeout(() => {
          this.waiters.delete(waiter);
          reject(failure());
        }, waitMs);
      }
      this.waiters.add(waiter);
    });
  }

  private wakeWaiters(): void {
    for (const waiter of this.waiters) {
      if (waiter.timer !== undefined) clearTimeout(waiter.timer);
      waiter.resolve();
    }
    this.waiters.clear();
  }

  /** Resolves when the client is ready; rejects on the next connection error or timeout. */
  private waitForStartupConnection(): Promise<void> {
    if (this.redis.status === "ready") return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const timeoutMs = this.instance.timeoutMs;
      let timer: NodeJS.Timeout | undefined;
      const done = (err?: unknown): void => {
        clearTimeout(timer);
        this.redis.off("ready", onReady);
        this.redis.off("error", onError);
        this.redis.off("node error", onError);
        this.redis.off("end", onEnd);
        if (err === undefined) resolve();
        else reject(err instanceof Error ? err : new Error(errorMessage(err)));
      };
      const onReady = (): void => {
        done();
      };
      const onError = (err: unknown): void => {
        done(err);
      };
      const onEnd = (): void => {
        done(new Error("connection ended"));
      };
      this.redis.on("ready", onReady);
      this.redis.on("error", onError);
      this.redis.on("node error", onError);
      this.redis.on("end", onEnd);
      if (timeoutMs > 0) {
        timer = setTimeout(() => {
          done(new Error(`no connection within ${timeoutMs} ms`));
        }, timeoutMs);
      }
    });
  }

  /** Counts a connection (the client itself, or one cluster node) for stats and health. */
  private watchConnection(connection: Redis): void {
    let up = false;
    connection.on("ready", () => {
      this.failoverReplyLogged = false;
      if (up) return;
      up = true;
      this.cxTotal?.add(1);
      this.setActive(this.activeConnections + 1);
    });
    const down = (): void => {
      if (!up) return;
      up = false;
      this.setActive(this.activeConnections - 1);
    };
    connection.on("close", down);
    connection.on("end", down);
  }

  private setActive(count: number): void {
    const before = this.activeConnections;
    this.activeConnections = count;
    this.cxActive?.set(count);
    if (before === 0 && count > 0) {
      this.everConnected = true;
      this.lastErrorLogged = undefined;
      this.logger.info(
        { url: this.instance.maskedUrl },
        "kv connection established",
      );
      this.onConnectionChange?.(true);
    } else if (before > 0 && count === 0) {
      if (!this.closed) {
        this.logger.warn(
          { url: this.instance.maskedUrl },
          "kv connection lost",
        );
      }
      this.onConnectionChange?.(false);
    }
  }

  private logConnectionError(err: unknown): void {
    const message = this.redact(errorMessage(err));
    // ioredis reports every failed reconnect; one warning per distinct error per outage.
    if (message === this.lastErrorLogged || this.closed) {
      this.logger.debug(
        { url: this.instance.maskedUrl, err: message },
        "kv connection error",
      );
      return;
    }
    this.lastErrorLogged = message;
    this.logger.warn(
      { url: this.instance.maskedUrl, err: message },
      "kv connection error",
    );
  }

  private logFailoverReply(err: Error): void {
    if (this.failoverReplyLogged || this.closed) return;
    this.failoverReplyLogged = true;
    this.logger.warn(
      { url: this.instance.maskedUrl, err: this.redact(err.message) },
      "kv store cannot take writes on this connection (failed over?): reconnecting",
    );
  }

  private sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const wake = (): void => {
        this.startSleep = undefined;
        resolve();
      };
      this.startSleep = { timer: setTimeout(wake, ms), wake };
    });
  }

  /** Removes passwords from text that may echo a command (AUTH, HELLO) or a URL. */
  private redact(text: string): string {
    return redactSecrets(text, this.secrets);
  }

  /**
   * Wraps a client error. The cause is a copy holding only name and message: ioredis errors
   * carry the failed command's arguments, which for AUTH or HELLO include the password.
   */
  private toBackendError(err: unknown): BackendError {
    if (err instanceof BackendError) return err;
    const message = this.redact(errorMessage(err));
    const cause = new Error(message);
    if (err instanceof Error) cause.name = err.name;
    return new BackendError("kv", `kv store error (${this.role}): ${message}`, {
      cause,
    });
  }
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * Single and sentinel: one `EVALSHA` of the token-bucket script per slot; a `NOSCRIPT`
 * answer (the store restarted, flushed its scripts or failed over) sends that call again as
 * `EVAL` of the whole script, which also puts it back in the store's cache. Records the
 * decisions, or the first failure, in the job; never rejects.
 */
function issueBuckets(redis: Redis, job: KvBucketJob): Promise<void> {
  const slots = job.slots;
  const replies = new Array<Promise<void>>(slots.length);
  for (let i = 0; i < slots.length; i++) {
    const slot = slots[i]!;
    const args = gcraScriptArgs(job.nowUs, slot.increment, slot.tokenBucket!);
    replies[i] = redis
      .evalsha(gcraScriptSha, 1, slot.cacheKey, ...args)
      .catch((err: unknown) => {
        if (!isNoScript(err)) throw err;
        return redis.eval(gcraScript, 1, slot.cacheKey, ...args);
      })
      .then(
        (reply) => {
          applyBucketReply(job, i, reply);
        },
        (err: unknown) => {
          job.failure ??= err;
        },
      );
  }
  return Promise.all(replies).then(noop);
}
