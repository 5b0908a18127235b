import { create } from "@bufbuild/protobuf";
import type { RateLimit } from "../config/rate-limit-config.js";
import {
  decidingDescriptor,
  unlimitedRemaining,
} from "../limiter/decision-rules.js";
import { hitsAddendFor } from "../limiter/hits-addend.js";
import { type LimitEntry, LimitRequest } from "../limiter/limit-request.js";
import { counterReading, type PlannedDescriptor } from "../limiter/pipeline.js";
import { kinds } from "../limiter/algorithms.js";
import type { RateLimitCache } from "../limiter/rate-limit-cache.js";
import {
  DescriptorExplanation_Verdict as Verdict,
  ExplainResponseSchema,
  RateLimitResponse_Code as RlsCode,
  RateLimitResponse_DescriptorStatusSchema,
  type ExplainRequest,
  type ExplainResponse,
  type RateLimitRequest,
  type RateLimitResponse_DescriptorStatus,
} from "../proto.js";
import { NotReadyError, RequestError } from "../service/errors.js";
import type { RateLimitService } from "../service/rate-limit-service.js";
import {
  resolveRequestBounds,
  type RequestBounds,
} from "../service/request-bounds.js";
import {
  checkRequestDescriptors,
  checkRequestHead,
} from "../service/request-checks.js";
import type { Clock } from "../util/clock.js";
import { explainLimit } from "./descriptor-explanation.js";
import type { ExplainOverrides } from "./run-time-override.js";
import { explainConfig, limitsOfRule } from "./explain-message.js";
import { decideDry } from "./dry-run.js";
import {
  explainBucket,
  explainWindow,
  type LimitOutcome,
  type NearLimit,
} from "./limit-outcome.js";

/** Options of {@link createExplainService}; mirror the decision service's settings. */
export interface ExplainServiceOptions {
  /** The decision service: its config snapshot, and the decision itself with `charge`. */
  readonly service: RateLimitService;
  /**
   * The decision pipeline (or the guard around it): its `dryRun` decides what a charge would
   * do, changing nothing (required once a request has a limit).
   */
  readonly cache: RateLimitCache;
  readonly clock: Clock;
  /** Backend name shown in answers: `memory`, `kv` or `mc`. */
  readonly backend: string;
  /** `NEAR_LIMIT_RATIO`, 0 ≤ ratio ≤ 1. @defaultValue 0.8 */
  readonly nearLimitRatio?: number;
  /** `SHADOW_MODE`. @defaultValue false */
  readonly globalShadowMode?: boolean;
  /** `QUOTA_MODE`. @defaultValue false */
  readonly globalQuotaMode?: boolean;
  /**
   * Whether two descriptors of one request with the same cache key see each other's hits
   * (memory and kv increment in descriptor order; mc reads every counter first, so it does
   * not). @defaultValue true
   */
  readonly sameKeyAccumulates?: boolean;
  /** Bounds on one request, as ShouldRateLimit's (docs/limits.md). @defaultValue the defaults of `request-bounds.ts` */
  readonly requestBounds?: Partial<RequestBounds>;
  /**
   * The run-time overrides ShouldRateLimit probes (admin API, docs/operations.md#overrides):
   * an explained descriptor shows the override that decided its limit. @defaultValue none
   */
  readonly overrides?: ExplainOverrides;
}

/** The Explain API (`ratelimit.explain.v1.ExplainService`). */
export interface ExplainService {
  /**
   * Explains one request: per descriptor the match path, the rule, replaces, the counter and
   * the decision; then the overall decision and the deciding descriptor. With `charge` false
   * nothing changes (counters are read, no statistic moves); with `charge` true the request is
   * decided by ShouldRateLimit itself and the answer carries its response.
   *
   * @throws {@link RequestError} for what ShouldRateLimit refuses (same texts), and a missing
   *   `request`
   * @throws {@link NotReadyError} before any config has loaded
   * @throws {@link BackendError} when the backend fails
   */
  explain(request: ExplainRequest): Promise<ExplainResponse>;
}

/** Creates the Explain service. */
export function createExplainService(
  options: ExplainServiceOptions,
): ExplainService {
  const { service, cache, clock } = options;
  const nearLimit: NearLimit = {
    ratio: Math.fround(options.nearLimitRatio ?? 0.8),
    configured: options.nearLimitRatio ?? 0.8,
  };
  const globalShadowMode = options.globalShadowMode ?? false;
  const globalQuotaMode = options.globalQuotaMode ?? false;
  const sameKeyAccumulates = options.sameKeyAccumulates ?? true;
  const bounds = resolveRequestBounds(options.requestBounds);

  async function explain(message: ExplainRequest): Promise<ExplainResponse> {
    const request = message.request;
    if (request === undefined)
      throw new RequestError("request must be set (the RateLimitRequest)");
    checkRequestHead(request, bounds);
    const snapshot = service.currentConfig();
    if (snapshot === undefined)
      throw new NotReadyError("no rate limit configuration loaded");
    checkRequestDescriptors(request, bounds);
    const view = snapshot.view;
    if (view === undefined)
      throw new NotReadyError("the loaded configuration cannot be explained");
    const explained = explainConfig(
      (domain, descriptor) =>
        explainLimit(view, domain, descriptor, options.overrides),
      request,
    );
    const { limits, unlimited, descriptors } = explained;
    const n = request.descriptors.length;
    const hits = request.descriptors.map((d) =>
      hitsAddendFor(d, request.hitsAddend),
    );
    const entries = request.descriptors.map((descriptor, i): LimitEntry => ({
      descriptor,
      limit: limits[i],
      hitsAddend: hits[i]!,
      unlimited: unlimited[i] === true,
    }));
    const limited = LimitRequest.of(request.domain, entries);
    // What a charge would do, decided by the decision pipeline itself over a read-only view
    // of the store, statistics muted (RateLimitPipeline.dryRun): its charge mode, the
    // all-or-nothing check, STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
    // (docs/reference-parity.md#stop-increment) and the order in which the store meets the
    // request's counters and buckets. Refunds are not run: Explain charges around them.
    const dryEntries = entries.map((entry): LimitEntry =>
      (entry.hitsAddend ?? 0) < 0 ? { ...entry, limit: undefined } : entry,
    );
    const dry = dryEntries.every((entry) => entry.limit === undefined)
      ? undefined
      : await decideDry(
          cache,
          LimitRequest.of(request.domain, dryEntries),
          sameKeyAccumulates,
        );
    const plan = dry?.run.plan;
    const nowSeconds = plan?.nowSeconds ?? clock.nowSeconds();
    const nowUs = plan?.nowUs ?? 0;
    // The plan's entries per descriptor: one per limit (window counters and token buckets).
    const planned = new Array<PlannedDescriptor[] | undefined>(n);
    for (const entries of [plan?.counted ?? [], plan?.buckets ?? []])
      for (const e of entries) (planned[e.index] ??= []).push(e);
    // The charge mode of the request's first limit, as the plan takes it (refunds included).
    const allOrNothing =
      limits.find((l) => l !== undefined)?.allOrNothing ?? false;
    const refused = plan?.charged === false;
    const stopped = dry?.run.stopped;
    const stopNote =
      stopped === "local-cache"
        ? "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: a key of this request is over limit in the local cache, so no counter of the request is incremented"
        : stopped === "over-limit"
          ? "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: a descriptor of this request goes over its limit, so only the counters that go over are incremented"
          : undefined;

    const predicted: RateLimitResponse_DescriptorStatus[] = [];
    // Descriptors that do not fit (all-or-nothing charging refused the request because of
    // them), with the positions of their limits that do not (a rate_limits: list).
    const unfit = new Map<number, number[]>();
    for (let i = 0; i < n; i++) {
      const d = descriptors[i]!;
      const limit = limits[i];
      if (hits[i]! < 0) {
        // A refund (is_negative_hits): no counter check, never over limit.
        const back = -hits[i]!;
        d.hitsAddend = BigInt(back);
        d.notes.push(refundNote(limit, back));
        predicted.push(
          create(RateLimitResponse_DescriptorStatusSchema, {
            code: RlsCode.OK,
            limitRemaining: unlimited[i] === true ? unlimitedRemaining : 0,
          }),
        );
        continue;
      }
      d.hitsAddend = BigInt(hits[i]!);
      if (limit === undefined) {
        predicted.push(
          create(RateLimitResponse_DescriptorStatusSchema, {
            code: RlsCode.OK,
            limitRemaining: unlimited[i] === true ? unlimitedRemaining : 0,
          }),
        );
        if (unlimited[i] === true)
          d.notes.push(
            "unlimited: answered OK with 4294967295 remaining; no counter is read or written",
          );
        continue;
      }
      const rules = limitsOfRule(limit);
      const outcomes: LimitOutcome[] = [];
      for (const l of rules) {
        const entry = planned[i]?.find((e) => e.limit === l);
        const decided =
          entry === undefined ? undefined : dry?.decided.get(entry);
        if (entry === undefined || decided === undefined)
          throw new TypeError(
            `Explain's dry run did not decide limit ${l.fullKey} of descriptors[${i}]`,
          );
        const notes: string[] = [];
        if (l.algorithm.kind === "token_bucket") {
          const reading = dry!.run.backend.bucketReading(entry);
          if (reading === undefined)
            throw new TypeError(
              `Explain's dry run did not read bucket ${entry.cacheKey}`,
            );
          outcomes.push(
            explainBucket(
              l,
              entry.cacheKey,
              reading,
              decided,
              hits[i]!,
              nowUs,
              nearLimit,
              notes,
            ),
          );
          continue;
        }
        const reading = {
          ...counterReading(entry),
          value: dry!.run.backend.storedValue(entry.cacheKey) ?? 0,
        };
        outcomes.push(
          explainWindow(
            l,
            reading,
            decided,
            hits[i]!,
            entry.increment,
            nowSeconds,
            nearLimit,
            notes,
          ),
        );
      }
      // The limit whose status the pipeline answered with (the tightest, pipeline.ts `put`).
      const status = dry!.run.statuses[i]!;
      const k = outcomes.findIndex((o) => o.status === status);
      const chosen = outcomes[k]!;
      predicted.push(chosen.status);
      d.verdict = chosen.verdict;
      if (chosen.counter !== undefined) d.counter = chosen.counter;
      if (chosen.bucket !== undefined) d.bucket = chosen.bucket;
      if (limit.extraLimits === undefined) {
        d.notes.push(...chosen.notes);
      } else {
        outcomes.forEach((o, j) => {
          const check = d.limits[j];
          if (check === undefined) return;
          if (o.counter !== undefined) check.counter = o.counter;
          if (o.bucket !== undefined) check.bucket = o.bucket;
          check.verdict = o.verdict;
          check.status = o.status;
          check.notes = o.notes;
          check.deciding = j === k;
        });
        d.notes.push(
          `rate_limits: ${rules.length} limits, each checked on its own; limits[${k}] ` +
            (chosen.status.code === RlsCode.OVER_LIMIT
              ? "is over its limit and decides"
              : `decides with the fewest remaining (${chosen.status.limitRemaining})`),
        );
      }
      if (refused) {
        const over = outcomes.flatMap((o, j) => (o.unfit ? [j] : []));
        if (over.length > 0) unfit.set(i, over);
      }
      if (stopNote !== undefined && outcomes.some((o) => !o.isBucket))
        d.notes.push(stopNote);
    }
    if (allOrNothing) {
      const refusedBy = [...unfit.keys()]
        .map((i) => `descriptors[${i}]`)
        .join(", ");
      for (let i = 0; i < n; i++) {
        const limit = limits[i];
        if (limit === undefined) continue;
        const d = descriptors[i]!;
        const over = unfit.get(i);
        if (!refused)
          d.notes.push(
            "charge: all_or_nothing: every descriptor of the request fits its limit, so every counter is charged",
          );
        else if (over !== undefined)
          d.notes.push(
            limit.extraLimits === undefined
              ? "charge: all_or_nothing: this descriptor does not fit its limit, so the request is refused and no counter of it is charged"
              : `charge: all_or_nothing: ${over.map((k) => `limits[${k}]`).join(", ")} of this descriptor does not fit, so the request is refused and no counter of it is charged`,
          );
        else
          d.notes.push(
            `charge: all_or_nothing: fits its limit, but ${refusedBy} does not: the request is refused and this counter is not charged`,
          );
      }
    }

    let statuses = predicted;
    const response = create(ExplainResponseSchema, {
      charged: message.charge,
      domainFound: explained.domainFound,
      backend: options.backend,
      descriptors,
      allOrNothing,
      allOrNothingRefused: refused,
    });
    let overallCode: RlsCode;
    if (message.charge) {
      const actual = await service.shouldRateLimit(request);
      response.response = actual;
      statuses = actual.statuses;
      overallCode = actual.overallCode;
    } else {
      overallCode = RlsCode.OK;
    }
    // Overall code and the deciding descriptor: ShouldRateLimit's rule
    // (docs/reference-parity.md#overall-code).
    const quota = new Array<boolean>(n);
    const deciding = decidingDescriptor(
      statuses,
      limited,
      globalQuotaMode,
      quota,
    );
    for (let i = 0; i < n; i++) {
      const d = descriptors[i]!;
      const status = statuses[i]!;
      d.status = status;
      if (quota[i] === true && status.code === RlsCode.OVER_LIMIT)
        d.notes.push(
          "quota_mode: over limit here only makes the request over limit when every quota descriptor is",
        );
    }
    if (!message.charge) {
      overallCode = deciding === undefined ? RlsCode.OK : RlsCode.OVER_LIMIT;
      if (overallCode === RlsCode.OVER_LIMIT && globalShadowMode) {
        overallCode = RlsCode.OK;
        response.globalShadowMode = true;
      }
    } else if (deciding !== undefined && overallCode === RlsCode.OK) {
      response.globalShadowMode = globalShadowMode;
    }
    response.overallCode = overallCode;
    if (deciding !== undefined) {
      response.decidingDescriptor = deciding;
      descriptors[deciding]!.deciding = true;
    }
    response.summary = summary(response, request);
    return response;
  }

  return { explain };
}

/** The note of a refund (`is_negative_hits`): what giving back does to each kind of limit. */
function refundNote(limit: RateLimit | undefined, back: number): string {
  if (limit === undefined)
    return `is_negative_hits: a refund of ${back}, but no counter applies`;
  if (limit.extraLimits !== undefined)
    return `is_negative_hits: a refund: each limit of the rate_limits: list gives back ${back} (a counter never below 0 nor created, a token bucket never past full); always OK, counted in no statistic`;
  return kinds[limit.algorithm.kind].refundNote(back);
}

/** One line summing up the answer. */
function summary(response: ExplainResponse, request: RateLimitRequest): string {
  const code = RlsCode[response.overallCode];
  if (!response.domainFound)
    return `${code}: domain '${request.domain}' is not loaded; no descriptor is limited`;
  const deciding = response.decidingDescriptor;
  if (deciding !== undefined) {
    const rule = response.descriptors[deciding]?.rule?.fullKey ?? "";
    const text =
      `descriptors[${deciding}] (${rule}) is over its limit` +
      (response.allOrNothingRefused
        ? " (charge: all_or_nothing: no counter of the request is charged)"
        : "");
    return response.globalShadowMode
      ? `${code}: ${text}, answered OK because of SHADOW_MODE`
      : `${code}: ${text}`;
  }
  const limited = response.descriptors.filter(
    (d) =>
      d.verdict === Verdict.WITHIN_LIMIT ||
      d.verdict === Verdict.NEAR_LIMIT ||
      d.verdict === Verdict.OVER_LIMIT_SHADOW,
  ).length;
  return limited === 0
    ? `${code}: no rate limit applies`
    : `${code}: ${limited} descriptor(s) within their limits`;
}
