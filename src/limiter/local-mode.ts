import type { RateLimit } from "../config/rate-limit-config.js";
import {
  RateLimitResponse_Code as Code,
  type RateLimitResponse_DescriptorStatus,
} from "../proto.js";
import type { RateLimitStats } from "../stats/stats-manager.js";
import type { Counter } from "../stats/stats-store.js";
import type { Clock } from "../util/clock.js";
import type { CounterBackend } from "./counter-backend.js";
import { limitResetSeconds } from "./counter-decision.js";
import type { LimitRequest } from "./limit-request.js";
import { type OutageJournal, recordingBackend } from "./outage-journal.js";
import type { RateLimitCache } from "./rate-limit-cache.js";
import type { RequestPlan } from "./request-plan.js";

/** Options of {@link LocalMode}. */
export interface LocalModeOptions {
  /**
   * Share of each limit the `local` mode grants this process (`BACKEND_FAILURE_LOCAL_SHARE`),
   * 0 < share ≤ 1 (e.g. 0.25 for a fleet of four). @defaultValue 1
   */
  readonly localShare?: number;
  /**
   * Builds the in-process counters (the memory backend); called once, when first needed.
   */
  readonly createLocalBackend: () => CounterBackend;
  /**
   * Builds a limiter over the in-process counters (a pipeline over `backend`); called twice
   * with the same counters: once to count while the store answers, once (over a backend that
   * records into `journal`) to answer while it fails. It must not share the local over-limit
   * cache of the guarded backend.
   */
  readonly createLocalLimiter: (backend: CounterBackend) => RateLimitCache;
  /** Where the charges of the answers while the store fails are recorded for the replay. */
  readonly journal: OutageJournal;
  /**
   * Whether `local` is the process-wide mode: then {@link LocalMode.countAlongside} counts
   * every request while the store answers, and local verdicts outlive an outage until the
   * windows they were given in end. @defaultValue false
   */
  readonly shadowed?: boolean;
  /** Time source (window ends). */
  readonly clock: Clock;
}

const noopCounter: Counter = {
  name: "",
  add: () => undefined,
  value: () => 0,
};

/**
 * The `local` failure mode (docs/failure-modes.md#the-local-mode): an in-process limiter
 * answers while the kv or mc store fails, each limit scaled by this process's share.
 *
 * As the process-wide mode it also shadows the store: a second limiter over the same counters
 * counts every request the store decides (with muted statistics), so the local counts are
 * current when the store fails; after it answers again, until the windows that were live during
 * the outage end, a descriptor is over limit when either the store or the local limiter says so
 * (the store never saw the hits admitted locally, or lost them).
 *
 * The answering limiter's charges are recorded in the journal, so they can be replayed into
 * the store's counters ({@link OutageJournal.replay}); the shadow's are not.
 */
export class LocalMode {
  private readonly localShare: number;
  private readonly createLocalBackend: () => CounterBackend;
  private readonly createLocalLimiter: (
    backend: CounterBackend,
  ) => RateLimitCache;
  private readonly journal: OutageJournal;
  private readonly shadowed: boolean;
  private readonly clock: Clock;
  /** The limiter that counts while the store answers (unrecorded). */
  private shadowLocal: RateLimitCache | undefined;
  /** The limiter that answers while the store fails (recorded for replay). */
  private local: RateLimitCache | undefined;
  /** Until then (seconds), a local over-limit verdict also applies after recovery. */
  private recoveringUntilSeconds = 0;
  /** Scaled copies of the rate limits, with live statistics (answers while degraded). */
  private readonly countedLimits = new WeakMap<RateLimit, RateLimit>();
  /** Scaled copies with muted statistics (shadow counting, answers after a failed call). */
  private readonly mutedLimits = new WeakMap<RateLimit, RateLimit>();

  /** @throws {@link RangeError} when `localShare` is not in (0, 1] (naming the option) */
  constructor(options: LocalModeOptions) {
    this.localShare = options.localShare ?? 1;
    if (!(this.localShare > 0 && this.localShare <= 1))
      throw new RangeError(
        `invalid localShare ${this.localShare}: expected 0 < share ≤ 1`,
      );
    this.createLocalBackend = options.createLocalBackend;
    this.createLocalLimiter = options.createLocalLimiter;
    this.journal = options.journal;
    this.shadowed = options.shadowed ?? false;
    this.clock = options.clock;
  }

  /**
   * Answers a request the store did not decide, with the scaled limits; the charge is
   * recorded in the journal.
   *
   * @param countStats - whether the rule statistics (total hits included) are counted: true
   *   when the store was not called at all, false when a failed call may have counted them
   * @returns one status per descriptor, same order
   */
  answer(
    request: LimitRequest,
    countStats: boolean,
  ): Promise<RateLimitResponse_DescriptorStatus[]> {
    if (this.shadowed) this.noteOutageWindows(request.limits);
    return this.localLimiter().doLimit(this.scaled(request, countStats));
  }

  /**
   * Answers as {@link LocalMode.answer} does, and returns what the journal recorded for it:
   * the local limiter's plan of the request (its `sent` slots with their increments), so the
   * charge can be taken back when the store turns out to have counted the request after all.
   *
   * @returns the statuses, one per descriptor, and the plan (undefined when the local limiter
   *   does not record plans)
   */
  async answerRecorded(
    request: LimitRequest,
    countStats: boolean,
  ): Promise<{
    readonly statuses: RateLimitResponse_DescriptorStatus[];
    readonly plan: RequestPlan | undefined;
  }> {
    if (this.shadowed) this.noteOutageWindows(request.limits);
    const copy = this.scaled(request, countStats);
    const statuses = await this.localLimiter().doLimit(copy);
    return { statuses, plan: copy.counted };
  }

  /**
   * Counts a request the store decided (muted statistics, unrecorded), and during the recovery
   * window makes the stricter verdict win: a descriptor the store found OK is over limit when
   * the local limiter says so.
   *
   * @param statuses - the store's answer, one per descriptor; changed in place
   * @returns `statuses`
   */
  async countAlongside(
    request: LimitRequest,
    statuses: RateLimitResponse_DescriptorStatus[],
  ): Promise<RateLimitResponse_DescriptorStatus[]> {
    const local = await this.shadowLimiter().doLimit(
      this.scaled(request, false),
    );
    if (this.recoveringUntilSeconds === 0) return statuses;
    if (this.clock.nowSeconds() >= this.recoveringUntilSeconds) {
      this.recoveringUntilSeconds = 0;
      return statuses;
    }
    // The backend may not have seen every hit admitted locally during the outage (a store
    // restarted empty, a replay that failed): the stricter verdict wins until those windows
    // end.
    for (let i = 0; i < statuses.length; i++) {
      const l = local[i]!;
      if (l.code === Code.OVER_LIMIT && statuses[i]!.code === Code.OK) {
        statuses[i] = l;
      }
    }
    return statuses;
  }

  /** Closes the local limiters (if they were built); idempotent as the limiters are. */
  async close(): Promise<void> {
    await this.local?.close();
    await this.shadowLocal?.close();
  }

  /** Remembers that local verdicts must outlive the outage until these windows end. */
  private noteOutageWindows(limits: readonly (RateLimit | undefined)[]): void {
    const now = this.clock.nowSeconds();
    for (const limit of limits) {
      if (limit === undefined || limit.windowSeconds === 0) continue;
      // A sliding window still weighs the previous window's hits during the next one.
      const windowEnd =
        now +
        limitResetSeconds(limit, now) +
        (limit.algorithm.kind === "sliding_window" ? limit.windowSeconds : 0);
      if (windowEnd > this.recoveringUntilSeconds)
        this.recoveringUntilSeconds = windowEnd;
    }
  }

  private localLimiter(): RateLimitCache {
    if (this.local === undefined) this.createLocal();
    return this.local!;
  }

  private shadowLimiter(): RateLimitCache {
    if (this.shadowLocal === undefined) this.createLocal();
    return this.shadowLocal!;
  }

  private createLocal(): void {
    const counters = this.createLocalBackend();
    this.shadowLocal = this.createLocalLimiter(counters);
    this.local = this.createLocalLimiter(
      recordingBackend(counters, this.journal),
    );
  }

  /**
   * The request with its limits scaled by the local share (⌊limit × share⌋, at least 1 for a
   * non-zero limit), one copy per rate limit, kept while the rate limit lives.
   *
   * @param countStats - live statistics, else muted ones
   */
  private scaled(request: LimitRequest, countStats: boolean): LimitRequest {
    const cache = countStats ? this.countedLimits : this.mutedLimits;
    const scale = (limit: RateLimit): RateLimit => {
      let scaled = cache.get(limit);
      if (scaled === undefined) {
        const perUnit = limit.requestsPerUnit;
        scaled = {
          ...limit,
          requestsPerUnit:
            perUnit === 0
              ? 0
              : Math.max(1, Math.floor(perUnit * this.localShare)),
          stats: countStats ? limit.stats : mutedStats(limit.stats),
          // The other limits of a `rate_limits:` list are scaled and muted alike.
          extraLimits: limit.extraLimits?.map(scale),
        };
        cache.set(limit, scaled);
      }
      return scaled;
    };
    return request.withLimits(scale);
  }
}

function mutedStats(stats: RateLimitStats): RateLimitStats {
  return {
    key: stats.key,
    totalHits: noopCounter,
    overLimit: noopCounter,
    nearLimit: noopCounter,
    overLimitWithLocalCache: noopCounter,
    withinLimit: noopCounter,
    shadowMode: noopCounter,
  };
}
