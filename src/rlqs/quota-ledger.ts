// The per-bucket state the split is computed from: which streams report a bucket and their
// measured demand. Behind an interface so that the kv-backed ledger (kv-quota-ledger.ts) can
// hold it for every replica (docs/rlqs.md): each replica records its own streams' reports,
// reads every stream's demand, computes the same split and pushes only to its own streams.

import { smoothDemand } from "./allocator.js";

/** Requests of one bucket on one stream since its previous report. */
export interface BucketUsage {
  readonly allowed: number;
  readonly denied: number;
}

/**
 * Where the streams of each bucket and their demands live. Every method may be asynchronous (a
 * shared store); the memory ledger answers at once.
 */
export interface QuotaLedger {
  /**
   * Records one stream's report of a bucket at server time `nowMs` (Envoy truncates
   * `time_elapsed` to whole seconds, so the server's clock measures the rate).
   *
   * @returns true when this report subscribes the stream to the bucket (its first)
   */
  report(
    bucket: string,
    stream: string,
    usage: BucketUsage,
    nowMs: number,
  ): Promise<boolean>;
  /**
   * The streams of a bucket, in a stable order, with their smoothed demand in requests per
   * second (`undefined` until a measurement covers at least one second).
   */
  demands(bucket: string): Promise<ReadonlyMap<string, number | undefined>>;
  /** Removes a stream from a bucket (abandoned, or the stream ended). */
  leave(bucket: string, stream: string): Promise<void>;
  /**
   * Prefix of this replica's stream ids, so that ids are unique across the replicas sharing
   * the ledger. @defaultValue "" (one replica)
   */
  readonly streamIdPrefix?: string;
  /**
   * Registers the function called with a bucket when another replica changed its streams or
   * demands (the kv ledger's publish/subscribe): the service re-splits it for its own streams
   * at once. Absent on a ledger of one replica.
   */
  onRemoteChange?(listener: (bucket: string) => void): void;
  /**
   * Reads a bucket's streams as {@link QuotaLedger.demands} does (same streams, same order,
   * same demands), with what Explain shows besides; writes nothing and moves no statistic.
   * Absent on a ledger that has nothing more than its demands to show.
   */
  peek?(bucket: string): Promise<LedgerReading>;
  /**
   * The buckets (ledger keys) some stream of any replica sharing the ledger holds, in no
   * particular order, for ListBuckets; `undefined` when they cannot be read now. Absent on a
   * ledger of one replica (the service lists its own streams' buckets).
   */
  bucketKeys?(): Promise<readonly string[] | undefined>;
}

/** One stream of a bucket as {@link QuotaLedger.peek} reads it. */
export interface LedgerStream {
  readonly stream: string;
  /** Smoothed demand, requests per second; undefined until measured. */
  readonly demand: number | undefined;
  /** Server time of the stream's last report of the bucket, ms; undefined when unknown. */
  readonly reportedMs: number | undefined;
  /** The replica holding the stream; undefined on a ledger of one replica. */
  readonly replica: string | undefined;
}

/** A bucket as {@link QuotaLedger.peek} reads it. */
export interface LedgerReading {
  /** The ledger's kind: `memory` (one replica) or `kv` (shared through the kv store). */
  readonly ledger: string;
  /** This replica's id; "" on a ledger of one replica. */
  readonly replica: string;
  /** The streams in the order {@link QuotaLedger.demands} returns them. */
  readonly streams: readonly LedgerStream[];
  /**
   * Why the shared store could not be read (the streams are then this replica's and the
   * demands last read from the others); undefined when it was.
   */
  readonly error?: string;
}

/** One stream's measurement of one bucket. */
export interface StreamUsage {
  /** Start of the measurement in progress (server ms). */
  since: number;
  /** Requests reported since `since`. */
  count: number;
  demand: number | undefined;
  /** The last report (server ms), for Explain. */
  reportedMs: number;
}

/** Shortest span a demand measurement covers; reports closer together are added up. */
const minMeasureMs = 1_000;

/**
 * Adds one report to a stream's measurement, in place: once the measurement covers at least a
 * second, its rate is folded into the smoothed demand and a new measurement starts.
 *
 * @returns true when the demand changed
 */
export function recordUsage(
  state: StreamUsage,
  usage: BucketUsage,
  nowMs: number,
): boolean {
  state.count += usage.allowed + usage.denied;
  state.reportedMs = nowMs;
  const elapsedMs = nowMs - state.since;
  if (elapsedMs < minMeasureMs) return false;
  state.demand = smoothDemand(state.demand, (state.count * 1000) / elapsedMs);
  state.count = 0;
  state.since = nowMs;
  return true;
}

/** The {@link QuotaLedger} of one process (memory backend, one replica). */
export class MemoryQuotaLedger implements QuotaLedger {
  private readonly buckets = new Map<string, Map<string, StreamUsage>>();

  report(
    bucket: string,
    stream: string,
    usage: BucketUsage,
    nowMs: number,
  ): Promise<boolean> {
    let streams = this.buckets.get(bucket);
    if (streams === undefined) {
      streams = new Map();
      this.buckets.set(bucket, streams);
    }
    const state = streams.get(stream);
    if (state === undefined) {
      // The subscribing report covers an unknown span before it: its counts are not a rate.
      streams.set(stream, {
        since: nowMs,
        count: 0,
        demand: undefined,
        reportedMs: nowMs,
      });
      return Promise.resolve(true);
    }
    recordUsage(state, usage, nowMs);
    return Promise.resolve(false);
  }

  demands(bucket: string): Promise<ReadonlyMap<string, number | undefined>> {
    const out = new Map<string, number | undefined>();
    for (const [stream, state] of this.buckets.get(bucket) ?? [])
      out.set(stream, state.demand);
    return Promise.resolve(out);
  }

  peek(bucket: string): Promise<LedgerReading> {
    const streams: LedgerStream[] = [];
    for (const [stream, state] of this.buckets.get(bucket) ?? [])
      streams.push({
        stream,
        demand: state.demand,
        reportedMs: state.reportedMs,
        replica: undefined,
      });
    return Promise.resolve({ ledger: "memory", replica: "", streams });
  }

  leave(bucket: string, stream: string): Promise<void> {
    const streams = this.buckets.get(bucket);
    if (streams !== undefined) {
      streams.delete(stream);
      if (streams.size === 0) this.buckets.delete(bucket);
    }
    return Promise.resolve();
  }
}
