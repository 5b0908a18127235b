/**
 * Explain's dry run (issue 32 item 4): the request decided by the decision pipeline itself
 * (`RateLimitPipeline.dryRun`: `doLimit` over a read-only view of the store, the local cache
 * only read), with its statistics sent to a probe instead of the limits. A wrapper of the
 * run's read-only decider records, per plan entry, the status the pipeline built and which
 * statistics it counted: Explain describes that decision and keeps no rule of its own.
 */
import type { LimitRequest } from "../limiter/limit-request.js";
import type {
  Decider,
  DryRun,
  PlannedDescriptor,
} from "../limiter/pipeline.js";
import type { RateLimitCache } from "../limiter/rate-limit-cache.js";
import type { GcraDecision } from "../limiter/gcra.js";
import type { RateLimit } from "../config/rate-limit-config.js";
import type { RateLimitResponse_DescriptorStatus } from "../proto.js";
import type { RateLimitStats } from "../stats/stats-manager.js";
import type { Counter } from "../stats/stats-store.js";
import type { DecidedLimit } from "./limit-outcome.js";

/** A dry run and, per plan entry (window counters and token buckets), its decision. */
export interface DryDecision {
  readonly run: DryRun;
  readonly decided: ReadonlyMap<PlannedDescriptor, DecidedLimit>;
}

/** One status call of the run's decider, as recorded. */
interface StatusCall {
  readonly limit: RateLimit;
  readonly status: RateLimitResponse_DescriptorStatus;
  /** A window counter's call (`counterStatus`); undefined for local-cache hits and buckets. */
  readonly window: WindowCall | undefined;
  readonly decision: GcraDecision | undefined;
  readonly over: boolean;
  readonly near: boolean;
}

/** What a `counterStatus` call compared. */
interface WindowCall {
  readonly cacheKey: string;
  readonly current: number;
  readonly previous: number;
  readonly charged: boolean;
}

/**
 * Decides `request` in a dry run through `cache` and pairs each status the pipeline built with
 * its plan entry: the pipeline builds one status per entry, window counters in plan order
 * then token buckets (`statuses`, `allOrNothingStatuses`, `finish` in pipeline.ts); a
 * mismatch is a bug of this pairing and throws.
 *
 * @param incrementAccumulates - the store's `increment` lets two slots of one request on the
 *   same key see each other (memory, kv; not mc)
 * @throws {@link BackendError} when the store fails a read
 * @throws TypeError when `cache` cannot dry-run, or the pairing fails
 */
export async function decideDry(
  cache: RateLimitCache,
  request: LimitRequest,
  incrementAccumulates: boolean,
): Promise<DryDecision> {
  if (cache.dryRun === undefined)
    throw new TypeError("this backend cannot dry-run a charge for Explain");
  const probe = { over: false, near: false };
  const calls: StatusCall[] = [];
  const run = await cache.dryRun(request, {
    stats: probeStats(probe),
    incrementAccumulates,
    decider: (readOnly) => recording(readOnly, probe, calls),
  });
  const plan = run.plan;
  // What the store holds at the keys the local cache answered (the run never reads them): an
  // in-process store reads them for free, a remote one is not asked.
  const cached = plan.counted.filter((e) => e.localCacheHit);
  if (cached.length > 0 && run.backend.inProcess)
    await run.backend.peek(cached);
  const entries = [...plan.counted, ...plan.buckets];
  if (calls.length !== entries.length)
    throw new TypeError(
      `Explain's dry run built ${calls.length} statuses for ${entries.length} plan entries`,
    );
  const decided = new Map<PlannedDescriptor, DecidedLimit>();
  entries.forEach((entry, j) => {
    const call = calls[j]!;
    const window = call.window;
    if (
      call.limit !== entry.limit ||
      (window !== undefined && window.cacheKey !== entry.cacheKey)
    )
      throw new TypeError(
        `Explain's dry run: status ${j} is not plan entry ${entry.cacheKey}'s`,
      );
    decided.set(entry, {
      status: call.status,
      current: window?.current ?? 0,
      previous: window?.previous ?? 0,
      charged: window?.charged ?? plan.charged,
      over: call.over,
      near: call.near,
      decision: call.decision,
    });
  });
  return { run, decided };
}

/** Statistics that only mark, in `probe`, whether a status counted over or near limit. */
function probeStats(probe: { over: boolean; near: boolean }): RateLimitStats {
  const counter = (mark: (() => void) | undefined): Counter => ({
    name: "explain.dry_run",
    add: () => mark?.(),
    value: () => 0,
  });
  const none = counter(undefined);
  return {
    key: "explain.dry_run",
    totalHits: none,
    overLimit: counter(() => (probe.over = true)),
    nearLimit: counter(() => (probe.near = true)),
    overLimitWithLocalCache: none,
    withinLimit: none,
    shadowMode: none,
  };
}

/** `readOnly`, recording each status it builds in `calls` (with the probe's marks). */
function recording(
  readOnly: Decider,
  probe: { over: boolean; near: boolean },
  calls: StatusCall[],
): Decider {
  function record(
    status: RateLimitResponse_DescriptorStatus,
    limit: RateLimit,
    window?: WindowCall,
    decision?: GcraDecision,
  ): RateLimitResponse_DescriptorStatus {
    const { over, near } = probe;
    calls.push({ limit, status, window, decision, over, near });
    probe.over = false;
    probe.near = false;
    return status;
  }
  return {
    ...readOnly,
    counterStatus: (cacheKey, limit, current, previous, hits, now, charged) =>
      record(
        readOnly.counterStatus(
          cacheKey,
          limit,
          current,
          previous,
          hits,
          now,
          charged,
        ),
        limit,
        { cacheKey, current, previous, charged },
      ),
    localCacheStatus: (limit, hits, now) =>
      record(readOnly.localCacheStatus(limit, hits, now), limit),
    bucketStatus: (limit, hits, decision) =>
      record(
        readOnly.bucketStatus(limit, hits, decision),
        limit,
        undefined,
        decision,
      ),
  };
}
