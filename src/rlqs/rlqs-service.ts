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
  RateLimitStrategy_BlanketRule,
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
  parseBucketKey,
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
   * Describes every bucket a stream is subscribed to, as {@link RlqsService.describeBucket}
   * does, sorted by domain then canonical entries: this replica's streams' buckets, and with a
   * shared ledger (kv) the other replicas' too (a bucket whose every stream is gone is left
   * out).
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
  /** Its rate ({@link actionRate}). */
  lastRate?: number;
}

/**
 * The rate an action lets through, requests per second: a token bucket's tokens per fill over
 * its interval, 0 for DENY_ALL, infinity for ALLOW_ALL (and anything else).
 */
function actionRate(action: RateLimitQuotaResponse_BucketAction): number {
  const kind = action.bucketAction;
  if (kind.case !== "quotaAssignmentAction") return Number.POSITIVE_INFINITY;
  const strategy = kind.value.rateLimitStrategy?.strategy;
  if (strategy?.case === "tokenBucket") {
    const seconds = Number(strategy.value.fillInterval?.seconds ?? 0n);
    return seconds > 0 ? (strategy.value.tokensPerFill ?? 0) / seconds : 0;
  }
  if (
    strategy?.case === "blanketRule" &&
    strategy.value === RateLimitStrategy_BlanketRule.DENY_ALL
  )
    return 0;
  return Number.POSITIVE_INFINITY;
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
  // Between ticks, a change of a bucket's streams or demands is split at once, but of the new
  // shares only those that shrink are pushed at once (so that the shares in force never add
  // up to more than L); those that grow wait until `minResplitMs` after the bucket's last
  // growth push, and are pushed together. With N Envoys reporting every interval this bounds
  // the growth pushes of a bucket to about 5N per interval instead of N².
  const minResplitMs = Math.max(1, Math.floor(reportIntervalMs / 5));
  /** Last push of grown shares of each bucket (ledger key), server ms. */
  const lastGrowthMs = new Map<string, number>();
  /** Growth pushes put off, by ledger key. */
  const deferred = new Map<string, NodeJS.Timeout>();

  /**
   * Pushes a changed bucket's shrunk shares at once, and its grown shares at once when the
   * last growth push of the bucket is `minResplitMs` old, else when it will be (one pending
   * push per bucket).
   */
  async function resplit(domain: string, bucket: StreamBucket): Promise<void> {
    const ledgerKey = bucket.ledgerKey;
    const waitMs =
      (lastGrowthMs.get(ledgerKey) ?? Number.NEGATIVE_INFINITY) +
      minResplitMs -
      clock.nowMs();
    if (waitMs <= 0) {
      await pushSplits([{ domain, bucket }], undefined, "changed");
      return;
    }
    const held = await pushSplits([{ domain, bucket }], undefined, "shrunk");
    if (!held || deferred.has(ledgerKey)) return;
    const timer = setTimeout(() => {
      deferred.delete(ledgerKey);
      serially(() =>
        pushSplits([{ domain, bucket }], undefined, "changed").then(
          () => undefined,
        ),
      ).catch((err: unknown) => {
        logger.error({ err }, "RLQS split failed");
      });
    }, waitMs);
    timer.unref();
    deferred.set(ledgerKey, timer);
  }
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
   * Splits the given buckets and pushes one response per stream holding all its actions.
   * `mode`: `all` pushes every action (the tick: it renews their time to live); `changed`
   * leaves out an action equal to the one last pushed to that stream; `shrunk` pushes only
   * the actions that lower the stream's rate, and holds the others back.
   *
   * @returns whether an action was held back (`shrunk`)
   */
  async function pushSplits(
    buckets: Iterable<{ domain: string; bucket: StreamBucket }>,
    extra?: Map<QuotaStream, RateLimitQuotaResponse_BucketAction[]>,
    mode: "all" | "changed" | "shrunk" = "all",
  ): Promise<boolean> {
    const perStream =
      extra ?? new Map<QuotaStream, RateLimitQuotaResponse_BucketAction[]>();
    const nowMs = clock.nowMs();
    let heldBack = false;
    for (const { domain, bucket } of buckets) {
      const actions = await splitStreams(domain, bucket);
      if (actions === undefined) continue;
      let grew = false;
      for (const [id, action] of actions) {
        const stream = streams.get(id);
        if (stream === undefined) continue;
        const held = stream.buckets.get(bucket.ledgerKey);
        if (held !== undefined) {
          const signature = actionSignature(action);
          if (mode !== "all" && held.lastPushed === signature) continue;
          const rate = actionRate(action);
          if (rate > (held.lastRate ?? Number.POSITIVE_INFINITY)) {
            if (mode === "shrunk") {
              heldBack = true;
              continue;
            }
            grew = true;
          }
          held.lastPushed = signature;
          held.lastRate = rate;
        }
        let list = perStream.get(stream);
        if (list === undefined) {
          list = [];
          perStream.set(stream, list);
        }
        list.push(action);
      }
      if (grew) lastGrowthMs.set(bucket.ledgerKey, nowMs);
    }
    for (const [stream, actions] of perStream) stream.push(actions);
    return heldBack;
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
    const changed: { domain: string; bucket: StreamBucket }[] = [];
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
      // A new subscription is answered at once (the newcomer's share, the others' shrunk
      // ones); a report that brings a new measurement of demand re-splits the bucket (see
      // `resplit`): waiting for the next tick left a light Envoy's unused fair share idle for
      // up to one report interval.
      if (first) subscribed.push({ domain, bucket });
      else if (allowed + denied > 0) changed.push({ domain, bucket });
    }
    if (subscribed.length > 0)
      await pushSplits(subscribed, undefined, "changed");
    for (const { domain: d, bucket } of changed) await resplit(d, bucket);
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
    // The tick splits every bucket: the re-splits put off are done.
    for (const pending of deferred.values()) clearTimeout(pending);
    deferred.clear();
    await pushSplits(buckets.values(), abandoned);
    for (const ledgerKey of lastGrowthMs.keys())
      if (!buckets.has(ledgerKey)) lastGrowthMs.delete(ledgerKey);
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
        // One split answers every local stream of the bucket; as for a local report, shrunk
        // shares at once, grown ones at most every `minResplitMs`.
        await resplit(stream.domain, bucket);
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
    const local = new Set(held.keys());
    for (const ledgerKey of (await ledger.bucketKeys?.()) ?? []) {
      if (held.has(ledgerKey)) continue;
      const bucket = parseLedgerKey(ledgerKey);
      if (
        bucket === undefined ||
        (domain !== undefined && domain !== "" && bucket.domain !== domain)
      )
        continue;
      held.set(ledgerKey, bucket);
    }
    // The ledger key is the domain, a NUL, then the canonical entries: sorting by it sorts by
    // domain, then entries.
    const keys = [...held.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    const buckets: BucketSnapshot[] = [];
    for (const key of keys.slice(0, Math.max(0, maxBuckets))) {
      const bucket = held.get(key);
      if (bucket === undefined) continue;
      const snapshot = await describeBucket(bucket.domain, bucket.entries);
      // Another replica's bucket whose streams have all gone (stale fields) is not held.
      if (
        snapshot !== undefined &&
        (local.has(key) || snapshot.streams.length > 0)
      )
        buckets.push(snapshot);
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
      for (const pending of deferred.values()) clearTimeout(pending);
      deferred.clear();
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
/** The domain and entries of a ledger key ({@link ledgerKeyOf}); `undefined` if not one. */
export function parseLedgerKey(
  ledgerKey: string,
): { domain: string; entries: Record<string, string> } | undefined {
  const nul = ledgerKey.indexOf("\u0000");
  if (nul < 0) return undefined;
  const entries = parseBucketKey(ledgerKey.slice(nul + 1));
  return entries === undefined
    ? undefined
    : { domain: ledgerKey.slice(0, nul), entries };
}

export function ledgerKeyOf(
  domain: string,
  entries: Readonly<Record<string, string>>,
): string {
  return `${domain}\u0000${bucketKey(entries)}`;
}
