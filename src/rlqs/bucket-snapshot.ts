// A read-only picture of one RLQS bucket for Explain (`ExplainBucket`, `ListBuckets`): its
// policy, its rate L and the current split among its streams, computed by the split's own
// function (bucket-split.ts) from what the ledger holds now. Taking one moves no statistic,
// pushes nothing and writes nothing to the ledger.

import { shapeRate, type Assignment } from "./assignment.js";
import type { BucketPolicy } from "./bucket-lookup.js";
import { splitBucket } from "./bucket-split.js";
import type { LedgerReading } from "./quota-ledger.js";

/** One stream's part of a bucket's split. */
export interface StreamSnapshot {
  /** The stream id (with the kv ledger, `<replica>.<n>`). */
  readonly streamId: string;
  /** The replica holding the stream; undefined when the ledger does not say (one replica). */
  readonly replica: string | undefined;
  /** This replica holds the stream (and pushes its assignments). */
  readonly local: boolean;
  /** Smoothed measured demand, requests per second; undefined until measured. */
  readonly demandPerSecond: number | undefined;
  /** The stream's share of L, requests per second. */
  readonly sharePerSecond: number;
  /** What the split tells the stream. */
  readonly assignment: Assignment;
  /** Shadow mode only: what the stream would be told were the rule enforced. */
  readonly shadowAssignment: Assignment | undefined;
  /** Long-run rate of the stream's token bucket (also in shadow mode), requests per second. */
  readonly assignedPerSecond: number;
  /** The stream's last report of the bucket, server ms; undefined when unknown. */
  readonly lastReportMs: number | undefined;
}

/** One bucket: its rule's policy and the current split of its rate among its streams. */
export interface BucketSnapshot {
  readonly domain: string;
  /**
   * The bucket's entries in the order the domain's tree asks for them (the descriptor
   * ShouldRateLimit would look up); sorted by key when no rule is reached.
   */
  readonly entries: readonly (readonly [string, string])[];
  /** The policy every stream of the bucket is told (see `bucketPolicy`). */
  readonly policy: BucketPolicy;
  /** `SHADOW_MODE` is on. */
  readonly globalShadowMode: boolean;
  /** L, requests per second; 0 for a bucket told ALLOW_ALL without a limit. */
  readonly ratePerSecond: number;
  /** The streams in the order the split takes them. */
  readonly streams: readonly StreamSnapshot[];
  /** Sum of the shares, requests per second. */
  readonly shareSumPerSecond: number;
  /** Sum of the token buckets' long-run rates, requests per second. */
  readonly assignedSumPerSecond: number;
  /** `memory` or `kv`. */
  readonly ledger: string;
  /** The replica that took the snapshot; "" with one replica. */
  readonly replica: string;
  /** Why the shared store could not be read; undefined when it was. */
  readonly ledgerError: string | undefined;
}

/** What {@link snapshotBucket} is computed from. */
export interface BucketSnapshotInput {
  readonly domain: string;
  /** The entries in tree order (see {@link BucketSnapshot.entries}). */
  readonly entries: readonly (readonly [string, string])[];
  readonly policy: BucketPolicy;
  readonly globalShadowMode: boolean;
  /** The bucket's streams as the ledger holds them now. */
  readonly reading: LedgerReading;
  /** Whether this replica holds a stream. */
  readonly isLocal: (streamId: string) => boolean;
}

/**
 * Computes a bucket's split from the ledger's reading exactly as the service does before it
 * pushes ({@link splitBucket} over the same demands in the same order), and describes it.
 */
export function snapshotBucket(input: BucketSnapshotInput): BucketSnapshot {
  const { policy, reading } = input;
  const split = splitBucket(
    policy,
    reading.streams.map((s) => s.demand),
  );
  const shadow = policy.kind === "limited" && policy.shadow;
  let shareSum = 0;
  const streams = reading.streams.map((s, i): StreamSnapshot => {
    const share = split.shares[i] ?? 0;
    shareSum += share;
    const enforced = split.enforced[i] ?? { kind: "allow_all" };
    return {
      streamId: s.stream,
      replica: s.replica,
      local: input.isLocal(s.stream),
      demandPerSecond: s.demand,
      sharePerSecond: share,
      assignment: split.assignments[i] ?? { kind: "allow_all" },
      shadowAssignment: shadow ? enforced : undefined,
      assignedPerSecond:
        enforced.kind === "token_bucket" ? shapeRate(enforced.shape) : 0,
      lastReportMs: s.reportedMs,
    };
  });
  return {
    domain: input.domain,
    entries: input.entries,
    policy,
    globalShadowMode: input.globalShadowMode,
    ratePerSecond: policy.kind === "limited" ? policy.ratePerSecond : 0,
    streams,
    shareSumPerSecond: shareSum,
    assignedSumPerSecond: split.assignedPerSecond,
    ledger: reading.ledger,
    replica: reading.replica,
    ledgerError: reading.error,
  };
}
