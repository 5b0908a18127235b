import type { BucketSlot, CounterSlot } from "../../limiter/counter-backend.js";
import { gcraDecisionFromReply } from "../../limiter/gcra-scripts.js";

/**
 * One request's commands for one kv instance, as the client queues, writes and (cluster) routes
 * them; the replies are written back into it.
 */
export type KvJob = KvGetJob | KvIncrementJob | KvBucketJob;

/** GET per key; the values land in {@link KvGetJob.results}. */
export interface KvGetJob {
  readonly kind: "get";
  /** Keys of this instance. */
  readonly cacheKeys: readonly string[];
  /** Parallel to `cacheKeys`: the current value (0 when absent). */
  readonly results: number[];
  /** First failure of any of the job's commands (the first one wins); undefined when none. */
  failure: unknown;
}

/**
 * INCRBY + EXPIRE per slot (its `increment` and `expirationSeconds`); the counter after it
 * lands in the slot's `current`. With `readPrevious`, also GET of each sliding window's
 * previous key, into the slot's `previous`.
 */
export interface KvIncrementJob {
  readonly kind: "incr";
  /** The counters of this instance. */
  readonly slots: readonly CounterSlot[];
  /** Whether to GET the previous window's key of slots that have one. */
  readonly readPrevious: boolean;
  /** First failure of any of the job's commands (the first one wins); undefined when none. */
  failure: unknown;
}

/**
 * One token-bucket script call (`gcraScript`, by `EVALSHA`) per slot; the decision lands in the
 * slot's `decision` ({@link applyBucketReply}).
 */
export interface KvBucketJob {
  readonly kind: "gcra";
  /** The token buckets of this instance; every one has its `tokenBucket` params. */
  readonly slots: readonly BucketSlot[];
  /** The request time, integer µs since the Unix epoch (the script's "now"). */
  readonly nowUs: number;
  /** First failure of any of the job's commands (the first one wins); undefined when none. */
  failure: unknown;
}

/** Number of keys a job writes or reads (previous windows' keys not counted). */
export function jobSize(job: KvJob): number {
  return job.kind === "get" ? job.cacheKeys.length : job.slots.length;
}

/** The cache key of a job's `index`-th key. */
export function jobKey(job: KvJob, index: number): string {
  return job.kind === "get"
    ? job.cacheKeys[index]!
    : job.slots[index]!.cacheKey;
}

/**
 * Turns the token-bucket script's reply for the job's `index`-th slot into its decision; a
 * reply that is not `[0|1, TAT ≥ now, 0|1]` is recorded as the job's failure (the client then
 * rejects with a `BackendError`).
 */
export function applyBucketReply(
  job: KvBucketJob,
  index: number,
  reply: unknown,
): void {
  const slot = job.slots[index]!;
  try {
    if (!Array.isArray(reply))
      throw new RangeError(
        `unexpected token bucket script reply ${String(reply)}`,
      );
    slot.decision = gcraDecisionFromReply(
      (reply as unknown[]).map(Number),
      job.nowUs,
      slot.increment,
      slot.tokenBucket!,
    );
  } catch (err) {
    job.failure ??= err;
  }
}
