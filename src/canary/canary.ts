// The config canary (docs/operations.md#config-canary): a candidate config loaded beside the
// live one, every ShouldRateLimit request evaluated against it too, and a report of what it would
// have answered differently. It never changes an answer, a live counter or a live statistic:
// while it runs it subscribes to the published decisions (`DecisionChannel`), reads the counters
// the live decision saw (`Decision.counted`), and decides again after the answer has left, with the
// live decision code over a `CanaryCounterBackend`: shared keys from the live reading plus the
// canary's `CanaryLedger`, candidate-only keys in the ledger (or, for kv, the store).

import type { Logger } from "pino";
import { ConfigError } from "../config/config-error.js";
import { loadConfig, type ConfigFile } from "../config/load-config.js";
import type {
  RateLimit,
  RateLimitConfig,
} from "../config/rate-limit-config.js";
import type { ChargeMode } from "../config/yaml-types.js";
import type { CounterBackend } from "../limiter/counter-backend.js";
import type { OverrideLookup } from "../limiter/decision-hooks.js";
import type { DecisionChannel } from "../limiter/decision-channel.js";
import type { Decision } from "../limiter/decision.js";
import type { RequestPlan } from "../limiter/request-plan.js";
import {
  RateLimitResponse_Code as Code,
  type GetCanaryReportResponse,
  type RateLimitResponse_DescriptorStatus,
} from "../proto.js";
import { sanitizeStatName } from "../stats/names.js";
import { createStatsManager } from "../stats/stats-manager.js";
import type { Clock } from "../util/clock.js";
import { CanaryCounterBackend } from "./canary-backend.js";
import { CanaryReport, type CanaryReportOptions } from "./canary-report.js";
import {
  createCandidateEvaluator,
  type CandidateDecision,
  type CandidateEvaluator,
} from "./candidate-evaluator.js";
import { CanaryLedger } from "./canary-ledger.js";
import { liveCounters, type LiveCounters } from "./live-counters.js";
import {
  hasReplaces,
  hasTokenBuckets,
  ruleCorrespondence,
  unchangedDomains,
  type CandidateRule,
} from "./rule-equivalence.js";

/** Options of {@link createCanary}; the decision settings are the live ones. */
export interface CanaryOptions {
  /**
   * Where the live decisions are published: a running canary subscribes, and reads the
   * counters each live decision saw (`Decision.counted`, left by the store's pipeline; with
   * the kv and mc backends, the pipeline inside the backend guard).
   */
  readonly decisions: DecisionChannel;
  /**
   * Where candidate-only counters live when not in this process: for kv, the live store under
   * keys of their own (replicas running the same canary then add up, as live counters do).
   * Undefined (memory and mc backends): the canary's ledger, in process, per replica.
   */
  readonly remoteStore?: CounterBackend;
  /**
   * Most keys the canary's ledger keeps (`MEMORY_MAX_KEYS`): the candidate-only counters, and
   * the extra and last live count of each shared key. @defaultValue 1000000
   */
  readonly maxKeys?: number;
  /**
   * Reads a config directory as the file provider does (runtime keys as names); used by
   * `StartCanary {config_dir}` and `CANARY_CONFIG_DIR`.
   */
  readonly readConfigDir: (dir: string) => Promise<readonly ConfigFile[]>;
  /** `MERGE_DOMAIN_CONFIG`. @defaultValue false */
  readonly mergeDomainConfig?: boolean;
  /** `CHARGE_MODE`. @defaultValue "each" */
  readonly chargeMode?: ChargeMode;
  /** `NEAR_LIMIT_RATIO`. @defaultValue 0.8 */
  readonly nearLimitRatio?: number;
  /** `CACHE_KEY_PREFIX`. @defaultValue "" */
  readonly cacheKeyPrefix?: string;
  /** `EXPIRATION_JITTER_MAX_SECONDS` (candidate-only counters in kv). @defaultValue 0 */
  readonly expirationJitterMaxSeconds?: number;
  /** `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`. @defaultValue false */
  readonly stopCacheKeyIncrementWhenOverlimit?: boolean;
  /** `QUOTA_MODE`. @defaultValue false */
  readonly globalQuotaMode?: boolean;
  /**
   * `LOCAL_CACHE_SIZE_IN_BYTES`: the candidate gets its own local over-limit cache, as large.
   * @defaultValue 0
   */
  readonly localCacheSizeBytes?: number;
  /**
   * Whether two descriptors of one request with the same cache key see each other's hits: true
   * for memory and kv, false for mc (it reads every counter before incrementing).
   * @defaultValue true
   */
  readonly sameKeyAccumulates?: boolean;
  /** The live run-time overrides, applied to the candidate's rules too. @defaultValue none */
  readonly overrides?: OverrideLookup;
  /**
   * Requests waiting for their evaluation at most; beyond, a request is counted unevaluated.
   * @defaultValue 10000
   */
  readonly maxPending?: number;
  /** Bounds of the report. */
  readonly report?: CanaryReportOptions;
  /** Time source (the start time; the token buckets' milliseconds). */
  readonly clock: Clock;
  readonly logger: Logger;
  /**
   * Runs a task after the current answer has left (the evaluations).
   * @defaultValue `setImmediate`
   */
  readonly defer?: (task: () => void) => void;
}

/** Where a candidate config comes from. */
export type CanarySource =
  { readonly dir: string } | { readonly files: readonly ConfigFile[] };

/** A canary that has started. */
export interface CanaryStarted {
  /** When it started, ms since the Unix epoch. */
  readonly startMs: number;
  /** The candidate's domains, sorted. */
  readonly domains: readonly string[];
}

/** The config canary of one process (see the file comment). */
export interface Canary {
  /**
   * Loads a candidate config and starts a canary with it, replacing a running one (whose
   * report is dropped). A bad candidate leaves everything as it was.
   *
   * @throws {@link ConfigError} when the candidate does not load (the loader's error, with
   *   file, line and field), or a directory holds no file
   */
  start(source: CanarySource): Promise<CanaryStarted>;
  /**
   * The report since the running canary started, once every request answered before the call
   * is evaluated; with none running, the last stopped canary's report (`active` false), or an
   * empty one.
   */
  report(): Promise<GetCanaryReportResponse>;
  /**
   * Stops the running canary and returns its last report (every request answered before the
   * call evaluated); undefined when none runs.
   */
  stop(): Promise<GetCanaryReportResponse | undefined>;
  /** Stops the running canary, if any; idempotent. */
  close(): Promise<void>;
  /** The running canary's in-process counters (tests and diagnostics); undefined when none runs. */
  ledger(): CanaryLedger | undefined;
}

/** Builds the config canary of one process; none runs until {@link Canary.start}. */
export function createCanary(options: CanaryOptions): Canary {
  const { clock, logger, decisions } = options;
  const maxPending = options.maxPending ?? 10_000;
  const globalQuotaMode = options.globalQuotaMode ?? false;
  const accumulates = options.sameKeyAccumulates ?? true;
  const defer =
    options.defer ??
    ((task: () => void) => {
      setImmediate(task);
    });
  let running: CanaryRun | undefined;
  let last: GetCanaryReportResponse | undefined;

  /** One running canary. */
  class CanaryRun {
    readonly report: CanaryReport;
    readonly evaluator: CandidateEvaluator;
    readonly ledger: CanaryLedger;
    readonly startMs: number;
    readonly source: string;
    /** Removes the run's decision listener (set when it starts). */
    unsubscribe: () => void = () => undefined;
    /**
     * Domains with the same rules in both configs (for {@link liveSeen}); computed when the
     * first request decided with a live config arrives, again after each live reload.
     */
    unchanged = new Set<string>();
    /**
     * Domains whose live rules have `replaces`: the live decision may leave out a counter the
     * candidate counts, so their requests always go through the candidate's pipeline (which
     * keeps the ledger's live counts).
     */
    liveReplaces = new Set<string>();
    /** The candidate's rule at each live rule's place, in domains of the same shape. */
    rules = new Map<RateLimit, CandidateRule>();
    liveSeen: RateLimitConfig | undefined;
    /**
     * The live decisions of changed domains waiting for their evaluation, in request order, kept
     * as published (a decision is never written after it is published: nothing is copied), and
     * beside each its time in ms for the candidate's token buckets ({@link CanaryRun.observe}).
     */
    private queue: Decision[] = [];
    private queueMs: number[] = [];
    private scheduled = false;
    /** Requests queued so far, and evaluated so far (both only grow). */
    private queued = 0;
    private evaluated = 0;
    /** Who waits for the requests queued before a point to be evaluated. */
    private waiting: { readonly upTo: number; readonly resolve: () => void }[] =
      [];
    /** Evaluations run one after the other, in request order (the ledger is in process). */
    private readonly sequential: boolean;
    /** The candidate has a token bucket (its decisions need the request's milliseconds). */
    private readonly buckets: boolean;
    private failures = 0;
    private sweptAt = 0;

    constructor(candidate: RateLimitConfig, source: string) {
      this.report = new CanaryReport(options.report);
      this.ledger = new CanaryLedger(
        options.maxKeys !== undefined ? { maxKeys: options.maxKeys } : {},
      );
      const remote = options.remoteStore;
      // In process, evaluations run one after the other, as the requests came. With a remote
      // store (kv) they are awaited and overlap, as live requests do.
      this.sequential = remote === undefined;
      this.evaluator = createCandidateEvaluator({
        config: candidate,
        backend: new CanaryCounterBackend({
          ledger: this.ledger,
          ...(remote !== undefined ? { remote } : {}),
          sameKeyAccumulates: accumulates,
        }),
        sameKeyAccumulates: accumulates,
        ...(options.nearLimitRatio !== undefined
          ? { nearLimitRatio: options.nearLimitRatio }
          : {}),
        ...(options.cacheKeyPrefix !== undefined
          ? { cacheKeyPrefix: options.cacheKeyPrefix }
          : {}),
        ...(options.expirationJitterMaxSeconds !== undefined
          ? { expirationJitterMaxSeconds: options.expirationJitterMaxSeconds }
          : {}),
        ...(options.stopCacheKeyIncrementWhenOverlimit !== undefined
          ? {
              stopCacheKeyIncrementWhenOverlimit:
                options.stopCacheKeyIncrementWhenOverlimit,
            }
          : {}),
        globalQuotaMode,
        ...(options.overrides !== undefined
          ? { overrides: options.overrides }
          : {}),
        ...(options.localCacheSizeBytes !== undefined
          ? { localCacheSizeBytes: options.localCacheSizeBytes }
          : {}),
      });
      this.startMs = clock.nowMs();
      this.source = source;
      const view = candidate.view;
      this.buckets =
        view === undefined ||
        candidate.domains.some((domain) =>
          hasTokenBuckets(view.domainRules(domain)),
        );
    }

    /** Recomputes the unchanged domains against a live config. */
    compare(live: RateLimitConfig | undefined): void {
      this.liveSeen = live;
      this.unchanged =
        live === undefined
          ? new Set()
          : unchangedDomains(live, this.evaluator.config);
      this.liveReplaces = new Set(
        live?.domains.filter((domain) => {
          const view = live.view;
          return view === undefined || hasReplaces(view.domainRules(domain));
        }),
      );
      this.rules = new Map();
      const liveView = live?.view;
      const candidateView = this.evaluator.config.view;
      if (liveView !== undefined && candidateView !== undefined)
        for (const domain of live?.domains ?? [])
          if (!this.unchanged.has(domain))
            ruleCorrespondence(
              liveView.domainRules(domain),
              candidateView.domainRules(domain),
              this.rules,
            );
    }

    /**
     * Takes one live decision of a changed domain, with what the store read. When nothing waits
     * for its evaluation and the live reading decides it (`decideFromReading`: a few hundred
     * nanoseconds, no allocation), it is evaluated here, in request order as a deferred one
     * would be and with the same ledger, so the decision is not kept past the answer; else it
     * is queued for after the answer has left, behind the ones before it.
     */
    observe(d: Decision): void {
      const report = this.report;
      report.requests++;
      if (d.config !== this.liveSeen) this.compare(d.config);
      if (this.unchanged.has(d.request.domain)) return;
      const plan = d.counted;
      if (plan === undefined || this.queue.length >= maxPending) {
        report.unevaluated++;
        return;
      }
      // `scheduled` is false only while no evaluation is queued or under way.
      if (!this.scheduled && this.evaluatedNow(d, plan)) {
        this.queued++;
        this.evaluated++;
        return;
      }
      // Milliseconds for the candidate's token buckets: the live plan's when it had a bucket,
      // else now (read only when the candidate has token buckets), kept within the live
      // request's second.
      let nowMs =
        plan.nowUs > 0
          ? plan.nowUs / 1000
          : this.buckets
            ? clock.nowMs()
            : plan.nowSeconds * 1000;
      if (Math.floor(nowMs / 1000) !== plan.nowSeconds)
        nowMs = plan.nowSeconds * 1000;
      this.queue.push(d);
      this.queueMs.push(nowMs);
      this.queued++;
      if (!this.scheduled) {
        this.scheduled = true;
        defer(this.drainTask);
      }
    }

    /**
     * Resolves once every request observed so far has been evaluated (later ones are not
     * waited for, so a report under steady load does not wait for the load to stop).
     */
    settled(): Promise<void> {
      const upTo = this.queued;
      if (this.evaluated >= upTo) return Promise.resolve();
      return new Promise((resolve) => {
        this.waiting.push({ upTo, resolve });
      });
    }

    /** {@link CanaryRun.drain} as the deferred task (one function for the run's life). */
    private readonly drainTask = (): void => {
      this.drain();
    };

    /**
     * Evaluates the queued decisions in request order, batch after batch: synchronously while
     * each is decided from its live reading; a batch with evaluations through the candidate's
     * pipeline waits for them (in process one after the other, with a remote store together)
     * before the next.
     */
    private drain(): void {
      while (this.queue.length > 0) {
        const batch = this.queue;
        const times = this.queueMs;
        this.queue = [];
        this.queueMs = [];
        const pending = this.evaluateBatch(batch, times, 0);
        if (pending !== undefined) {
          void pending.then(() => {
            this.done(batch.length);
            this.drain();
          });
          return;
        }
        this.done(batch.length);
      }
      this.scheduled = false;
    }

    /**
     * Evaluates `batch` from `from` on; undefined when every evaluation was synchronous, else
     * the promise of the rest (never rejects: evaluation failures are counted).
     */
    private evaluateBatch(
      batch: readonly Decision[],
      times: readonly number[],
      from: number,
    ): Promise<void> | undefined {
      let overlapping: Promise<void>[] | undefined;
      for (let i = from; i < batch.length; i++) {
        const d = batch[i];
        const evaluation =
          d === undefined ? undefined : this.evaluate(d, times[i] ?? 0);
        if (evaluation === undefined) continue;
        if (this.sequential)
          return evaluation.then(() => this.evaluateBatch(batch, times, i + 1));
        (overlapping ??= []).push(evaluation);
      }
      return overlapping === undefined
        ? undefined
        : Promise.all(overlapping).then(() => undefined);
    }

    /** Counts `n` more requests evaluated and wakes who waited for them. */
    private done(n: number): void {
      this.evaluated += n;
      if (this.waiting.length > 0) {
        const evaluated = this.evaluated;
        const ready = this.waiting.filter((w) => w.upTo <= evaluated);
        this.waiting = this.waiting.filter((w) => w.upTo > evaluated);
        for (const w of ready) w.resolve();
      }
    }

    /**
     * Evaluates one decision from its live reading, if that decides it (see
     * {@link CanaryRun.observe}); never throws (a failure counts the request unevaluated).
     *
     * @returns whether the decision was evaluated
     */
    private evaluatedNow(d: Decision, plan: RequestPlan): boolean {
      try {
        const now = plan.nowSeconds;
        if (now > this.sweptAt) {
          this.ledger.sweep(now);
          this.sweptAt = now;
        }
        if (this.liveReplaces.has(d.request.domain)) return false;
        const decision = this.evaluator.decideFromReading(
          plan,
          this.ledger,
          this.rules,
        );
        if (decision === undefined) return false;
        this.tally(d, decision);
      } catch (err) {
        this.failed(err);
      }
      return true;
    }

    /** Counts a request that could not be evaluated; the first failure is logged. */
    private failed(err: unknown): void {
      this.report.unevaluated++;
      // The first failure of a canary is a warning; the count is in the report.
      if (this.failures++ === 0)
        logger.warn(
          { err },
          "config canary: a request could not be evaluated against the candidate",
        );
    }

    /**
     * Evaluates one live decision (its `counted` plan is set: {@link CanaryRun.observe}): from
     * the live reading alone where that is the same arithmetic (then synchronously), else
     * through the candidate's pipeline.
     *
     * @param nowMs - the request time in ms (within the plan's `nowSeconds`)
     */
    private evaluate(d: Decision, nowMs: number): Promise<void> | undefined {
      const plan = d.counted;
      if (plan === undefined) return undefined;
      const now = plan.nowSeconds;
      if (now > this.sweptAt) {
        this.ledger.sweep(now);
        this.sweptAt = now;
      }
      if (!this.liveReplaces.has(d.request.domain)) {
        const decision = this.evaluator.decideFromReading(
          plan,
          this.ledger,
          this.rules,
        );
        if (decision !== undefined) {
          this.tally(d, decision);
          return undefined;
        }
      }
      return this.evaluateInPipeline(d, plan, nowMs);
    }

    private async evaluateInPipeline(
      d: Decision,
      plan: RequestPlan,
      nowMs: number,
    ): Promise<void> {
      const now = plan.nowSeconds;
      const live = liveCounters(plan, plan.charged, accumulates);
      this.startCounts(live);
      let decision;
      try {
        decision = await this.evaluator.evaluate(
          plan.request,
          live,
          now,
          nowMs,
        );
        this.keepCounts(live, decision.replacedKeys, plan.nowUs);
      } catch (err) {
        this.failed(err);
        return;
      }
      this.tally(d, decision);
    }

    /** Counts a request whose overall code the candidate changes in the report. */
    private tally(d: Decision, decision: CandidateDecision): void {
      const liveOverall = d.overallCode;
      if (decision.overallCode === liveOverall) return;
      const { domain, descriptors } = d.request;
      if (decision.overallCode === Code.OVER_LIMIT) {
        const i = decision.deciding ?? 0;
        const limit = decision.limits[i];
        this.report.record(
          "refuse",
          limit === undefined ? "" : ruleKey(limit, decision.statuses[i]),
          domain,
          descriptors[i],
        );
        return;
      }
      // The live deciding descriptor (an OVER_LIMIT request's).
      const liveDeciding =
        liveOverall === Code.OVER_LIMIT && d.deciding >= 0
          ? d.deciding
          : undefined;
      const i = liveDeciding ?? 0;
      const counted = decision.limits[i];
      const matched = decision.matched[i];
      this.report.record(
        "admit",
        counted !== undefined
          ? ruleKey(counted, decision.statuses[i])
          : matched !== undefined
            ? ruleKey(matched, undefined)
            : liveRule(d, liveDeciding),
        domain,
        descriptors[i],
      );
    }

    /**
     * Sets the candidate's count of each shared window counter before the request: the live
     * count (or, where the live decision did not read it, the last one seen) plus the ledger's
     * extra; the previous window's likewise.
     */
    private startCounts(live: LiveCounters): void {
      const ledger = this.ledger;
      for (const [key, c] of live) {
        const entry = ledger.get(key);
        if (c.bucket) {
          // The candidate's own TAT where it left the live one.
          if (entry !== undefined && entry.tatUs > 0) c.tatUs = entry.tatUs;
          continue;
        }
        const before = c.before ?? entry?.seen ?? c.floor;
        c.value = Math.max(0, before + (entry?.extra ?? 0));
        c.start = c.value;
        const previousKey = c.previousKey;
        if (previousKey !== undefined) {
          const held = ledger.get(previousKey);
          c.previous = Math.max(
            0,
            (c.livePrevious ?? held?.seen ?? 0) + (held?.extra ?? 0),
          );
        }
      }
    }

    /**
     * Keeps, for each shared key the candidate used (or would use in other requests: a key
     * `replaces` dropped): for a window counter what the candidate charged minus what the live
     * decision charged, and the live count after the request; for a token bucket the
     * candidate's TAT where it differs from the live one, and the live TAT. In process every
     * used key is kept (its live count may be needed by a request whose live decision does not
     * read it); with a remote store only keys where the candidate differs.
     *
     * @param nowUs - the live request's time, µs (token buckets)
     */
    private keepCounts(
      live: LiveCounters,
      replacedKeys: readonly string[],
      nowUs: number,
    ): void {
      for (const key of replacedKeys) {
        const c = live.get(key);
        if (c !== undefined) c.used = true;
      }
      const ledger = this.ledger;
      for (const [key, c] of live) {
        if (!c.used) continue;
        let entry = ledger.get(key);
        if (c.bucket) {
          // A TAT at or before now is a full bucket, whatever its value.
          const candidate = Math.max(c.tatUs, nowUs);
          const liveAfter = Math.max(c.afterTatUs, nowUs);
          if (entry === undefined) {
            if (candidate === liveAfter && !this.sequential) continue;
            entry = ledger.entry(key, 0);
          }
          entry.seen = liveAfter;
          entry.tatUs = candidate === liveAfter ? 0 : candidate;
          ledger.keep(key, Math.ceil(Math.max(candidate, liveAfter) / 1e6));
          continue;
        }
        // The live count before the request as the candidate took it (startCounts), and after.
        const liveBefore = c.before ?? entry?.seen ?? c.floor;
        const liveAfter = c.after ?? liveBefore;
        const extra = c.value - c.start - (liveAfter - liveBefore);
        if (entry === undefined) {
          if (extra === 0 && !this.sequential) continue;
          entry = ledger.entry(key, c.expiresAtSeconds);
        }
        entry.extra += extra;
        entry.seen = liveAfter;
      }
    }

    message(active: boolean): GetCanaryReportResponse {
      return this.report.toMessage(active, this.startMs, this.source);
    }
  }

  async function stopRunning(): Promise<GetCanaryReportResponse | undefined> {
    const run = running;
    if (run === undefined) return undefined;
    running = undefined;
    run.unsubscribe();
    await run.settled();
    return run.message(false);
  }

  return {
    async start(source) {
      const isDir = "dir" in source;
      const files = isDir
        ? await options.readConfigDir(source.dir)
        : source.files;
      const where = isDir ? source.dir : "inline";
      if (files.length === 0)
        throw new ConfigError(`${where}: no config file to load`, {
          file: where,
          hint: isDir
            ? "give the directory holding the YAML files (as RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY)"
            : "give at least one file",
        });
      // Its own statistics: the candidate's counts never reach the live ones.
      const candidate = loadConfig(files, {
        statsManager: createStatsManager(),
        mergeDomainConfig: options.mergeDomainConfig ?? false,
        chargeMode: options.chargeMode ?? "each",
      });
      await stopRunning();
      const run = new CanaryRun(candidate, where);
      running = run;
      run.unsubscribe = decisions.subscribe((decision) => {
        run.observe(decision);
      });
      logger.info(
        { source: where, domains: candidate.domains },
        "config canary started",
      );
      return { startMs: run.startMs, domains: candidate.domains };
    },

    async report() {
      const run = running;
      if (run !== undefined) {
        await run.settled();
        return run.message(true);
      }
      return last ?? new CanaryReport().toMessage(false, 0, "");
    },

    async stop() {
      const report = await stopRunning();
      if (report !== undefined) {
        last = report;
        logger.info(
          {
            requests: report.requests,
            changedRequests: report.changedRequests,
          },
          "config canary stopped",
        );
      }
      return report;
    },

    async close() {
      await stopRunning();
    },

    ledger: () => running?.ledger,
  };
}

/** The stats key of the live deciding rule of a decision; "" when OK. */
function liveRule(d: Decision, liveDeciding: number | undefined): string {
  if (liveDeciding === undefined) return "";
  const limit = d.request.limits[liveDeciding];
  return limit === undefined ? "" : ruleKey(limit, d.statuses[liveDeciding]);
}

/**
 * The stats key of the limit that decided a descriptor: for a `rate_limits:` list the one whose
 * limit the status reports (the tightest), else the rule's own. Built from the config path, not
 * from request values (`detailed_metric` keys would be unbounded).
 */
function ruleKey(
  limit: RateLimit,
  status: RateLimitResponse_DescriptorStatus | undefined,
): string {
  let chosen = limit;
  const extra = limit.extraLimits;
  const reported = status?.currentLimit;
  if (extra !== undefined && reported !== undefined) {
    for (const candidate of [limit, ...extra]) {
      if (
        candidate.requestsPerUnit === reported.requestsPerUnit &&
        candidate.unit === reported.unit &&
        candidate.name === reported.name
      ) {
        chosen = candidate;
        break;
      }
    }
  }
  let key = ruleKeys.get(chosen);
  if (key === undefined) {
    key = sanitizeStatName(chosen.fullKey + chosen.statsKeySuffix);
    ruleKeys.set(chosen, key);
  }
  return key;
}

/** The stats key of each rule met in a change (limits are long-lived objects of a config). */
const ruleKeys = new WeakMap<RateLimit, string>();
