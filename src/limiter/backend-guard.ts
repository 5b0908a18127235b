import type { Logger } from "pino";
import type { FailureMode } from "../config/failure-mode.js";
import type { RateLimit } from "../config/rate-limit-config.js";
import {
  RateLimitResponse_Code as Code,
  type RateLimitResponse_DescriptorStatus,
} from "../proto.js";
import type { RateLimitStats } from "../stats/stats-manager.js";
import { statNames } from "../stats/names.js";
import type { Counter, Gauge, StatsStore } from "../stats/stats-store.js";
import type { Clock } from "../util/clock.js";
import { BackendError } from "./backend-error.js";
import type { CounterBackend, CounterSlot } from "./counter-backend.js";
import { OutageJournal, recordingBackend } from "./outage-journal.js";
import { limitStatus, okWithoutLimitStatus } from "./decide.js";
import type { LimitRequest } from "./limit-request.js";
import type {
  ChargePreview,
  CounterReading,
  RateLimitCache,
} from "./rate-limit-cache.js";
import { limitResetSeconds } from "./counter-decision.js";

/** Options of {@link BackendGuard}. */
export interface BackendGuardOptions {
  /** The guarded counter backend (kv or mc). */
  readonly backend: RateLimitCache;
  /** Stats word of the backend (`kv`, `mc`), used in logs and the circuit-open error. */
  readonly backendName: string;
  /**
   * What to answer when the backend fails or the circuit is open, for domains whose config
   * sets no `failure_mode` (`BACKEND_FAILURE_MODE`). @defaultValue "error"
   */
  readonly mode?: FailureMode;
  /**
   * Consecutive backend failures (errors or timeouts) that open the circuit
   * (`BACKEND_FAILURE_THRESHOLD`), integer ≥ 1. @defaultValue 3
   */
  readonly failureThreshold?: number;
  /**
   * Time between probes while the circuit is open, in milliseconds (`BACKEND_PROBE_INTERVAL`):
   * the first request after it goes to the backend; its success closes the circuit. > 0.
   * @defaultValue 500
   */
  readonly probeIntervalMs?: number;
  /**
   * Share of each limit the `local` mode grants this process (`BACKEND_FAILURE_LOCAL_SHARE`),
   * 0 < share ≤ 1 (e.g. 0.25 for a fleet of four). @defaultValue 1
   */
  readonly localShare?: number;
  /**
   * Builds the in-process counters of the `local` mode (the memory backend); called once, when
   * first needed.
   */
  readonly createLocalBackend: () => CounterBackend;
  /**
   * Builds a limiter over the `local` mode's counters (a pipeline over `backend`); called
   * twice with the same counters: once to count while the store answers, once (over a
   * recording backend) to answer while it fails. It must not share the local over-limit cache
   * of the guarded backend.
   */
  readonly createLocalLimiter: (backend: CounterBackend) => RateLimitCache;
  /**
   * Adds the hits the `local` mode counted during an outage to the store's counters (the
   * guarded backend's `add`), called when the circuit closes; each slot's `increment` is the
   * hits to add. Absent: nothing is replayed.
   */
  readonly replay?: (
    slots: readonly CounterSlot[],
    nowSeconds: number,
  ) => void | Promise<void>;
  /**
   * Longest a decision waits on the backend, in milliseconds (`BACKEND_DECISION_TIMEOUT`); 0:
   * no bound but the caller's deadline and the backend's own timeouts. When it passes, the
   * request is answered by the failure mode and the call counts as a failure. @defaultValue 0
   */
  readonly decisionTimeoutMs?: number;
  /**
   * How long the backend itself may take before it fails a call, in milliseconds (kv:
   * `KV_TIMEOUT`); 0: unknown or unbounded. A deadline at least that far away arms no timer
   * (the backend fails first). @defaultValue 0
   */
  readonly backendTimeoutMs?: number;
  /** Time source (probe schedule). */
  readonly clock: Clock;
  /** Logger of the guard; each transition is logged once. */
  readonly logger: Logger;
  /**
   * Where the `ratelimit.backend.*` statistics live; created at the first failure, so a
   * healthy backend adds no statistic. @defaultValue none
   */
  readonly statsStore?: StatsStore;
  /** Called with true when the circuit opens and false when it closes (health). */
  readonly onDegradedChange?: (degraded: boolean) => void;
}

/** The {@link BackendGuard} statistics (docs/failure-modes.md). */
interface GuardStats {
  readonly degraded: Gauge | undefined;
  readonly failures: Counter | undefined;
  readonly degradedDecisions: Counter | undefined;
  readonly circuitOpened: Counter | undefined;
  readonly replayedHits: Counter | undefined;
}

const noopCounter: Counter = {
  name: "",
  add: () => undefined,
  value: () => 0,
};

/**
 * A {@link RateLimitCache} around the kv or mc backend that keeps answering when the backend
 * fails, as its failure mode says, behind a circuit breaker (docs/failure-modes.md):
 *
 * - closed: every request goes to the backend; a success resets the failure count, a
 *   {@link BackendError} counts one failure and is answered by the failure mode; after
 *   `failureThreshold` consecutive failures the circuit opens;
 * - open: requests are answered by the failure mode without touching the backend (`error`
 *   fails at once with a {@link BackendError}); every `probeIntervalMs` one request goes to the
 *   backend (half-open probe) and its success closes the circuit.
 *
 * With the `local` mode as the process-wide mode, the in-process limiter also counts every
 * request while the circuit is closed (with muted statistics), so it knows this process's
 * share of the counts when the backend fails; after the circuit closes, until the windows that
 * were live during the outage end, a descriptor is over limit when either the backend or the
 * local limiter says so (the backend never saw the hits admitted locally).
 *
 * Other errors (bad cache keys) pass through unchanged and do not count.
 */
export class BackendGuard implements RateLimitCache {
  private readonly backend: RateLimitCache;
  private readonly backendName: string;
  private readonly mode: FailureMode;
  private readonly threshold: number;
  private readonly probeIntervalMs: number;
  private readonly localShare: number;
  private readonly createLocalBackend: () => CounterBackend;
  private readonly createLocalLimiter: (
    backend: CounterBackend,
  ) => RateLimitCache;
  private readonly replay:
    | ((
        slots: readonly CounterSlot[],
        nowSeconds: number,
      ) => void | Promise<void>)
    | undefined;
  private readonly decisionTimeoutMs: number;
  private readonly backendTimeoutMs: number;
  private readonly clock: Clock;
  private readonly logger: Logger;
  private readonly statsStore: StatsStore | undefined;
  private readonly onDegradedChange: ((degraded: boolean) => void) | undefined;
  /** Per-domain `failure_mode` of the config in force (empty: the process-wide mode). */
  private domainModes: ReadonlyMap<string, FailureMode> = new Map();

  private consecutiveFailures = 0;
  private open = false;
  private probing = false;
  private nextProbeAtMs = 0;
  private probeStartedAtMs = 0;
  /** Until then (seconds), a local over-limit verdict also applies after recovery. */
  private recoveringUntilSeconds = 0;
  /** The local mode's limiter that counts while the store answers (unrecorded). */
  private shadowLocal: RateLimitCache | undefined;
  /** The local mode's limiter that answers while the store fails (recorded for replay). */
  private local: RateLimitCache | undefined;
  /** What the local mode charged while the store failed, replayed when it answers again. */
  private readonly journal = new OutageJournal();
  private replaying = false;
  private stats: GuardStats | undefined;
  /** Scaled copies of the rate limits, with live statistics (answers while degraded). */
  private readonly countedLimits = new WeakMap<RateLimit, RateLimit>();
  /** Scaled copies with muted statistics (shadow counting, answers after a failed call). */
  private readonly mutedLimits = new WeakMap<RateLimit, RateLimit>();
  private closed = false;

  /** @throws {@link RangeError} when a number option is out of range (naming the option) */
  constructor(options: BackendGuardOptions) {
    this.backend = options.backend;
    this.backendName = options.backendName;
    this.mode = options.mode ?? "error";
    this.threshold = options.failureThreshold ?? 3;
    this.probeIntervalMs = options.probeIntervalMs ?? 500;
    this.localShare = options.localShare ?? 1;
    if (!Number.isInteger(this.threshold) || this.threshold < 1)
      throw new RangeError(
        `invalid failureThreshold ${this.threshold}: expected an integer ≥ 1`,
      );
    if (!(this.probeIntervalMs > 0))
      throw new RangeError(
        `invalid probeIntervalMs ${this.probeIntervalMs}: expected > 0`,
      );
    if (!(this.localShare > 0 && this.localShare <= 1))
      throw new RangeError(
        `invalid localShare ${this.localShare}: expected 0 < share ≤ 1`,
      );
    this.decisionTimeoutMs = options.decisionTimeoutMs ?? 0;
    if (!(this.decisionTimeoutMs >= 0))
      throw new RangeError(
        `invalid decisionTimeoutMs ${this.decisionTimeoutMs}: expected ≥ 0`,
      );
    this.backendTimeoutMs = options.backendTimeoutMs ?? 0;
    this.createLocalBackend = options.createLocalBackend;
    this.createLocalLimiter = options.createLocalLimiter;
    this.replay = options.replay;
    this.clock = options.clock;
    this.logger = options.logger;
    this.statsStore = options.statsStore;
    this.onDegradedChange = options.onDegradedChange;
  }

  /** Whether the circuit is open (requests answered by the failure mode). */
  get degraded(): boolean {
    return this.open;
  }

  /**
   * Sets the per-domain failure modes (`failure_mode` in each domain's config) of the config
   * now in force; domains not in the map use the process-wide mode.
   */
  setDomainModes(modes: ReadonlyMap<string, FailureMode> | undefined): void {
    this.domainModes = modes ?? new Map();
  }

  /** Starts the guarded backend. */
  start(): Promise<void> {
    return this.backend.start?.() ?? Promise.resolve();
  }

  /**
   * Decides through the backend, or by the failure mode when it fails, its circuit is open, or
   * it does not answer before the decision deadline (see {@link BackendGuard.bounded}).
   *
   * @param deadlineAtMs - the caller's deadline (`grpc-timeout`) on the `performance.now()`
   *   clock, in milliseconds; undefined: none
   */
  doLimit(
    request: LimitRequest,
    deadlineAtMs?: number,
  ): Promise<RateLimitResponse_DescriptorStatus[]> {
    if (this.mode === "local")
      return this.doLimitShadowed(request, deadlineAtMs);
    if (!this.open) return this.doLimitClosed(request, deadlineAtMs);
    return this.doLimitOpen(request, deadlineAtMs);
  }

  /**
   * Reads the counters through the guarded backend (see {@link RateLimitCache.peekCounters}),
   * for the Explain API. The breaker is neither consulted nor moved: Explain shows the store's
   * counters, and a failing store answers with its {@link BackendError}.
   */
  peekCounters(request: LimitRequest): Promise<(CounterReading | undefined)[]> {
    const backend = this.backend;
    if (backend.peekCounters === undefined)
      return Promise.resolve(request.limits.map(() => undefined));
    return backend.peekCounters(request);
  }

  /**
   * Previews a charge through the guarded backend (see {@link RateLimitCache.previewCharge}),
   * for the Explain API; like {@link peekCounters} it neither consults nor moves the breaker.
   */
  previewCharge(request: LimitRequest): Promise<ChargePreview> {
    const backend = this.backend;
    if (backend.previewCharge === undefined)
      return Promise.reject(
        new TypeError(
          `the ${this.backendName} backend cannot preview a charge`,
        ),
      );
    return backend.previewCharge(request);
  }

  flush(): Promise<void> {
    return this.backend.flush();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.backend.close();
    await this.local?.close();
    await this.shadowLocal?.close();
  }

  // --- the three paths -----------------------------------------------------------------------

  /** Closed circuit, no shadow counting: the hot path, one counter reset beyond the backend. */
  private async doLimitClosed(
    request: LimitRequest,
    deadlineAtMs: number | undefined,
  ): Promise<RateLimitResponse_DescriptorStatus[]> {
    try {
      const statuses = await this.bounded(
        this.backend.doLimit(request),
        deadlineAtMs,
      );
      this.consecutiveFailures = 0;
      return statuses;
    } catch (err) {
      return this.degradedAnswer(
        this.recordFailure(err, false),
        request,
        false,
      );
    }
  }

  /** Open circuit: the failure mode answers; one request per probe interval probes. */
  private async doLimitOpen(
    request: LimitRequest,
    deadlineAtMs: number | undefined,
  ): Promise<RateLimitResponse_DescriptorStatus[]> {
    if (this.probing || this.clock.nowMs() < this.nextProbeAtMs) {
      return this.degradedAnswer(this.circuitOpenError(), request, true);
    }
    this.probing = true;
    this.probeStartedAtMs = this.clock.nowMs();
    try {
      const statuses = await this.bounded(
        this.backend.doLimit(request),
        deadlineAtMs,
      );
      this.probing = false;
      this.closeCircuit();
      return statuses;
    } catch (err) {
      this.probing = false;
      return this.degradedAnswer(this.recordFailure(err, true), request, false);
    }
  }

  /**
   * `local` as the process-wide mode: the local limiter counts every request of a domain in
   * `local` mode (muted statistics), so its counts are current when the backend fails; its
   * verdict is the answer when the backend fails or the circuit is open (those charges are
   * recorded and replayed into the store when it answers again), and is combined with the
   * backend's for a while after the circuit closes.
   */
  private async doLimitShadowed(
    request: LimitRequest,
    deadlineAtMs: number | undefined,
  ): Promise<RateLimitResponse_DescriptorStatus[]> {
    const domainMode = this.domainModes.get(request.domain);
    if (domainMode !== undefined && domainMode !== "local") {
      return this.open
        ? this.doLimitOpen(request, deadlineAtMs)
        : this.doLimitClosed(request, deadlineAtMs);
    }
    const probe =
      this.open && !this.probing && this.clock.nowMs() >= this.nextProbeAtMs;
    if (this.open && !probe) {
      this.countDegradedDecision();
      this.noteLocalDecision(request.limits);
      return this.localLimiter().doLimit(this.scaledRequest(request, true));
    }
    if (probe) {
      this.probing = true;
      this.probeStartedAtMs = this.clock.nowMs();
    }
    let statuses: RateLimitResponse_DescriptorStatus[];
    try {
      statuses = await this.bounded(
        this.backend.doLimit(request),
        deadlineAtMs,
      );
    } catch (err) {
      if (probe) this.probing = false;
      this.recordFailure(err, probe);
      this.noteLocalDecision(request.limits);
      this.countDegradedDecision();
      // The store did not count this request (or may not have): the local limiter answers,
      // and its charge is replayed into the store when it answers again.
      return this.localLimiter().doLimit(this.scaledRequest(request, false));
    }
    this.consecutiveFailures = 0;
    if (probe) {
      this.probing = false;
      this.closeCircuit();
    }
    // Counted by the store: the local limiter counts it too, unrecorded.
    const local = await this.shadowLimiter().doLimit(
      this.scaledRequest(request, false),
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

  /**
   * The backend's decision, bounded by the decision deadline: the earlier of
   * `decisionTimeoutMs` from now and the caller's deadline less a reserve for answering (the
   * smaller of 5 ms and a quarter of the time left). Past it, rejects with a
   * {@link BackendError}; the backend call goes on (its late result is dropped).
   */
  private bounded(
    decision: Promise<RateLimitResponse_DescriptorStatus[]>,
    deadlineAtMs: number | undefined,
  ): Promise<RateLimitResponse_DescriptorStatus[]> {
    let waitMs = this.decisionTimeoutMs > 0 ? this.decisionTimeoutMs : Infinity;
    let byCaller = false;
    if (deadlineAtMs !== undefined) {
      const left = deadlineAtMs - performance.now();
      const callerWaitMs = left - Math.min(5, left / 4);
      if (callerWaitMs < waitMs) {
        waitMs = Math.max(0, callerWaitMs);
        byCaller = true;
      }
    }
    if (
      waitMs === Infinity ||
      (this.backendTimeoutMs > 0 && waitMs >= this.backendTimeoutMs)
    )
      return decision;
    const name = this.backendName;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(
          new BackendError(
            name,
            `${name} backend did not answer within ${Math.round(waitMs)} ms (${
              byCaller ? "the caller's deadline" : "BACKEND_DECISION_TIMEOUT"
            })`,
          ),
        );
      }, waitMs);
      decision.then(
        (statuses) => {
          clearTimeout(timer);
          resolve(statuses);
        },
        (err: unknown) => {
          clearTimeout(timer);
          reject(err instanceof Error ? err : new Error(String(err)));
        },
      );
    });
  }

  private circuitOpenError(): BackendError {
    return new BackendError(
      this.backendName,
      `${this.backendName} backend unavailable (circuit open after ${this.threshold} consecutive failures)`,
    );
  }

  // --- failure handling ----------------------------------------------------------------------

  /**
   * Counts one failure; opens the circuit at the threshold, or schedules the next probe when a
   * probe failed. Errors other than {@link BackendError} are rethrown unchanged.
   */
  private recordFailure(err: unknown, probe: boolean): BackendError {
    if (!(err instanceof BackendError)) throw err;
    const stats = this.guardStats();
    stats.failures?.add(1);
    this.consecutiveFailures++;
    if (probe) {
      // Probes start one interval apart (start to start), so a store that comes back is
      // found within one interval plus the probe's own round trip.
      this.nextProbeAtMs = this.probeStartedAtMs + this.probeIntervalMs;
      return err;
    }
    if (this.open || this.consecutiveFailures < this.threshold) return err;
    this.open = true;
    this.nextProbeAtMs = this.clock.nowMs() + this.probeIntervalMs;
    stats.circuitOpened?.add(1);
    stats.degraded?.set(1);
    this.logger.warn(
      {
        backend: this.backendName,
        failures: this.consecutiveFailures,
        mode: this.mode,
        err,
      },
      "backend circuit opened: answering by the failure mode",
    );
    this.onDegradedChange?.(true);
    return err;
  }

  private closeCircuit(): void {
    if (!this.open) return;
    this.open = false;
    this.consecutiveFailures = 0;
    this.stats?.degraded?.set(0);
    this.logger.warn(
      { backend: this.backendName },
      "backend circuit closed: the backend answers again",
    );
    this.onDegradedChange?.(false);
    this.replayOutage();
  }

  /**
   * Adds what the local mode counted during the outage to the store's counters (windows still
   * open), in the background; a failed replay is kept for the next time the circuit closes.
   */
  private replayOutage(): void {
    const replay = this.replay;
    if (replay === undefined || this.replaying || this.journal.size === 0)
      return;
    const now = this.clock.nowSeconds();
    const slots = this.journal.take(now);
    if (slots.length === 0) return;
    this.replaying = true;
    const hits = slots.reduce((sum, slot) => sum + slot.increment, 0);
    const stats = this.guardStats();
    Promise.resolve()
      .then(() => replay(slots, now))
      .then(
        () => {
          stats.replayedHits?.add(hits);
          this.logger.warn(
            { backend: this.backendName, counters: slots.length, hits },
            "backend outage replayed: hits admitted locally added to the store's counters",
          );
        },
        (err: unknown) => {
          this.journal.restore(slots);
          this.logger.warn(
            { backend: this.backendName, counters: slots.length, hits, err },
            "backend outage replay failed: kept for the next recovery",
          );
        },
      )
      .finally(() => {
        this.replaying = false;
      });
  }

  /**
   * Answers a request the backend did not decide, by the domain's failure mode.
   *
   * @param counted - whether the rule statistics (total hits included) are still to be
   *   counted: true when the backend was not called at all
   */
  private degradedAnswer(
    err: BackendError,
    request: LimitRequest,
    counted: boolean,
  ): Promise<RateLimitResponse_DescriptorStatus[]> {
    const mode = this.domainModes.get(request.domain) ?? this.mode;
    if (mode === "error") return Promise.reject(err);
    this.countDegradedDecision();
    if (mode === "local") {
      this.noteLocalDecision(request.limits);
      return this.localLimiter().doLimit(this.scaledRequest(request, counted));
    }
    const now = this.clock.nowSeconds();
    const limits = request.limits;
    const statuses = new Array<RateLimitResponse_DescriptorStatus>(
      limits.length,
    );
    for (let i = 0; i < limits.length; i++) {
      const limit = limits[i];
      statuses[i] =
        limit === undefined
          ? okWithoutLimitStatus()
          : mode === "allow"
            ? limitStatus(
                Code.OK,
                limit,
                limit.requestsPerUnit,
                limitResetSeconds(limit, now),
              )
            : // Deny: over limit, unless the rule is in shadow mode (always OK).
              limitStatus(
                limit.shadowMode ? Code.OK : Code.OVER_LIMIT,
                limit,
                0,
                limitResetSeconds(limit, now),
              );
    }
    return Promise.resolve(statuses);
  }

  /** Remembers that local verdicts must outlive the outage until these windows end. */
  private noteLocalDecision(limits: readonly (RateLimit | undefined)[]): void {
    if (this.mode !== "local") return;
    const now = this.clock.nowSeconds();
    for (const limit of limits) {
      if (limit === undefined || limit.windowSeconds === 0) continue;
      // A sliding window still weighs the previous window's hits during the next one.
      const windowEnd =
        now +
        limitResetSeconds(limit, now) +
        (limit.sliding ? limit.windowSeconds : 0);
      if (windowEnd > this.recoveringUntilSeconds)
        this.recoveringUntilSeconds = windowEnd;
    }
  }

  private countDegradedDecision(): void {
    this.guardStats().degradedDecisions?.add(1);
  }

  /** The local mode's answering limiter (its charges are recorded for the replay). */
  private localLimiter(): RateLimitCache {
    if (this.local === undefined) this.createLocal();
    return this.local!;
  }

  /** The local mode's counting limiter (same counters, not recorded). */
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
   * @param counted - live statistics (the backend was not called), else muted ones
   */
  private scaledRequest(request: LimitRequest, counted: boolean): LimitRequest {
    const cache = counted ? this.countedLimits : this.mutedLimits;
    return request.withLimits((limit) => {
      let scaled = cache.get(limit);
      if (scaled === undefined) {
        const perUnit = limit.requestsPerUnit;
        scaled = {
          ...limit,
          requestsPerUnit:
            perUnit === 0
              ? 0
              : Math.max(1, Math.floor(perUnit * this.localShare)),
          stats: counted ? limit.stats : mutedStats(limit.stats),
        };
        cache.set(limit, scaled);
      }
      return scaled;
    });
  }

  private guardStats(): GuardStats {
    if (this.stats !== undefined) return this.stats;
    const store = this.statsStore;
    this.stats = {
      degraded: store?.gauge(statNames.backendDegraded),
      failures: store?.counter(statNames.backendFailures),
      degradedDecisions: store?.counter(statNames.backendDegradedDecisions),
      circuitOpened: store?.counter(statNames.backendCircuitOpened),
      replayedHits: store?.counter(statNames.backendReplayedHits),
    };
    return this.stats;
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
