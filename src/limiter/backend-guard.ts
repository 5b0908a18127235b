import type { Logger } from "pino";
import type { FailureMode } from "../config/failure-mode.js";
import type { RateLimit } from "../config/rate-limit-config.js";
import {
  RateLimitResponse_Code as Code,
  type RateLimitResponse_DescriptorStatus,
} from "../proto.js";
import { statNames } from "../stats/names.js";
import type { Counter, Gauge, StatsStore } from "../stats/stats-store.js";
import type { Clock } from "../util/clock.js";
import { BackendError } from "./backend-error.js";
import { CircuitBreaker } from "./circuit-breaker.js";
import type { CounterBackend } from "./counter-backend.js";
import { limitResetSeconds } from "./counter-decision.js";
import { limitStatus, okWithoutLimitStatus } from "./decide.js";
import {
  DecisionDeadline,
  DecisionDeadlineError,
} from "./decision-deadline.js";
import type { LimitRequest } from "./limit-request.js";
import { LocalMode } from "./local-mode.js";
import { OutageJournal, type ReplayWrite } from "./outage-journal.js";
import type { DryRun, DryRunOptions } from "./pipeline.js";
import type { RateLimitCache } from "./rate-limit-cache.js";
import type { RequestPlan } from "./request-plan.js";

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
  readonly replay?: ReplayWrite;
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
  /**
   * Most calls held in doubt at once (docs/failure-modes.md#calls-in-doubt): calls the
   * decision deadline gave up on, answered by the `local` mode, whose replay waits for their
   * own outcome. Beyond it a call is replayed as if the store had not counted it. Integer ≥ 0.
   * @defaultValue 1000
   */
  readonly maxCallsInDoubt?: number;
  /**
   * Longest the replay of an outage waits, after the circuit closes, for the calls in doubt to
   * settle, in milliseconds; then it replays (a call settling later is over-counted). > 0.
   * @defaultValue 10000
   */
  readonly inDoubtReplayWaitMs?: number;
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

/** The statistics of the calls in doubt, created when the first one is (docs/statistics.md). */
interface InDoubtStats {
  readonly callsInDoubt: Gauge | undefined;
  readonly countedLate: Counter | undefined;
  readonly overflow: Counter | undefined;
}

/**
 * A {@link RateLimitCache} around the kv or mc backend that keeps answering when the backend
 * fails, as its failure mode says (docs/failure-modes.md). It composes four parts and owns
 * what ties them together: which mode answers a domain, the statistics, the logs and the
 * health callback.
 *
 * - {@link CircuitBreaker}: closed, every request goes to the backend; a {@link BackendError}
 *   counts one failure and is answered by the failure mode; after `failureThreshold`
 *   consecutive failures the circuit opens; open, requests are answered by the failure mode
 *   without touching the backend (`error` fails at once with a {@link BackendError}); every
 *   `probeIntervalMs` one request goes to the backend (half-open probe) and its success closes
 *   the circuit.
 * - {@link DecisionDeadline}: a backend call that outlives the decision deadline counts as a
 *   failure and is answered by the failure mode.
 * - {@link LocalMode}: the `local` mode's in-process limiter; with `local` as the process-wide
 *   mode it also counts every request while the circuit is closed, and its verdict outlives
 *   the outage until the outage's windows end.
 * - {@link OutageJournal}: what the local mode charged during the outage, replayed into the
 *   store's counters when the circuit closes.
 *
 * Other errors (bad cache keys) pass through unchanged and do not count.
 */
export class BackendGuard implements RateLimitCache {
  private readonly backend: RateLimitCache;
  private readonly backendName: string;
  private readonly mode: FailureMode;
  private readonly breaker: CircuitBreaker;
  private readonly localMode: LocalMode;
  private readonly deadline: DecisionDeadline;
  /** What the local mode charged while the store failed, replayed when it answers again. */
  private readonly journal = new OutageJournal();
  private readonly replay: ReplayWrite | undefined;
  private readonly clock: Clock;
  private readonly logger: Logger;
  private readonly statsStore: StatsStore | undefined;
  private readonly onDegradedChange: ((degraded: boolean) => void) | undefined;
  /** Per-domain `failure_mode` of the config in force (empty: the process-wide mode). */
  private domainModes: ReadonlyMap<string, FailureMode> = new Map();
  private stats: GuardStats | undefined;
  private closed = false;
  private readonly maxCallsInDoubt: number;
  private readonly inDoubtReplayWaitMs: number;
  /** Calls held in doubt now (their local charge's replay waits for their own outcome). */
  private callsInDoubt = 0;
  /** The replay waits for the calls in doubt: it runs when the last one settles, or then. */
  private replayWait: ReturnType<typeof setTimeout> | undefined;
  private inDoubtStatsCache: InDoubtStats | undefined;

  /** @throws {@link RangeError} when a number option is out of range (naming the option) */
  constructor(options: BackendGuardOptions) {
    this.backend = options.backend;
    this.backendName = options.backendName;
    this.mode = options.mode ?? "error";
    this.breaker = new CircuitBreaker({
      ...(options.failureThreshold !== undefined
        ? { failureThreshold: options.failureThreshold }
        : {}),
      ...(options.probeIntervalMs !== undefined
        ? { probeIntervalMs: options.probeIntervalMs }
        : {}),
      clock: options.clock,
    });
    this.localMode = new LocalMode({
      ...(options.localShare !== undefined
        ? { localShare: options.localShare }
        : {}),
      createLocalBackend: options.createLocalBackend,
      createLocalLimiter: options.createLocalLimiter,
      journal: this.journal,
      shadowed: this.mode === "local",
      clock: options.clock,
    });
    this.deadline = new DecisionDeadline({
      backendName: options.backendName,
      ...(options.decisionTimeoutMs !== undefined
        ? { decisionTimeoutMs: options.decisionTimeoutMs }
        : {}),
      ...(options.backendTimeoutMs !== undefined
        ? { backendTimeoutMs: options.backendTimeoutMs }
        : {}),
    });
    this.replay = options.replay;
    this.maxCallsInDoubt = options.maxCallsInDoubt ?? 1000;
    if (!(Number.isInteger(this.maxCallsInDoubt) && this.maxCallsInDoubt >= 0))
      throw new RangeError(
        `invalid maxCallsInDoubt ${this.maxCallsInDoubt}: expected an integer ≥ 0`,
      );
    this.inDoubtReplayWaitMs = options.inDoubtReplayWaitMs ?? 10_000;
    if (!(this.inDoubtReplayWaitMs > 0))
      throw new RangeError(
        `invalid inDoubtReplayWaitMs ${this.inDoubtReplayWaitMs}: expected > 0`,
      );
    this.clock = options.clock;
    this.logger = options.logger;
    this.statsStore = options.statsStore;
    this.onDegradedChange = options.onDegradedChange;
  }

  /** Whether the circuit is open (requests answered by the failure mode). */
  get degraded(): boolean {
    return this.breaker.open;
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
   * it does not answer before the decision deadline (see {@link DecisionDeadline}).
   *
   * @param request - the request after the decision rules
   * @param deadlineAtMs - the caller's deadline (`grpc-timeout`) on the `performance.now()`
   *   clock, in milliseconds; undefined: none
   */
  doLimit(
    request: LimitRequest,
    deadlineAtMs?: number,
  ): Promise<RateLimitResponse_DescriptorStatus[]> {
    // The usual path: one flag, the backend under its deadline, no allocation of ours.
    if (this.mode !== "local" && !this.breaker.open)
      return this.doLimitClosed(request, deadlineAtMs);
    return this.mode === "local"
      ? this.doLimitShadowed(request, deadlineAtMs)
      : this.doLimitOpen(request, deadlineAtMs);
  }

  /**
   * A dry run through the guarded backend (see {@link RateLimitCache.dryRun}), for the Explain
   * API; it neither consults nor moves the breaker: Explain shows the store's counters, and a
   * failing store answers with its {@link BackendError}.
   */
  dryRun(request: LimitRequest, options: DryRunOptions): Promise<DryRun> {
    const backend = this.backend;
    if (backend.dryRun === undefined)
      return Promise.reject(
        new TypeError(
          `the ${this.backendName} backend cannot dry-run a charge`,
        ),
      );
    return backend.dryRun(request, options);
  }

  flush(): Promise<void> {
    return this.backend.flush();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.replayWait !== undefined) clearTimeout(this.replayWait);
    this.replayWait = undefined;
    await this.backend.close();
    await this.localMode.close();
  }

  // --- the three paths -----------------------------------------------------------------------

  /**
   * Closed circuit, no shadow counting: the hot path, one counter reset beyond the backend.
   */
  private async doLimitClosed(
    request: LimitRequest,
    deadlineAtMs: number | undefined,
  ): Promise<RateLimitResponse_DescriptorStatus[]> {
    try {
      const statuses = await this.deadline.bound(
        this.backend.doLimit(request),
        deadlineAtMs,
      );
      this.breaker.recordSuccess();
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
    if (!this.breaker.startProbe())
      return this.degradedAnswer(this.circuitOpenError(), request, true);
    try {
      const statuses = await this.backendDecision(request, deadlineAtMs);
      this.closeCircuit();
      return statuses;
    } catch (err) {
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
      return this.breaker.open
        ? this.doLimitOpen(request, deadlineAtMs)
        : this.doLimitClosed(request, deadlineAtMs);
    }
    const probe = this.breaker.startProbe();
    if (this.breaker.open && !probe) {
      this.countDegradedDecision();
      return this.localMode.answer(request, true);
    }
    let statuses: RateLimitResponse_DescriptorStatus[];
    try {
      statuses = await this.backendDecision(request, deadlineAtMs);
    } catch (err) {
      const failure = this.recordFailure(err, probe);
      this.countDegradedDecision();
      // The store did not count this request (or may not have): the local limiter answers,
      // and its charge is replayed into the store when it answers again, unless the store
      // turns out to have counted it.
      return this.answerAfterFailure(failure, request);
    }
    if (probe) this.closeCircuit();
    else this.breaker.recordSuccess();
    // Counted by the store: the local limiter counts it too, unrecorded.
    return this.localMode.countAlongside(request, statuses);
  }

  /** The backend's decision on `request`, bounded by the decision deadline. */
  private backendDecision(
    request: LimitRequest,
    deadlineAtMs: number | undefined,
  ): Promise<RateLimitResponse_DescriptorStatus[]> {
    return this.deadline.bound(this.backend.doLimit(request), deadlineAtMs);
  }

  private circuitOpenError(): BackendError {
    return new BackendError(
      this.backendName,
      `${this.backendName} backend unavailable (circuit open after ${this.breaker.threshold} consecutive failures)`,
    );
  }

  // --- failure handling ----------------------------------------------------------------------

  /**
   * Counts one failure in the breaker and the statistics; logs and reports the circuit opening
   * at the threshold. Errors other than {@link BackendError} are rethrown unchanged (a probe
   * that ends in one is abandoned, uncounted).
   *
   * @param probe - whether the failed call was the breaker's probe
   */
  private recordFailure(err: unknown, probe: boolean): BackendError {
    if (!(err instanceof BackendError)) {
      if (probe) this.breaker.abandonProbe();
      throw err;
    }
    const stats = this.guardStats();
    stats.failures?.add(1);
    if (probe) {
      this.breaker.probeFailed();
      return err;
    }
    if (!this.breaker.recordFailure()) return err;
    stats.circuitOpened?.add(1);
    stats.degraded?.set(1);
    this.logger.warn(
      {
        backend: this.backendName,
        failures: this.breaker.consecutiveFailures,
        mode: this.mode,
        err,
      },
      "backend circuit opened: answering by the failure mode",
    );
    this.onDegradedChange?.(true);
    return err;
  }

  /** The probe succeeded: closes the circuit, logs and reports it, replays the outage. */
  private closeCircuit(): void {
    if (!this.breaker.probeSucceeded()) return;
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
   * While calls are in doubt it waits for them (at most `inDoubtReplayWaitMs`).
   *
   * @param waited - the wait for the calls in doubt is over
   */
  private replayOutage(waited = false): void {
    const replay = this.replay;
    if (replay === undefined || this.journal.size === 0) return;
    if (!waited && this.callsInDoubt > 0) {
      this.replayWait ??= setTimeout(() => {
        this.replayWait = undefined;
        this.replayOutage(true);
      }, this.inDoubtReplayWaitMs);
      this.replayWait.unref();
      return;
    }
    const replayed = this.journal.replay(replay, this.clock.nowSeconds());
    if (replayed === undefined) return;
    const stats = this.guardStats();
    void replayed.then((outcome) => {
      const { counters, hits } = outcome;
      if (outcome.ok) {
        stats.replayedHits?.add(hits);
        this.logger.warn(
          { backend: this.backendName, counters, hits },
          "backend outage replayed: hits admitted locally added to the store's counters",
        );
      } else {
        this.logger.warn(
          { backend: this.backendName, counters, hits, err: outcome.error },
          "backend outage replay failed: kept for the next recovery",
        );
      }
    });
  }

  /**
   * Answers a request the backend did not decide, by the domain's failure mode.
   *
   * @param countStats - whether the rule statistics (total hits included) are still to be
   *   counted: true when the backend was not called at all
   */
  private degradedAnswer(
    err: BackendError,
    request: LimitRequest,
    countStats: boolean,
  ): Promise<RateLimitResponse_DescriptorStatus[]> {
    const mode = this.domainModes.get(request.domain) ?? this.mode;
    if (mode === "error") return Promise.reject(err);
    this.countDegradedDecision();
    if (mode === "local")
      return countStats
        ? this.localMode.answer(request, true)
        : this.answerAfterFailure(err, request);
    return Promise.resolve(
      failureModeStatuses(mode, request.limits, this.clock.nowSeconds()),
    );
  }

  // --- calls in doubt ------------------------------------------------------------------------

  /**
   * The `local` answer to a request whose store call failed (docs/failure-modes.md#calls-in-doubt).
   * Its charge is recorded for the replay, as the store did not count the request, unless:
   * the decision deadline gave up on the call (a {@link DecisionDeadlineError}): the call is
   * in doubt until it settles, and the replay waits; a reply means the store counted it after
   * all, and the charge is taken back; or the call failed `unanswered` (written, then
   * abandoned for silence on a connection the store kept open): the store applies it when it
   * answers again, and the charge is taken back at once.
   */
  private answerAfterFailure(
    err: BackendError,
    request: LimitRequest,
  ): Promise<RateLimitResponse_DescriptorStatus[]> {
    const pending =
      err instanceof DecisionDeadlineError ? err.pending : undefined;
    if (pending === undefined && !err.unanswered)
      return this.localMode.answer(request, false);
    if (pending !== undefined && this.callsInDoubt >= this.maxCallsInDoubt) {
      this.inDoubtStats().overflow?.add(1);
      return this.localMode.answer(request, false);
    }
    return this.answerInDoubt(request, pending);
  }

  /**
   * Answers locally and holds the charge until `pending` (the store's call) settles; without
   * `pending`, takes it back at once (the store applies the call).
   */
  private async answerInDoubt(
    request: LimitRequest,
    pending: Promise<unknown> | undefined,
  ): Promise<RateLimitResponse_DescriptorStatus[]> {
    if (pending === undefined) {
      const { statuses, plan } = await this.localMode.answerRecorded(
        request,
        false,
      );
      this.countedLate(plan);
      return statuses;
    }
    // Counted before the answer is charged, so a replay starting meanwhile waits for it.
    this.callsInDoubt++;
    const stats = this.inDoubtStats();
    stats.callsInDoubt?.set(this.callsInDoubt);
    let answered: Awaited<ReturnType<LocalMode["answerRecorded"]>>;
    try {
      answered = await this.localMode.answerRecorded(request, false);
    } catch (err) {
      this.settleInDoubt(undefined, false);
      throw err;
    }
    const plan = answered.plan;
    pending.then(
      () => {
        this.settleInDoubt(plan, true);
      },
      (err: unknown) => {
        this.settleInDoubt(plan, err instanceof BackendError && err.unanswered);
      },
    );
    return answered.statuses;
  }

  /**
   * A call in doubt settled: `counted` (a reply, or written and abandoned for silence) takes
   * its local charge back; otherwise it stays for the replay. The last one to settle starts a
   * replay that was waiting.
   */
  private settleInDoubt(plan: RequestPlan | undefined, counted: boolean): void {
    this.callsInDoubt--;
    this.inDoubtStats().callsInDoubt?.set(this.callsInDoubt);
    if (counted) this.countedLate(plan);
    if (this.callsInDoubt === 0 && this.replayWait !== undefined) {
      clearTimeout(this.replayWait);
      this.replayWait = undefined;
      this.replayOutage(true);
    }
  }

  /** The store counted a request the local mode also charged: takes the charge back. */
  private countedLate(plan: RequestPlan | undefined): void {
    this.inDoubtStats().countedLate?.add(1);
    if (plan?.charged === true) this.journal.takeBack(plan.sent);
  }

  private inDoubtStats(): InDoubtStats {
    if (this.inDoubtStatsCache !== undefined) return this.inDoubtStatsCache;
    const store = this.statsStore;
    this.inDoubtStatsCache = {
      callsInDoubt: store?.gauge(statNames.backendCallsInDoubt),
      countedLate: store?.counter(statNames.backendCountedLate),
      overflow: store?.counter(statNames.backendInDoubtOverflow),
    };
    return this.inDoubtStatsCache;
  }

  private countDegradedDecision(): void {
    this.guardStats().degradedDecisions?.add(1);
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

/**
 * The `allow` or `deny` answer without the backend: `allow` is OK with the whole limit
 * remaining, `deny` over limit with none (OK for a shadow-mode rule); a descriptor without a
 * limit is OK. Each resets with its rule's window.
 *
 * @param limits - parallel to the request's descriptors
 * @returns one status per limit, same order
 */
function failureModeStatuses(
  mode: "allow" | "deny",
  limits: readonly (RateLimit | undefined)[],
  nowSeconds: number,
): RateLimitResponse_DescriptorStatus[] {
  const statuses = new Array<RateLimitResponse_DescriptorStatus>(limits.length);
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
              limitResetSeconds(limit, nowSeconds),
            )
          : // Deny: over limit, unless the rule is in shadow mode (always OK).
            limitStatus(
              limit.shadowMode ? Code.OK : Code.OVER_LIMIT,
              limit,
              0,
              limitResetSeconds(limit, nowSeconds),
            );
  }
  return statuses;
}
