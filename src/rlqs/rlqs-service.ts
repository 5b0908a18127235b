// The Rate Limit Quota Service (`envoy.service.rate_limit_quota.v3.RateLimitQuotaService`):
// one bidirectional stream per Envoy. Reports subscribe the stream to buckets and measure
// their demand; every report interval each bucket's global rate is split among its streams
// (allocator.ts) and every stream is pushed a token bucket for its share (assignment.ts).
// A new subscription is answered at once, and the bucket's other streams get their shrunk
// shares in the same turn, so the shares never add up to more than the limit.
// `describeBucket` and `listBuckets` give Explain a read-only snapshot of a bucket's split
// (bucket-snapshot.ts), computed as a push computes it.

import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Logger } from "pino";
import type { RateLimitConfig } from "../config/rate-limit-config.js";
import {
  RateLimitQuotaResponseSchema,
  type BucketId,
  type RateLimitQuotaResponse,
  type RateLimitQuotaResponse_BucketAction,
  type RateLimitQuotaUsageReports,
} from "../proto.js";
import { sanitizeStatName, statNames } from "../stats/names.js";
import type { Counter, Gauge, StatsStore } from "../stats/stats-store.js";
import { systemClock, type Clock } from "../util/clock.js";
import { abandonAction, assignmentAction } from "./assignment.js";
import {
  bucketKey,
  bucketPolicy,
  orderBucketEntries,
  type LimitOverride,
} from "./bucket-lookup.js";
import { snapshotBucket, type BucketSnapshot } from "./bucket-snapshot.js";
import { splitBucket } from "./bucket-split.js";
import {
  MemoryQuotaLedger,
  type LedgerReading,
  type QuotaLedger,
} from "./quota-ledger.js";

/** Options of {@link createRlqsService}. */
export interface RlqsServiceOptions {
  /** The config in force (undefined before the first load: nothing is assigned). */
  readonly currentConfig: () => RateLimitConfig | undefined;
  readonly stats: StatsStore;
  readonly logger: Logger;
  /** @defaultValue the system clock */
  readonly clock?: Clock;
  /** `RLQS_REPORT_INTERVAL`: time between splits, ms. @defaultValue 5000 */
  readonly reportIntervalMs?: number;
  /** `RLQS_ASSIGNMENT_TTL`: `assignment_time_to_live`, ms (whole seconds). @defaultValue 15000 */
  readonly assignmentTtlMs?: number;
  /** `RLQS_ABANDON_AFTER`: a bucket with no request for this long is abandoned, ms. @defaultValue 60000 */
  readonly abandonAfterMs?: number;
  /** `SHADOW_MODE`: every limited bucket is in shadow mode. @defaultValue false */
  readonly globalShadowMode?: boolean;
  /** Where bucket demands live. @defaultValue a {@link MemoryQuotaLedger} */
  readonly ledger?: QuotaLedger;
  /** Buckets with their own statistics; later ones share an overflow name. @defaultValue 1000 */
  readonly maxBucketStats?: number;
  /** Buckets one stream may hold; reports of more are ignored. @defaultValue 10000 */
  readonly maxBucketsPerStream?: number;
  /**
   * Run-time overrides (the override table's `find`): a bucket whose descriptor has one is
   * split at the override's rate from the next split on. @defaultValue none
   */
  readonly limitOverride?: LimitOverride;
}

/** The service: the stream handler, the split timer and a manual tick for tests. */
export interface RlqsService {
  /**
   * Serves one `StreamRateLimitQuotas` call: reads the reports, yields the pushed responses
   * until the client ends its side (then completes with OK) or the call fails.
   *
   * @throws ConnectError INVALID_ARGUMENT when the first report has no domain
   */
  stream(
    requests: AsyncIterable<RateLimitQuotaUsageReports>,
  ): AsyncIterable<RateLimitQuotaResponse>;
  /** Splits every bucket and pushes the assignments (what the timer does). */
  tick(): Promise<void>;
  /** Starts the report-interval timer (unref'd). */
  start(): void;
  /** Stops the timer and ends every open stream with OK. */
  close(): void;
  /** Open streams. */
  readonly streamCount: number;
  /**
   * Describes one bucket for Explain: its policy, L and the split of L among its streams as
   * the ledger holds them now, computed as a push would compute it (with the kv ledger, the
   * split every replica computes). Read only: nothing is pushed, written or counted, and no
   * report waits for it.
   *
   * @param entries - the `BucketId`'s bucket map
   * @returns undefined before the first config load (no split is made then)
   */
  describeBucket(
    domain: string,
    entries: Readonly<Record<string, string>>,
  ): Promise<BucketSnapshot | undefined>;
  /**
   * Describes every bucket this replica's streams are subscribed to, as
   * {@link RlqsService.describeBucket} does, sorted by domain then canonical entries.
   *
   * @param domain - only this domain's buckets; every domain when undefined or ""
   * @param maxBuckets - at most this many are described (the first in that order)
   * @returns undefined before the first config load
   */
  listBuckets(
    domain?: string,
    maxBuckets?: number,
  ): Promise<BucketList | undefined>;
}

/** What {@link RlqsService.listBuckets} returns. */
export interface BucketList {
  readonly buckets: readonly BucketSnapshot[];
  /** More buckets were held than `maxBuckets`. */
  readonly truncated: boolean;
}

interface StreamBucket {
  readonly ledgerKey: string;
  readonly bucketId: BucketId;
  readonly entries: Readonly<Record<string, string>>;
  /** Last report with a request in it (or the subscription), server ms. */
  lastActiveMs: number;
  /** The assignment last pushed to this stream ({@link actionSignature}). */
  lastPushed?: string;
}

/** What a bucket action tells Envoy, as a string: equal strings, the same instruction. */
function actionSignature(action: RateLimitQuotaResponse_BucketAction): string {
  const kind = action.bucketAction;
  if (kind.case !== "quotaAssignmentAction") return kind.case ?? "";
  const strategy = kind.value.rateLimitStrategy?.strategy;
  if (strategy?.case === "tokenBucket")
    return `tb:${String(strategy.value.maxTokens)}:${String(strategy.value.tokensPerFill ?? 0)}:${String(strategy.value.fillInterval?.seconds ?? 0)}`;
  if (strategy?.case === "blanketRule")
    return `blanket:${String(strategy.value)}`;
  return strategy?.case ?? "";
}

interface BucketStats {
  readonly subscribed: Gauge;
  readonly assigned: Gauge;
  readonly allowed: Counter;
  readonly denied: Counter;
}

class QuotaStream {
  readonly id: string;
  domain: string | undefined = undefined;
  readonly buckets = new Map<string, StreamBucket>();
  warnedDomain = false;
  warnedBuckets = false;
  private readonly queue: RateLimitQuotaResponse[] = [];
  private wake: (() => void) | undefined = undefined;
  private ended = false;
  private error: Error | undefined = undefined;

  constructor(id: string) {
    this.id = id;
  }

  push(actions: RateLimitQuotaResponse_BucketAction[]): void {
    if (actions.length === 0 || this.ended) return;
    this.queue.push(
      create(RateLimitQuotaResponseSchema, { bucketAction: actions }),
    );
    this.signal();
  }

  finish(error?: unknown): void {
    if (this.ended) return;
    this.ended = true;
    if (error !== undefined) this.error = ConnectError.from(error);
    this.signal();
  }

  /** The next response to send; undefined at the end. @throws the error the stream failed with */
  async next(): Promise<RateLimitQuotaResponse | undefined> {
    for (;;) {
      const response = this.queue.shift();
      if (response !== undefined) return response;
      if (this.ended) {
        if (this.error !== undefined) throw this.error;
        return undefined;
      }
      await new Promise<void>((resolve) => {
        this.wake = resolve;
      });
    }
  }

  private signal(): void {
    const wake = this.wake;
    this.wake = undefined;
    wake?.();
  }
}

/** Creates the RLQS service (see the file header). */
export function createRlqsService(options: RlqsServiceOptions): RlqsService {
  const {
    currentConfig,
    stats,
    logger,
    clock = systemClock,
    reportIntervalMs = 5_000,
    assignmentTtlMs = 15_000,
    abandonAfterMs = 60_000,
    globalShadowMode = false,
    maxBucketStats = 1_000,
    maxBucketsPerStream = 10_000,
    limitOverride,
  } = options;
  const ledger: QuotaLedger = options.ledger ?? new MemoryQuotaLedger();
  const ttlSeconds = Math.max(1, Math.floor(assignmentTtlMs / 1000));
  // A report with new demand re-splits its bucket at once, but a bucket is re-split so at most
  // once per fifth of the interval: with N Envoys reporting every interval, that bounds the
  // pushes per bucket to about 6N per interval (5 re-splits and the tick) instead of N².
  const minResplitMs = Math.max(1, Math.floor(reportIntervalMs / 5));
  /** Last split of each bucket (ledger key), server ms. */
  const lastSplitMs = new Map<string, number>();
  const streams = new Map<string, QuotaStream>();
  const streamGauge = stats.gauge(statNames.rlqsStreams);
  const ignoredBuckets = stats.counter(statNames.rlqsIgnoredBuckets);
  const bucketStats = new Map<string, BucketStats>();
  let nextStreamId = 1;
  // Unique across the replicas sharing the ledger.
  const streamIdPrefix = ledger.streamIdPrefix ?? "";
  let timer: NodeJS.Timeout | undefined;
  // Reports and ticks run one at a time: the ledger may be asynchronous, and a split must not
  // interleave with the subscription it answers.
  let work: Promise<void> = Promise.resolve();
  function serially(task: () => Promise<void>): Promise<void> {
    const run = work.then(task);
    work = run.catch(() => undefined);
    return run;
  }

  function statsOf(domain: string, entries: Readonly<Record<string, string>>) {
    const ledgerKey = ledgerKeyOf(domain, entries);
    let handles = bucketStats.get(ledgerKey);
    if (handles !== undefined) return handles;
    const path =
      bucketStats.size < maxBucketStats
        ? Object.entries(entries)
            .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
            .map(([key, value]) => `${key}_${value}`)
            .join(".")
        : statNames.overflowKey;
    const prefix = sanitizeStatName(
      `${statNames.rlqsBucketScope}.${domain}.${path}.`,
    );
    handles = {
      subscribed: stats.gauge(prefix + statNames.rlqsSubscribedStreams),
      assigned: stats.gauge(prefix + statNames.rlqsAssignedTokensPerSecond),
      allowed: stats.counter(prefix + statNames.rlqsReportedAllowed),
      denied: stats.counter(prefix + statNames.rlqsReportedDenied),
    };
    if (bucketStats.size < maxBucketStats) bucketStats.set(ledgerKey, handles);
    return handles;
  }

  /**
   * Splits one bucket among its streams and returns each local stream's action. Undefined
   * before the first config load (Envoy applies its `no_assignment_behavior`).
   */
  async function splitStreams(
    domain: string,
    bucket: StreamBucket,
  ): Promise<Map<string, RateLimitQuotaResponse_BucketAction> | undefined> {
    const config = currentConfig();
    if (config === undefined) return undefined;
    const policy = bucketPolicy(
      config,
      domain,
      bucket.entries,
      globalShadowMode,
      limitOverride,
    );
    const demands = await ledger.demands(bucket.ledgerKey);
    const ids = [...demands.keys()];
    const handles = statsOf(domain, bucket.entries);
    handles.subscribed.set(ids.length);
    const out = new Map<string, RateLimitQuotaResponse_BucketAction>();
    const split = splitBucket(policy, [...demands.values()]);
    const assignments = split.assignments;
    handles.assigned.set(Math.round(split.assignedPerSecond * 1000) / 1000);
    ids.forEach((id, i) => {
      const assignment = assignments[i];
      if (assignment === undefined || !streams.has(id)) return;
      out.set(id, assignmentAction(bucket.bucketId, assignment, ttlSeconds));
    });
    return out;
  }

  /**
   * Splits the given buckets and pushes one response per stream holding all its actions;
   * with `onlyChanged`, an action equal to the one last pushed to that stream is left out
   * (the tick pushes every action: it renews their time to live).
   */
  async function pushSplits(
    buckets: Iterable<{ domain: string; bucket: StreamBucket }>,
    extra?: Map<QuotaStream, RateLimitQuotaResponse_BucketAction[]>,
    onlyChanged = false,
  ): Promise<void> {
    const perStream =
      extra ?? new Map<QuotaStream, RateLimitQuotaResponse_BucketAction[]>();
    const nowMs = clock.nowMs();
    for (const { domain, bucket } of buckets) {
      const actions = await splitStreams(domain, bucket);
      if (actions === undefined) continue;
      lastSplitMs.set(bucket.ledgerKey, nowMs);
      for (const [id, action] of actions) {
        const stream = streams.get(id);
        if (stream === undefined) continue;
        const held = stream.buckets.get(bucket.ledgerKey);
        if (held !== undefined) {
          const signature = actionSignature(action);
          if (onlyChanged && held.lastPushed === signature) continue;
          held.lastPushed = signature;
        }
        let list = perStream.get(stream);
        if (list === undefined) {
          list = [];
          perStream.set(stream, list);
        }
        list.push(action);
      }
    }
    for (const [stream, actions] of perStream) stream.push(actions);
  }

  async function receive(
    stream: QuotaStream,
    reports: RateLimitQuotaUsageReports,
  ): Promise<void> {
    if (stream.domain === undefined) {
      if (reports.domain === "") {
        throw new ConnectError(
          "the first RateLimitQuotaUsageReports of a stream must carry a domain",
          Code.InvalidArgument,
        );
      }
      stream.domain = reports.domain;
      if (currentConfig()?.view?.domainRules(reports.domain) === undefined) {
        logger.info(
          { stream: stream.id, domain: reports.domain },
          "RLQS stream for a domain without rules: its buckets are ALLOW_ALL",
        );
      }
    } else if (
      reports.domain !== "" &&
      reports.domain !== stream.domain &&
      !stream.warnedDomain
    ) {
      stream.warnedDomain = true;
      logger.warn(
        { stream: stream.id, domain: stream.domain, sent: reports.domain },
        "RLQS stream changed its domain: the first one is kept (open a new stream to change it)",
      );
    }
    const domain = stream.domain;
    const nowMs = clock.nowMs();
    const subscribed: { domain: string; bucket: StreamBucket }[] = [];
    for (const usage of reports.bucketQuotaUsages) {
      const entries = usage.bucketId?.bucket ?? {};
      const isNew = usage.bucketId !== undefined;
      const key = bucketKey(entries);
      const ledgerKey = ledgerKeyOf(domain, entries);
      let bucket = stream.buckets.get(ledgerKey);
      if (
        key === "" ||
        !isNew ||
        (bucket === undefined && stream.buckets.size >= maxBucketsPerStream)
      ) {
        ignoredBuckets.add(1);
        if (!stream.warnedBuckets) {
          stream.warnedBuckets = true;
          logger.warn(
            { stream: stream.id, domain, bucket: entries },
            key === ""
              ? "RLQS report for an empty bucket id ignored"
              : "RLQS report past the buckets a stream may hold ignored",
          );
        }
        continue;
      }
      const allowed = Number(usage.numRequestsAllowed);
      const denied = Number(usage.numRequestsDenied);
      const handles = statsOf(domain, entries);
      handles.allowed.add(allowed);
      handles.denied.add(denied);
      const first = await ledger.report(
        ledgerKey,
        stream.id,
        { allowed, denied },
        nowMs,
      );
      if (bucket === undefined) {
        bucket = {
          ledgerKey,
          bucketId: usage.bucketId ?? ({} as BucketId),
          entries: { ...entries },
          lastActiveMs: nowMs,
        };
        stream.buckets.set(ledgerKey, bucket);
      } else if (allowed + denied > 0) {
        bucket.lastActiveMs = nowMs;
      }
      // A new subscription, and a report that brings a new measurement of demand, are
      // answered at once with the new shares of the streams whose share changed: waiting for
      // the next tick left a light Envoy's unused fair share idle for up to one report
      // interval. A bucket split less than `minResplitMs` ago waits for the next report or
      // the tick.
      if (
        first ||
        (allowed + denied > 0 &&
          nowMs - (lastSplitMs.get(ledgerKey) ?? Number.NEGATIVE_INFINITY) >=
            minResplitMs)
      )
        subscribed.push({ domain, bucket });
    }
    if (subscribed.length > 0) await pushSplits(subscribed, undefined, true);
  }

  async function tick(): Promise<void> {
    const nowMs = clock.nowMs();
    const abandoned = new Map<
      QuotaStream,
      RateLimitQuotaResponse_BucketAction[]
    >();
    const buckets = new Map<string, { domain: string; bucket: StreamBucket }>();
    for (const stream of streams.values()) {
      const domain = stream.domain;
      if (domain === undefined) continue;
      for (const [ledgerKey, bucket] of stream.buckets) {
        if (nowMs - bucket.lastActiveMs >= abandonAfterMs) {
          stream.buckets.delete(ledgerKey);
          await ledger.leave(ledgerKey, stream.id);
          let list = abandoned.get(stream);
          if (list === undefined) {
            list = [];
            abandoned.set(stream, list);
          }
          list.push(abandonAction(bucket.bucketId));
          logger.debug(
            { stream: stream.id, domain, bucket: bucket.entries },
            "RLQS bucket abandoned",
          );
          buckets.set(ledgerKey, { domain, bucket });
          continue;
        }
        buckets.set(ledgerKey, { domain, bucket });
      }
    }
    await pushSplits(buckets.values(), abandoned);
    for (const ledgerKey of lastSplitMs.keys())
      if (!buckets.has(ledgerKey)) lastSplitMs.delete(ledgerKey);
    // Buckets no stream holds any more show 0 streams and 0 tokens.
    for (const { domain, bucket } of buckets.values()) {
      const demands = await ledger.demands(bucket.ledgerKey);
      if (demands.size === 0) {
        const handles = statsOf(domain, bucket.entries);
        handles.subscribed.set(0);
        handles.assigned.set(0);
      }
    }
  }

  async function leaveAll(stream: QuotaStream): Promise<void> {
    const domain = stream.domain;
    for (const [ledgerKey, bucket] of stream.buckets) {
      await ledger.leave(ledgerKey, stream.id);
      if (domain !== undefined) {
        const handles = statsOf(domain, bucket.entries);
        handles.subscribed.set((await ledger.demands(ledgerKey)).size);
      }
    }
    stream.buckets.clear();
  }

  async function* serve(
    requests: AsyncIterable<RateLimitQuotaUsageReports>,
  ): AsyncGenerator<RateLimitQuotaResponse> {
    const stream = new QuotaStream(streamIdPrefix + String(nextStreamId++));
    streams.set(stream.id, stream);
    streamGauge.set(streams.size);
    logger.debug({ stream: stream.id }, "RLQS stream opened");
    const pump = (async () => {
      try {
        for await (const reports of requests) {
          await serially(() => receive(stream, reports));
        }
        stream.finish();
      } catch (err) {
        stream.finish(err);
      }
    })();
    try {
      for (;;) {
        const response = await stream.next();
        if (response === undefined) return;
        yield response;
      }
    } catch (err) {
      logger.info(
        { stream: stream.id, domain: stream.domain, err },
        "RLQS stream failed",
      );
      throw err;
    } finally {
      stream.finish();
      streams.delete(stream.id);
      streamGauge.set(streams.size);
      await serially(() => leaveAll(stream)).catch(() => undefined);
      void pump;
      logger.debug(
        { stream: stream.id, domain: stream.domain },
        "RLQS stream closed",
      );
    }
  }

  /** Re-splits a bucket another replica changed, for this replica's streams. */
  async function remoteChange(ledgerKey: string): Promise<void> {
    for (const stream of streams.values()) {
      const bucket = stream.buckets.get(ledgerKey);
      if (bucket !== undefined && stream.domain !== undefined) {
        // One split answers every local stream of the bucket.
        await pushSplits([{ domain: stream.domain, bucket }]);
        return;
      }
    }
  }

  /** The ledger's reading of a bucket; from its demands alone when it cannot peek. */
  async function peek(ledgerKey: string): Promise<LedgerReading> {
    if (ledger.peek !== undefined) return ledger.peek(ledgerKey);
    const demands = await ledger.demands(ledgerKey);
    return {
      ledger: "custom",
      replica: "",
      streams: [...demands].map(([stream, demand]) => ({
        stream,
        demand,
        reportedMs: undefined,
        replica: undefined,
      })),
    };
  }

  async function describeBucket(
    domain: string,
    entries: Readonly<Record<string, string>>,
  ): Promise<BucketSnapshot | undefined> {
    const config = currentConfig();
    if (config === undefined) return undefined;
    const policy = bucketPolicy(
      config,
      domain,
      entries,
      globalShadowMode,
      limitOverride,
    );
    const root = config.view?.domainRules(domain);
    const ordered =
      (root === undefined ? undefined : orderBucketEntries(root, entries)) ??
      Object.entries(entries).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return snapshotBucket({
      domain,
      entries: ordered,
      policy,
      globalShadowMode,
      reading: await peek(ledgerKeyOf(domain, entries)),
      isLocal: (id) => streams.has(id),
    });
  }

  async function listBuckets(
    domain?: string,
    maxBuckets = 1_000,
  ): Promise<BucketList | undefined> {
    if (currentConfig() === undefined) return undefined;
    const held = new Map<
      string,
      { domain: string; entries: Readonly<Record<string, string>> }
    >();
    for (const stream of streams.values()) {
      const streamDomain = stream.domain;
      if (streamDomain === undefined) continue;
      if (domain !== undefined && domain !== "" && streamDomain !== domain)
        continue;
      for (const [ledgerKey, bucket] of stream.buckets)
        if (!held.has(ledgerKey))
          held.set(ledgerKey, {
            domain: streamDomain,
            entries: bucket.entries,
          });
    }
    // The ledger key is the domain, a NUL, then the canonical entries: sorting by it sorts by
    // domain, then entries.
    const keys = [...held.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    const buckets: BucketSnapshot[] = [];
    for (const key of keys.slice(0, Math.max(0, maxBuckets))) {
      const bucket = held.get(key);
      if (bucket === undefined) continue;
      const snapshot = await describeBucket(bucket.domain, bucket.entries);
      if (snapshot !== undefined) buckets.push(snapshot);
    }
    return { buckets, truncated: keys.length > maxBuckets };
  }

  ledger.onRemoteChange?.((ledgerKey) => {
    serially(() => remoteChange(ledgerKey)).catch((err: unknown) => {
      logger.error({ err }, "RLQS split failed");
    });
  });

  return {
    stream: serve,
    tick: () => serially(tick),
    start() {
      if (timer !== undefined) return;
      timer = setInterval(() => {
        serially(tick).catch((err: unknown) => {
          logger.error({ err }, "RLQS split failed");
        });
      }, reportIntervalMs);
      timer.unref();
    },
    close() {
      if (timer !== undefined) clearInterval(timer);
      timer = undefined;
      for (const stream of streams.values()) stream.finish();
    },
    get streamCount() {
      return streams.size;
    },
    describeBucket,
    listBuckets,
  };
}

/** The ledger's key of a bucket: its domain, a NUL, then its canonical entries ({@link bucketKey}). */
export function ledgerKeyOf(
  domain: string,
  entries: Readonly<Record<string, string>>,
): string {
  return `${domain}\u0000${bucketKey(entries)}`;
}
