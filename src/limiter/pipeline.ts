/**
 * The decision pipeline: plan → count → decide, the one implementation of a rate-limit
 * decision over any {@link CounterBackend}. The backend only reads and writes counters; every
 * rule (near and over limit, shadow mode, local cache, stop-increment, all-or-nothing charging
 * and its compensation, statistics) runs here, identically for memory, kv and mc.
 */
import {
  RateLimitResponse_Code as Code,
  type RateLimitResponse_DescriptorStatus,
} from "../proto.js";
import type { RateLimitStats } from "../stats/stats-manager.js";
import type { Counter, StatsStore } from "../stats/stats-store.js";
import type { Clock } from "../util/clock.js";
import { lazyCompensatedCounter } from "./all-or-nothing.js";
import type { Decider } from "./decide.js";
import { cacheKeyError, type CacheKeyError } from "./cache-key-error.js";
import type { CounterBackend } from "./counter-backend.js";
import { gcraDecide } from "./gcra.js";
import { LeaseTable } from "./lease-table.js";
import type { LimitRequest } from "./limit-request.js";
import type { CounterReading, RateLimitCache } from "./rate-limit-cache.js";
import { ReadOnlyCounterBackend } from "./read-only-backend.js";
import type { PlannedDescriptor, RequestPlan } from "./request-plan.js";

// The types of the dry run's API, for its caller (Explain), which reads the limiter only
// through this file: the decider it wraps, the plan entries it pairs, the buckets' readings.
export type { Decider } from "./decide.js";
export type { PlannedDescriptor } from "./request-plan.js";
export type { BucketReading } from "./read-only-backend.js";

/** Options of {@link RateLimitPipeline.dryRun}. */
export interface DryRunOptions {
  /** Where the run's statistics go instead of the limits' own (`Decider.readOnly`). */
  readonly stats: RateLimitStats;
  /**
   * Wraps the read-only decider the run decides with (Explain records each limit's status
   * through it); the decider itself when undefined.
   */
  readonly decider?: (readOnly: Decider) => Decider;
  /**
   * Whether slots of one `increment` with the same key see each other's increments (see
   * `ReadOnlyBackendOptions`). @defaultValue true
   */
  readonly incrementAccumulates?: boolean;
}

/** What {@link RateLimitPipeline.dryRun} decided. */
export interface DryRun {
  /** One status per descriptor, as `doLimit` would answer. */
  readonly statuses: RateLimitResponse_DescriptorStatus[];
  /** The plan, as the run counted it (`LimitRequest.counted`). */
  readonly plan: RequestPlan;
  /** The read-only backend the run counted over: what the store held. */
  readonly backend: ReadOnlyCounterBackend;
  /** What stop-increment held back (see {@link RequestPlan.stopped}). */
  readonly stopped: RequestPlan["stopped"];
}

/** Options of {@link RateLimitPipeline}. */
export interface RateLimitPipelineOptions<B extends CounterBackend> {
  /** The counter store. */
  readonly backend: B;
  /** Cache keys, thresholds, statistics and status building (with the local cache). */
  readonly decider: Decider;
  /**
   * When a request has a descriptor that would go over its limit, increment only the
   * descriptors that would go over; with a local-cache hit, increment none
   * (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`,
   * docs/reference-parity.md#stop-increment). The mc backend ignores it upstream, so its
   * wiring leaves it off. @defaultValue false
   */
  readonly stopCacheKeyIncrementWhenOverlimit?: boolean;
  /**
   * Where `ratelimit.all_or_nothing.compensated` is created at the first compensation.
   * @defaultValue none
   */
  readonly statsStore?: StatsStore;
  /**
   * Leave each counted request's plan in `LimitRequest.counted` (what the store read, for the
   * request's `Decision`: the config canary reads it). The store's pipeline does; the backend
   * guard's local limiters do not. @defaultValue true
   */
  readonly recordsCounts?: boolean;
  /**
   * The clock hot-key leases are sized by (`lease: true` rules, docs/configuration.md#leases):
   * when set, the usual charge of a leased limit takes and spends leases ({@link LeaseTable});
   * when undefined (the guard's local limiters, the canary, Explain), leased limits are counted
   * in the store like any other. Limits without `lease` are never affected.
   * @defaultValue undefined
   */
  readonly leaseClock?: Clock;
}

/**
 * The {@link RateLimitCache} the service calls, over one {@link CounterBackend}:
 *
 * 1. plan: {@link Decider.plan} (cache keys, `total_hits`, local-cache verdicts), then the
 *    backend's cache-key rules (a {@link CacheKeyError} before any I/O);
 * 2. count: one backend call for the usual charge; a read first for stop-increment; the
 *    store's atomic operation or a check-then-increment with compensation for all-or-nothing;
 * 3. decide: one status per descriptor from the counts.
 */
export class RateLimitPipeline<
  B extends CounterBackend = CounterBackend,
> implements RateLimitCache {
  /** The counter store (tests and the app read backend-specific state through it). */
  readonly backend: B;
  private readonly base: Decider;
  private readonly stopIncrement: boolean;
  /** Whether the backend needs each counter's expiration (not for in-process counters). */
  private readonly expirations: boolean;
  private readonly compensated: Pick<Counter, "add"> | undefined;
  private readonly recordsCounts: boolean;
  /** This pipeline's leases; undefined without {@link RateLimitPipelineOptions.leaseClock}. */
  readonly leases: LeaseTable | undefined;

  constructor(options: RateLimitPipelineOptions<B>) {
    this.backend = options.backend;
    this.base = options.decider;
    this.stopIncrement = options.stopCacheKeyIncrementWhenOverlimit ?? false;
    this.expirations = options.backend.inProcess !== true;
    this.compensated = lazyCompensatedCounter(options.statsStore);
    this.recordsCounts = options.recordsCounts ?? true;
    this.leases =
      options.leaseClock === undefined
        ? undefined
        : new LeaseTable({
            backend: options.backend,
            clock: options.leaseClock,
          });
  }

  /**
   * Counts the hits of one request and returns one status per descriptor.
   *
   * @throws {@link CacheKeyError} when a cache key breaks the backend's rules (nothing read or
   *   written; `total_hits` already counted, as for a backend failure)
   * @throws {@link BackendError} when the backend fails (`total_hits` already counted, as
   *   upstream)
   */
  doLimit(
    request: LimitRequest,
  ): Promise<RateLimitResponse_DescriptorStatus[]> {
    const plan = this.base.plan(request, true, this.expirations);
    if (this.backend.cacheKeyRules !== undefined) {
      const error = this.keyError(plan);
      if (error !== undefined) return Promise.reject(error);
    }
    if (plan.refunds.length > 0) return this.refundThenCharge(plan);
    return this.charge(plan);
  }

  /** Counts the hits of a planned request (every rule but refunds) and decides. */
  private charge(
    plan: RequestPlan,
  ): Promise<RateLimitResponse_DescriptorStatus[]> {
    if (plan.allOrNothing) return this.chargeAllOrNothing(plan);
    if (plan.buckets.length > 0) return this.chargeWithBuckets(plan);
    const sent = plan.sent;
    if (sent.length === 0) return Promise.resolve(this.statuses(plan));
    if (this.stopIncrement) return this.chargeStopping(plan);
    if (this.leases !== undefined && sent.some(leased))
      return this.chargeLeased(plan, this.leases);
    const written = this.backend.increment(sent, plan.nowSeconds);
    if (written === undefined) return Promise.resolve(this.statuses(plan));
    return written.then(() => this.statuses(plan));
  }

  /**
   * The usual charge of a request with a leased limit (docs/configuration.md#leases): each
   * leased entry is served by the lease table (from its lease, or with one increment taking a
   * new one), the others are incremented together as usual; then every status is decided from
   * the counters the table left (within the limit when admitted, over it when refused).
   */
  private async chargeLeased(
    plan: RequestPlan,
    leases: LeaseTable,
  ): Promise<RateLimitResponse_DescriptorStatus[]> {
    const now = plan.nowSeconds;
    const direct: PlannedDescriptor[] = [];
    const pending: Promise<void>[] = [];
    for (const d of plan.sent) {
      if (!leased(d)) {
        direct.push(d);
        continue;
      }
      const taken = leases.take(d, now);
      if (taken !== undefined) pending.push(taken);
    }
    if (direct.length > 0) {
      const written = this.backend.increment(direct, now);
      if (written !== undefined) pending.push(written);
    }
    if (pending.length > 0) await Promise.all(pending);
    return this.statuses(plan);
  }

  /**
   * The usual charge of a request with token buckets: the buckets' GCRA steps and the window
   * counters' increments are issued together (a remote store gets them in one round trip),
   * then every status is decided. Stop-increment applies among the window counters; a token
   * bucket never takes a refused hit anyway.
   */
  private async chargeWithBuckets(
    plan: RequestPlan,
  ): Promise<RateLimitResponse_DescriptorStatus[]> {
    const backend = this.backend;
    const sent = plan.sent;
    await Promise.all([
      backend.takeTokens(plan.buckets, plan.nowUs),
      sent.length === 0
        ? undefined
        : this.stopIncrement
          ? this.countStopping(plan)
          : backend.increment(sent, plan.nowSeconds),
    ]);
    return this.statuses(plan);
  }

  /**
   * Reads the token buckets of a plan without taking anything, and leaves in each bucket's
   * `decision` what its hits would get: the state read (nothing taken: `limit_remaining`
   * before the request) when they would be admitted, else the refusal.
   */
  private async previewBuckets(plan: RequestPlan): Promise<void> {
    const buckets = plan.buckets;
    if (buckets.length === 0) return;
    for (const d of buckets) d.increment = 0;
    await this.backend.takeTokens(buckets, plan.nowUs);
    for (const d of buckets) {
      d.increment = d.hitsAddend;
      const read = d.decision!;
      const would = gcraDecide(
        read.tatUs,
        plan.nowUs,
        d.hitsAddend,
        d.tokenBucket!,
      );
      if (!would.allowed) d.decision = would;
    }
  }

  /**
   * Gives back the hits of the buckets a refused all-or-nothing request took (a refund of the
   * same hits); their `decision` becomes the state after the refund.
   */
  private async giveBackBuckets(plan: RequestPlan): Promise<void> {
    const taken = plan.buckets.filter(
      (d) => d.decision?.newTatUs !== undefined && d.hitsAddend > 0,
    );
    if (taken.length === 0) return;
    for (const d of taken) d.increment = -d.hitsAddend;
    await this.backend.takeTokens(taken, plan.nowUs);
    for (const d of taken) d.increment = d.hitsAddend;
  }

  /** Whether a token bucket that is not in shadow mode refused (or would refuse) its hits. */
  private bucketRefuses(plan: RequestPlan): boolean {
    return plan.buckets.some(
      (d) => d.decision?.allowed === false && !d.limit.shadowMode,
    );
  }

  /**
   * Decides `request` as {@link doLimit} would, with the same charge mode and rules, over a
   * {@link ReadOnlyCounterBackend} of this pipeline's store and a read-only decider: nothing
   * is written, no statistic of a limit moves, the local cache is only read (the Explain API,
   * issue 32 item 4). `request.counted` is set to the run's plan.
   *
   * @throws {@link BackendError} when the store fails a read
   */
  async dryRun(request: LimitRequest, options: DryRunOptions): Promise<DryRun> {
    const backend = new ReadOnlyCounterBackend(this.backend, {
      incrementAccumulates: options.incrementAccumulates ?? true,
    });
    const readOnly = this.base.readOnly(options.stats);
    const run = new RateLimitPipeline({
      backend,
      decider: options.decider?.(readOnly) ?? readOnly,
      stopCacheKeyIncrementWhenOverlimit: this.stopIncrement,
    });
    const statuses = await run.doLimit(request);
    const plan = request.counted!;
    // A request whose every counter the local cache answered sends none, so holdBack never
    // ran: stop-increment holds them all back.
    const stopped =
      plan.stopped ??
      (this.stopIncrement && !plan.allOrNothing && plan.sent !== plan.counted
        ? "local-cache"
        : undefined);
    return { statuses, plan, backend, stopped };
  }

  /** Starts the backend (connects and waits for it), if it has a start step. */
  start(): Promise<void> {
    return this.backend.start?.() ?? Promise.resolve();
  }

  flush(): Promise<void> {
    return this.backend.flush();
  }

  /** Closes the backend; leases still held are dropped and counted in `lease_unused`. */
  close(): Promise<void> {
    this.leases?.clear();
    return this.backend.close();
  }

  /**
   * Refunds (`is_negative_hits`, docs/configuration.md#refunds-and-in-flight-limits): each
   * refunded counter is decremented by its hits, never below 0 and never created (the
   * backend's `add` with a negative increment), before the request's other descriptors are
   * charged as usual; a refund is always OK and counts no statistic. In an all-or-nothing
   * domain refunds are applied whatever the charge decides: a refund cannot be refused.
   */
  private async refundThenCharge(
    plan: RequestPlan,
  ): Promise<RateLimitResponse_DescriptorStatus[]> {
    const leases = this.leases;
    const refunds =
      leases === undefined ? plan.refunds : refundLeases(plan.refunds, leases);
    const backend = this.backend;
    if (refunds.length === 0) return this.charge(plan);
    if (!refunds.some(takesTokens)) {
      await backend.add(refunds, plan.nowSeconds);
    } else {
      // Token buckets give back with a GCRA step (the TAT moves back, never below now).
      const windows = refunds.filter((d) => !takesTokens(d));
      const buckets = refunds.filter(takesTokens);
      await Promise.all([
        windows.length > 0 ? backend.add(windows, plan.nowSeconds) : undefined,
        backend.takeTokens(buckets, plan.nowUs),
      ]);
    }
    return this.charge(plan);
  }

  /** Returns the {@link CacheKeyError} of the first cache key the backend cannot store. */
  private keyError(plan: RequestPlan): CacheKeyError | undefined {
    const rules = this.backend.cacheKeyRules!;
    const refunds = plan.refunds;
    const buckets = plan.buckets;
    for (const d of refunds.length === 0 && buckets.length === 0
      ? plan.counted
      : [...plan.counted, ...buckets, ...refunds]) {
      const problem = rules.problem(d.cacheKey);
      if (problem === undefined) continue;
      return cacheKeyError(
        rules,
        problem,
        d.index,
        plan.domain,
        d.descriptor,
        d.limit,
        d.cacheKey,
      );
    }
    return undefined;
  }

  /**
   * `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` (docs/reference-parity.md#stop-increment): with
   * a local-cache hit every other counter is written with 0; otherwise the counters are read
   * first, and if any descriptor would go over (weighted count + hits > limit), only those
   * counters are incremented.
   */
  private async chargeStopping(
    plan: RequestPlan,
  ): Promise<RateLimitResponse_DescriptorStatus[]> {
    await this.countStopping(plan);
    return this.statuses(plan);
  }

  /** The reads and writes of {@link chargeStopping}, without the statuses. */
  private async countStopping(plan: RequestPlan): Promise<void> {
    if (plan.sent === plan.counted) await this.backend.peek(plan.sent);
    plan.stopped = this.holdBack(plan);
    await this.backend.increment(plan.sent, plan.nowSeconds);
  }

  /**
   * The stop-increment rule over counters already read: sets each descriptor's `increment`
   * (0 where held back) and says why any was held back.
   */
  private holdBack(plan: RequestPlan): RequestPlan["stopped"] {
    const counted = plan.counted;
    if (plan.sent !== counted) {
      for (const d of counted) d.increment = 0;
      return "local-cache";
    }
    let anyOver = false;
    for (const d of counted) {
      const over = this.wouldExceed(d, plan.nowSeconds);
      if (!over) d.increment = 0;
      anyOver ||= over;
    }
    if (anyOver) return "over-limit";
    for (const d of counted) d.increment = d.hitsAddend;
    return undefined;
  }

  /** Whether a descriptor's counters as read plus its hits go over its limit. */
  private wouldExceed(d: PlannedDescriptor, nowSeconds: number): boolean {
    return (
      this.base.weightedCount(d.limit, d.current, d.previous, nowSeconds) +
        d.hitsAddend >
      d.limit.requestsPerUnit
    );
  }

  /** The statuses of a request charged each (the usual mode), from its counters after it. */
  private statuses(plan: RequestPlan): RateLimitResponse_DescriptorStatus[] {
    const base = this.base;
    const now = plan.nowSeconds;
    const statuses = new Array<RateLimitResponse_DescriptorStatus>(plan.size);
    for (const d of plan.counted) {
      const limit = d.limit;
      put(
        statuses,
        d.index,
        d.localCacheHit
          ? base.localCacheStatus(limit, d.hitsAddend, now)
          : base.counterStatus(
              d.cacheKey,
              limit,
              d.current,
              d.previous,
              d.hitsAddend,
              now,
              true,
            ),
      );
    }
    return this.finish(statuses, plan);
  }

  /**
   * Completes the statuses of a request whose window counters are decided: adds those of its
   * token buckets (from their `decision`) and refunds, merges the limits of a descriptor
   * into the tightest ({@link put}), and answers OK for descriptors without a limit; then
   * leaves the plan in the request's `counted` (with `recordsCounts`).
   *
   * @param charged - false when all-or-nothing charging refused the request
   */
  private finish(
    statuses: RateLimitResponse_DescriptorStatus[],
    plan: RequestPlan,
    charged = true,
  ): RateLimitResponse_DescriptorStatus[] {
    const base = this.base;
    for (const d of plan.buckets)
      put(
        statuses,
        d.index,
        base.bucketStatus(d.limit, d.hitsAddend, d.decision!),
      );
    for (const d of plan.refunds)
      put(
        statuses,
        d.index,
        takesTokens(d)
          ? base.bucketStatus(d.limit, d.hitsAddend, d.decision!)
          : base.refundStatus(d.limit, d.current, d.previous, plan.nowSeconds),
      );
    for (let i = 0; i < plan.size; i++) statuses[i] ??= base.okWithoutLimit();
    if (this.recordsCounts) {
      plan.charged = charged;
      plan.request.counted = plan;
    }
    return statuses;
  }

  /**
   * All-or-nothing charging (`charge: all_or_nothing`, docs/configuration.md): a descriptor
   * known over limit in the local cache (not in shadow mode) refuses the request, whose other
   * counters are only read; otherwise the store's atomic operation charges every counter or
   * none; a store without one (kv cluster or two instances, mc) gets a check-then-increment:
   * read, and when all fit increment; if the values after it show another request took the
   * budget in between, the increments are undone, the request is refused and
   * `ratelimit.all_or_nothing.compensated` counts it. A race refuses, never admits over the
   * limit; concurrent racers may all be refused.
   */
  private async chargeAllOrNothing(
    plan: RequestPlan,
  ): Promise<RateLimitResponse_DescriptorStatus[]> {
    if (plan.buckets.length === 0)
      return this.allOrNothingStatuses(
        plan,
        await this.countAllOrNothing(plan),
      );
    // Token buckets first, each admitted or refused atomically in the store; a refusal there,
    // or of the window counters after, gives back what the others took.
    const backend = this.backend;
    const sent = plan.sent;
    if (this.localCacheRejects(plan)) {
      await Promise.all([
        this.previewBuckets(plan),
        sent.length > 0 ? backend.peek(sent) : undefined,
      ]);
      return this.allOrNothingStatuses(plan, false);
    }
    await backend.takeTokens(plan.buckets, plan.nowUs);
    if (this.bucketRefuses(plan)) {
      await Promise.all([
        this.giveBackBuckets(plan),
        sent.length > 0 ? backend.peek(sent) : undefined,
      ]);
      return this.allOrNothingStatuses(plan, false);
    }
    const charged = await this.countAllOrNothing(plan);
    if (!charged) await this.giveBackBuckets(plan);
    return this.allOrNothingStatuses(plan, charged);
  }

  /** Whether a window counter not in shadow mode is known over limit in the local cache. */
  private localCacheRejects(plan: RequestPlan): boolean {
    return plan.counted.some((d) => d.localCacheHit && !d.limit.shadowMode);
  }

  /**
   * The window counters' part of an all-or-nothing charge (see {@link chargeAllOrNothing}).
   *
   * @returns whether they were charged; their slots hold the values after the charge when
   *   true, before it otherwise
   */
  private async countAllOrNothing(plan: RequestPlan): Promise<boolean> {
    const backend = this.backend;
    const sent = plan.sent;
    const now = plan.nowSeconds;
    if (this.localCacheRejects(plan)) {
      if (sent.length > 0) await backend.peek(sent);
      return false;
    }
    // Nothing to charge (no window counter, or only shadow-mode ones the local cache knows
    // over limit): nothing refuses, so the request's token buckets keep their hits.
    if (sent.length === 0) return true;
    const atomic = backend.chargeAllOrNothing?.(sent, now, () =>
      this.allFit(plan, true),
    );
    if (atomic !== undefined) return atomic;
    await backend.peek(sent);
    if (!this.allFit(plan, true)) return false;
    await backend.add(sent, now);
    // The values after the increment already hold this request's hits.
    if (this.allFit(plan, false)) return true;
    // Lost the race: undo every increment of this request; answer from the values before it.
    const after = sent.map((d) => d.current);
    for (const d of sent) d.increment = -d.increment;
    await backend.add(sent, now);
    this.compensated?.add(1);
    for (let j = 0; j < sent.length; j++) {
      const d = sent[j]!;
      d.current = after[j]! - d.hitsAddend;
    }
    return false;
  }

  /**
   * The all-or-nothing check: whether no descriptor that is not in shadow mode is known over
   * limit in the local cache or goes over with this request (`weighted count + hits > limit`,
   * with `withHits`; the counters alone otherwise). Descriptors of one request that share a
   * cache key are charged together, so each is checked with the earlier ones' hits added.
   */
  private allFit(plan: RequestPlan, withHits: boolean): boolean {
    const counted = plan.counted;
    for (let j = 0; j < counted.length; j++) {
      const d = counted[j]!;
      const limit = d.limit;
      if (limit.shadowMode) continue;
      if (d.localCacheHit) return false;
      const weighted = this.base.weightedCount(
        limit,
        d.current,
        d.previous,
        plan.nowSeconds,
      );
      const hits = withHits ? earlierHitsOnKey(counted, j) + d.hitsAddend : 0;
      if (weighted + hits > limit.requestsPerUnit) return false;
    }
    return true;
  }

  /**
   * The statuses of an all-or-nothing request (and its statistics).
   *
   * @param charged - whether the counters were incremented: they hold the values after the
   *   request when true, before it otherwise
   */
  private allOrNothingStatuses(
    plan: RequestPlan,
    charged: boolean,
  ): RateLimitResponse_DescriptorStatus[] {
    const base = this.base;
    const now = plan.nowSeconds;
    const statuses = new Array<RateLimitResponse_DescriptorStatus>(plan.size);
    const counted = plan.counted;
    for (let j = 0; j < counted.length; j++) {
      const d = counted[j]!;
      if (d.localCacheHit) {
        put(
          statuses,
          d.index,
          base.localCacheStatus(d.limit, d.hitsAddend, now),
        );
        continue;
      }
      // Refused: each descriptor is answered as if charged after the earlier ones, so a
      // counter two descriptors share shows their sum (the one that does not fit says so).
      const current = charged
        ? d.current
        : d.current + earlierHitsOnKey(counted, j);
      put(
        statuses,
        d.index,
        base.counterStatus(
          d.cacheKey,
          d.limit,
          current,
          d.previous,
          d.hitsAddend,
          now,
          charged,
        ),
      );
    }
    return this.finish(statuses, plan, charged);
  }
}

/** Whether a plan entry's limit has `lease: true`. */
function leased(d: PlannedDescriptor): boolean {
  return d.limit.lease !== undefined;
}

/**
 * Gives the refunds of leased limits back to the lease table first (docs/configuration.md#leases);
 * returns the refunds still to send to the store (`refunds` itself when no leased one), each
 * with its `increment` set to what the table did not take back.
 */
function refundLeases(
  refunds: readonly PlannedDescriptor[],
  leases: LeaseTable,
): readonly PlannedDescriptor[] {
  if (!refunds.some(leased)) return refunds;
  const rest: PlannedDescriptor[] = [];
  for (const d of refunds) {
    if (!leased(d)) {
      rest.push(d);
      continue;
    }
    const back = leases.refund(d);
    if (back === 0) continue;
    d.increment = -back;
    rest.push(d);
  }
  return rest;
}

/** Whether a plan entry's store operation is `takeTokens` (a token bucket). */
function takesTokens(d: PlannedDescriptor): boolean {
  return d.limit.algorithm.kind === "token_bucket";
}

/**
 * Sets the status of descriptor `index`, or, when one of its limits (`rate_limits:`) already
 * set it, keeps the tighter of the two: OVER_LIMIT before OK, then the lower
 * `limit_remaining`; on a tie the earlier limit.
 */
function put(
  statuses: RateLimitResponse_DescriptorStatus[],
  index: number,
  status: RateLimitResponse_DescriptorStatus,
): void {
  const before = statuses[index];
  if (before === undefined || tighterStatus(before, status))
    statuses[index] = status;
}

/**
 * Whether `status` is tighter than `before` for one descriptor with several limits
 * (`rate_limits:`): OVER_LIMIT before OK, then the lower `limit_remaining`; false on a tie (the
 * earlier limit stays). Explain reports the status this rule kept (its dry run's statuses).
 */
function tighterStatus(
  before: RateLimitResponse_DescriptorStatus,
  status: RateLimitResponse_DescriptorStatus,
): boolean {
  if (before.code !== status.code) return status.code === Code.OVER_LIMIT;
  return status.limitRemaining < before.limitRemaining;
}

/**
 * Hits of the descriptors before `counted[j]` that increment the same counter (0 in the usual
 * request, where every descriptor has its own counter); local-cache hits add none.
 */
function earlierHitsOnKey(
  counted: readonly PlannedDescriptor[],
  j: number,
): number {
  const key = counted[j]!.cacheKey;
  let hits = 0;
  for (let k = 0; k < j; k++) {
    const d = counted[k]!;
    if (!d.localCacheHit && d.cacheKey === key) hits += d.hitsAddend;
  }
  return hits;
}

/**
 * Returns what a read-only plan read for one descriptor, as {@link CounterReading}: the
 * counter, its window (the plan entry's: a calendar window's is the local period), the
 * local-cache verdict and, for sliding windows, the previous one.
 *
 * @param _nowSeconds - unused: the plan entry holds its window's bounds
 */
export function counterReading(
  d: PlannedDescriptor,
  _nowSeconds?: number,
): CounterReading {
  const end = d.windowEndSeconds;
  return {
    key: d.cacheKey,
    value: d.current,
    windowStartSeconds: end - d.windowSeconds,
    windowEndSeconds: end,
    localCacheHit: d.localCacheHit,
    ...(d.previousCacheKey !== undefined
      ? { previousKey: d.previousCacheKey, previousValue: d.previous }
      : {}),
  };
}
