// The QuotaLedger shared by the replicas behind one kv store (BACKEND_TYPE=kv), so that every
// replica computes the same split of a bucket (docs/rlqs.md, "Several replicas").
//
// One hash per bucket, one field per stream. A stream's field is written only by the replica
// that holds the stream (no write race): its measurement, its smoothed demand and the time it
// was last written. `demands()` reads every replica's fields, drops the ones nobody has
// refreshed for a few report intervals (a dead replica's streams) and returns them sorted by
// stream id, so every replica's water-filling sees the same input. A replica whose stream
// changes a bucket's demands publishes the bucket on one channel; the other replicas re-split
// it for their own streams at once instead of at their next tick. A store failure never fails
// a call: the ledger goes on with the last demands it read and its own streams. The ledger
// speaks to the kv instance through a {@link LedgerStorage} (backends/kv/
// kv-quota-ledger-commands.ts holds the keys, under `CACHE_KEY_PREFIX`).

import { randomBytes } from "node:crypto";
import type { Logger } from "pino";
import { statNames } from "../stats/names.js";
import type { Counter, StatsStore } from "../stats/stats-store.js";
import { systemClock, type Clock } from "../util/clock.js";
import type { LedgerStorage } from "./ledger-storage.js";
import {
  recordUsage,
  type BucketUsage,
  type LedgerReading,
  type LedgerStream,
  type QuotaLedger,
  type StreamUsage,
} from "./quota-ledger.js";

/** Options of {@link KvQuotaLedger}. */
export interface KvQuotaLedgerOptions {
  /**
   * The shared storage (connected by `start`): `KvQuotaLedgerCommands` of backends/kv, under
   * `CACHE_KEY_PREFIX`.
   */
  readonly storage: LedgerStorage;
  /** `RLQS_REPORT_INTERVAL`, ms: how often a replica refreshes its streams' fields. */
  readonly reportIntervalMs: number;
  /**
   * A field not refreshed for this many report intervals belongs to a dead replica and is
   * removed. @defaultValue 3
   */
  readonly staleAfterIntervals?: number;
  /** This replica's id, the prefix of its stream ids. @defaultValue 12 random hex digits */
  readonly replicaId?: string;
  /** @defaultValue the system clock */
  readonly clock?: Clock;
  readonly logger: Logger;
  /** Where `ratelimit.rlqs.ledger_errors` counts. @defaultValue not counted */
  readonly stats?: StatsStore;
}

/** One stream's field, as stored (JSON). */
interface StoredStream {
  readonly since: number;
  readonly count: number;
  /** Requests per second; null until measured. */
  readonly demand: number | null;
  /** When the holding replica last wrote the field, its clock, ms. */
  readonly seen: number;
  /** The stream's last report of the bucket, the holder's clock, ms (absent before Explain). */
  readonly reported?: number;
}

interface LocalStream {
  readonly usage: StreamUsage;
  /** When the field was last written successfully, ms; -Infinity after a failed write. */
  writtenMs: number;
}

/** The replica of a stream id (`<replica>.<n>`); undefined for an id without one. */
function replicaOf(stream: string): string | undefined {
  const dot = stream.indexOf(".");
  return dot > 0 ? stream.slice(0, dot) : undefined;
}

function parseStored(
  text: string,
): Pick<StoredStream, "demand" | "seen" | "reported"> | undefined {
  try {
    const value = JSON.parse(text) as Partial<StoredStream> | null;
    if (
      value === null ||
      typeof value.seen !== "number" ||
      (value.demand !== null && typeof value.demand !== "number")
    )
      return undefined;
    return {
      demand: value.demand ?? null,
      seen: value.seen,
      ...(typeof value.reported === "number"
        ? { reported: value.reported }
        : {}),
    };
  } catch {
    return undefined;
  }
}

/** The other replicas' streams of a bucket, read from its hash. */
interface RemoteFields {
  /** Live streams with their stored field, in the hash's order. */
  readonly live: Map<string, Pick<StoredStream, "demand" | "reported">>;
  /** Fields of another replica nobody has refreshed (or unreadable): to remove. */
  readonly stale: string[];
}

/**
 * Sorts a bucket's hash into the live fields of streams this replica does not hold and the
 * stale ones: a field not written for `staleAfterMs` belongs to a dead replica. Shared by the
 * split ({@link KvQuotaLedger.demands}) and Explain ({@link KvQuotaLedger.peek}), so both see
 * the same streams.
 */
function readRemoteFields(
  fields: Readonly<Record<string, string>>,
  local: ReadonlyMap<string, unknown> | undefined,
  ownPrefix: string,
  nowMs: number,
  staleAfterMs: number,
): RemoteFields {
  const live = new Map<string, Pick<StoredStream, "demand" | "reported">>();
  const stale: string[] = [];
  for (const [stream, text] of Object.entries(fields)) {
    if (local?.has(stream) === true) continue;
    const stored = parseStored(text);
    if (stored === undefined || nowMs - stored.seen > staleAfterMs) {
      // Only the holder writes a field, and a holder that wrote nothing for a few
      // intervals is gone (or cut off): its share is no longer reserved.
      if (!stream.startsWith(ownPrefix)) stale.push(stream);
      continue;
    }
    live.set(stream, stored);
  }
  return { live, stale };
}

/** Sorts by stream id: every replica orders the streams alike, so the split is the same. */
function byStreamId<T>(entries: Iterable<[string, T]>): [string, T][] {
  return [...entries].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

/** The {@link QuotaLedger} of several replicas over the kv store (see the file header). */
export class KvQuotaLedger implements QuotaLedger {
  readonly replicaId: string;
  readonly streamIdPrefix: string;
  private readonly storage: LedgerStorage;
  private readonly reportIntervalMs: number;
  private readonly staleAfterMs: number;
  private readonly clock: Clock;
  private readonly logger: Logger;
  private readonly errors: Counter | undefined;
  /** This replica's streams, per bucket. */
  private readonly local = new Map<string, Map<string, LocalStream>>();
  /** The other replicas' demands at the last successful read, per bucket. */
  private readonly lastKnown = new Map<
    string,
    Map<string, number | undefined>
  >();
  private listener: ((bucket: string) => void) | undefined;
  private degraded = false;
  private closed = false;

  constructor(options: KvQuotaLedgerOptions) {
    this.storage = options.storage;
    this.reportIntervalMs = options.reportIntervalMs;
    this.staleAfterMs =
      options.reportIntervalMs * (options.staleAfterIntervals ?? 3);
    this.replicaId = options.replicaId ?? randomBytes(6).toString("hex");
    this.streamIdPrefix = `${this.replicaId}.`;
    this.clock = options.clock ?? systemClock;
    this.logger = options.logger;
    this.errors = options.stats?.counter(statNames.rlqsLedgerErrors);
    this.storage.onAnnouncement((message) => {
      this.heard(message);
    });
    // Subscribes on every (re)connection: a second SUBSCRIBE to the channel is harmless.
    this.storage.onChannelReady(() => {
      this.listen();
    });
  }

  /**
   * Connects both connections and subscribes; resolves when the subscription holds or after
   * `timeoutMs` (the ledger works without it, and subscribes when the store comes).
   */
  async start(timeoutMs = 5_000): Promise<void> {
    this.storage.connect();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      new Promise<void>((resolve) => {
        if (this.storage.channelReady) {
          this.listen();
          resolve();
        } else
          this.storage.onceChannelReady(() => {
            resolve();
          });
      }),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, timeoutMs);
        timer.unref();
      }),
    ]);
    clearTimeout(timer);
  }

  /** Closes both connections (idempotent). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.storage.close();
  }

  onRemoteChange(listener: (bucket: string) => void): void {
    this.listener = listener;
  }

  async report(
    bucket: string,
    stream: string,
    usage: BucketUsage,
    nowMs: number,
  ): Promise<boolean> {
    let streams = this.local.get(bucket);
    if (streams === undefined) {
      streams = new Map();
      this.local.set(bucket, streams);
    }
    let state = streams.get(stream);
    let changed: boolean;
    const first = state === undefined;
    if (state === undefined) {
      // The subscribing report covers an unknown span before it: its counts are not a rate.
      state = {
        usage: { since: nowMs, count: 0, demand: undefined, reportedMs: nowMs },
        writtenMs: -Infinity,
      };
      streams.set(stream, state);
      changed = true;
    } else {
      changed = recordUsage(state.usage, usage, nowMs);
    }
    await this.write(bucket, stream, state, nowMs, changed);
    return first;
  }

  async demands(
    bucket: string,
  ): Promise<ReadonlyMap<string, number | undefined>> {
    const nowMs = this.clock.nowMs();
    const streams = this.local.get(bucket);
    // Keep this replica's fields fresh (Envoy reports every 5 s, but a field must not look
    // dead because its stream was quiet, nor stay missing after a failed write).
    for (const [stream, state] of streams ?? []) {
      if (nowMs - state.writtenMs >= this.reportIntervalMs)
        await this.write(bucket, stream, state, nowMs, false);
    }
    let remote = this.lastKnown.get(bucket);
    try {
      const fields = await this.storage.readStreams(bucket);
      const { live, stale } = readRemoteFields(
        fields,
        streams,
        this.streamIdPrefix,
        nowMs,
        this.staleAfterMs,
      );
      const read = new Map<string, number | undefined>();
      for (const [stream, stored] of live)
        read.set(stream, stored.demand ?? undefined);
      if (stale.length > 0) await this.storage.removeStreams(bucket, stale);
      remote = read;
      if (streams !== undefined) this.lastKnown.set(bucket, read);
      this.recovered();
    } catch (err) {
      this.failed(err);
    }
    const out = new Map<string, number | undefined>();
    for (const [stream, demand] of remote ?? []) out.set(stream, demand);
    for (const [stream, state] of streams ?? [])
      out.set(stream, state.usage.demand);
    return new Map(byStreamId(out));
  }

  /**
   * Reads a bucket as {@link KvQuotaLedger.demands} does (one read of its hash; stale fields are
   * skipped, not removed; this replica's streams from memory), writing nothing and counting
   * no error: the streams, demands and order the split takes.
   */
  async peek(bucket: string): Promise<LedgerReading> {
    const nowMs = this.clock.nowMs();
    const local = this.local.get(bucket);
    const out = new Map<string, LedgerStream>();
    let error: string | undefined;
    try {
      const fields = await this.storage.readStreams(bucket);
      const { live } = readRemoteFields(
        fields,
        local,
        this.streamIdPrefix,
        nowMs,
        this.staleAfterMs,
      );
      for (const [stream, stored] of live)
        out.set(stream, {
          stream,
          demand: stored.demand ?? undefined,
          reportedMs: stored.reported,
          replica: replicaOf(stream),
        });
    } catch (err) {
      // The split goes on with the demands last read (see demands()): show those.
      error = err instanceof Error ? err.message : String(err);
      for (const [stream, demand] of this.lastKnown.get(bucket) ?? [])
        out.set(stream, {
          stream,
          demand,
          reportedMs: undefined,
          replica: replicaOf(stream),
        });
    }
    for (const [stream, state] of local ?? [])
      out.set(stream, {
        stream,
        demand: state.usage.demand,
        reportedMs: state.usage.reportedMs,
        replica: this.replicaId,
      });
    return {
      ledger: "kv",
      replica: this.replicaId,
      streams: byStreamId(out).map(([, s]) => s),
      ...(error !== undefined ? { error } : {}),
    };
  }

  async leave(bucket: string, stream: string): Promise<void> {
    const streams = this.local.get(bucket);
    if (streams?.delete(stream) !== true) return;
    if (streams.size === 0) {
      this.local.delete(bucket);
      this.lastKnown.delete(bucket);
    }
    try {
      await this.storage.removeStreams(bucket, [stream]);
      await this.announce(bucket);
      this.recovered();
    } catch (err) {
      this.failed(err);
    }
  }

  /**
   * Every bucket with a hash in the store (any replica's streams), from the bucket set; the
   * members whose hash has expired are removed from the set ({@link LedgerStorage.listBuckets}).
   * `undefined` (and the failure counted) when the store fails.
   */
  async bucketKeys(): Promise<readonly string[] | undefined> {
    try {
      const buckets = await this.storage.listBuckets();
      this.recovered();
      return buckets;
    } catch (err) {
      this.failed(err);
      return undefined;
    }
  }

  /** Writes a local stream's field (and the hash's expiry); announces a changed demand. */
  private async write(
    bucket: string,
    stream: string,
    state: LocalStream,
    nowMs: number,
    announce: boolean,
  ): Promise<void> {
    const stored: StoredStream = {
      since: state.usage.since,
      count: state.usage.count,
      demand: state.usage.demand ?? null,
      seen: nowMs,
      reported: state.usage.reportedMs,
    };
    try {
      // A bucket whose every holder is gone expires by itself.
      await this.storage.writeStream(
        bucket,
        stream,
        JSON.stringify(stored),
        2 * this.staleAfterMs,
      );
      state.writtenMs = nowMs;
      // After the write: a replica that hears of it reads the new field.
      if (announce) await this.announce(bucket);
      this.recovered();
    } catch (err) {
      state.writtenMs = -Infinity;
      this.failed(err);
    }
  }

  private async announce(bucket: string): Promise<void> {
    await this.storage.announce(JSON.stringify([this.replicaId, bucket]));
  }

  private heard(message: string): void {
    let replica: unknown;
    let bucket: unknown;
    try {
      [replica, bucket] = JSON.parse(message) as unknown[];
    } catch {
      return;
    }
    if (
      typeof bucket !== "string" ||
      replica === this.replicaId ||
      !this.local.has(bucket)
    )
      return;
    this.listener?.(bucket);
  }

  private listen(): void {
    if (this.closed) return;
    this.storage.listen().catch((err: unknown) => {
      this.failed(err);
    });
  }

  private failed(err: unknown): void {
    this.errors?.add(1);
    if (this.degraded || this.closed) return;
    this.degraded = true;
    this.logger.warn(
      { err: err instanceof Error ? err.message : String(err) },
      "RLQS kv ledger unreachable: splitting with the last demands read from the other replicas and this replica's own streams until it answers",
    );
  }

  private recovered(): void {
    if (!this.degraded) return;
    this.degraded = false;
    this.logger.warn("RLQS kv ledger reachable again");
  }
}
