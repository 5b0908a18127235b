import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { RateLimit } from "../config/rate-limit-config.js";
import { counterDecision } from "../limiter/counter-decision.js";
import { counterReading } from "../limiter/pipeline.js";
import {
  decidingDescriptor,
  unlimitedRemaining,
} from "../limiter/decision-rules.js";
import { hitsAddendFor } from "../limiter/hits-addend.js";
import { secondsUntilReset } from "../limiter/window.js";
import type {
  CounterReading,
  RateLimitCache,
} from "../limiter/rate-limit-cache.js";
import {
  CounterSchema,
  DescriptorExplanation_Verdict as Verdict,
  ExplainResponseSchema,
  RateLimitResponse_Code as RlsCode,
  RateLimitResponse_DescriptorStatusSchema,
  RateLimitResponse_RateLimitSchema,
  type DescriptorExplanation,
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
import { explainConfig } from "./explain-message.js";

/** Options of {@link createExplainService}; mirror the decision service's settings. */
export interface ExplainServiceOptions {
  /** The decision service: its config snapshot, and the decision itself with `charge`. */
  readonly service: RateLimitService;
  /**
   * The decision pipeline (or the guard around it): `previewCharge` reads the counters and
   * decides what a charge would do; without it counters read as absent.
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
  const ratio = Math.fround(options.nearLimitRatio ?? 0.8);
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
      (domain, descriptor) => explainLimit(view, domain, descriptor),
      request,
    );
    const { limits, unlimited, descriptors } = explained;
    const n = request.descriptors.length;
    const hits = request.descriptors.map((d) =>
      hitsAddendFor(d, request.hitsAddend),
    );
    // What a charge would do, decided by the decision pipeline itself without changing
    // anything: the counters it reads, the all-or-nothing check (a refused request charges no
    // counter) and STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
    // (docs/reference-parity.md#stop-increment; all-or-nothing charging ignores it).
    const preview =
      cache.previewCharge === undefined || limits.every((l) => l === undefined)
        ? undefined
        : await cache.previewCharge(
            request.domain,
            request.descriptors,
            limits,
            hits,
          );
    const nowSeconds = preview?.plan.nowSeconds ?? clock.nowSeconds();
    const readings = new Array<CounterReading | undefined>(n).fill(undefined);
    const increments = hits.slice();
    for (const planned of preview?.plan.counted ?? []) {
      readings[planned.index] = counterReading(planned, nowSeconds);
      increments[planned.index] = planned.increment;
    }
    const allOrNothing = preview?.plan.allOrNothing ?? false;
    const refused = preview?.refused ?? false;
    const stopNote =
      preview?.stopped === "local-cache"
        ? "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: a key of this request is over limit in the local cache, so no counter of the request is incremented"
        : preview?.stopped === "over-limit"
          ? "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: a descriptor of this request goes over its limit, so only the counters that go over are incremented"
          : undefined;

    const predicted: RateLimitResponse_DescriptorStatus[] = [];
    // Descriptors that do not fit (all-or-nothing charging refused the request because of them).
    const unfit: number[] = [];
    // Hits earlier descriptors of this request add to a shared cache key.
    const earlier = new Map<string, number>();
    for (let i = 0; i < n; i++) {
      const d = descriptors[i]!;
      const limit = limits[i];
      if (hits[i]! < 0) {
        // A refund (is_negative_hits): no counter check, never over limit.
        const back = -hits[i]!;
        d.hitsAddend = BigInt(back);
        d.notes.push(
          limit === undefined
            ? `is_negative_hits: a refund of ${back}, but no counter applies`
            : `is_negative_hits: a refund: the counter goes down by ${back} (never below 0, never created); always OK, counted in no statistic`,
        );
        predicted.push(
          create(RateLimitResponse_DescriptorStatusSchema, {
            code: RlsCode.OK,
            limitRemaining: unlimited[i] === true ? unlimitedRemaining : 0,
          }),
        );
        continue;
      }
      d.hitsAddend = BigInt(hits[i]!);
      const reading = readings[i];
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
      let before = reading?.value ?? 0;
      // A refused all-or-nothing request is answered as if each descriptor were charged after
      // the earlier ones (limiter/all-or-nothing.ts), on every backend.
      if (reading !== undefined && (sameKeyAccumulates || refused)) {
        const added = earlier.get(reading.key);
        if (added !== undefined) {
          before += added;
          if (added > 0)
            d.notes.push(
              `an earlier descriptor of this request adds ${added} to the same counter first`,
            );
        }
        const adds =
          refused && !reading.localCacheHit ? hits[i]! : increments[i]!;
        earlier.set(reading.key, (added ?? 0) + adds);
      }
      const status = decide(
        d,
        limit,
        reading,
        before,
        hits[i]!,
        increments[i]!,
        nowSeconds,
        !refused,
      );
      predicted.push(status);
      if (
        refused &&
        !limit.shadowMode &&
        (reading?.localCacheHit === true ||
          d.verdict === Verdict.OVER_LIMIT ||
          d.verdict === Verdict.OVER_LIMIT_SHADOW)
      )
        unfit.push(i);
      if (stopNote !== undefined) d.notes.push(stopNote);
      if (reading === undefined)
        d.notes.push("this backend cannot read counters: counted as 0");
    }
    if (allOrNothing) {
      const refusedBy = unfit.map((i) => `descriptors[${i}]`).join(", ");
      for (let i = 0; i < n; i++) {
        if (limits[i] === undefined) continue;
        const d = descriptors[i]!;
        if (!refused)
          d.notes.push(
            "charge: all_or_nothing: every descriptor of the request fits its limit, so every counter is charged",
          );
        else if (unfit.includes(i))
          d.notes.push(
            "charge: all_or_nothing: this descriptor does not fit its limit, so the request is refused and no counter of it is charged",
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
      limits,
      unlimited,
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

  /**
   * Decides one counted descriptor without counting, with the backends' own arithmetic
   * ({@link counterDecision}); fills in the counter, verdict and notes.
   *
   * @param value - the current window's counter before this descriptor's hits (earlier
   *   descriptors of the request with the same key included)
   * @param increment - what the request adds to the counter (0 when it is not incremented)
   * @param charged - false when all-or-nothing charging refuses the request
   */
  function decide(
    d: DescriptorExplanation,
    limit: RateLimit,
    reading: CounterReading | undefined,
    value: number,
    hits: number,
    increment: number,
    nowSeconds: number,
    charged: boolean,
  ): RateLimitResponse_DescriptorStatus {
    const rpu = limit.requestsPerUnit;
    const cached = reading?.localCacheHit === true;
    const previous = reading?.previousValue ?? 0;
    const decision = charged
      ? counterDecision(
          limit,
          value + increment,
          previous,
          hits,
          nowSeconds,
          true,
        )
      : counterDecision(limit, value, previous, hits, nowSeconds, false);
    const count = decision.count;
    const nearThreshold = Math.floor(Math.fround(Math.fround(rpu) * ratio));
    const reset = cached
      ? secondsUntilReset(nowSeconds, limit.windowSeconds)
      : decision.resetSeconds;
    if (reading !== undefined) {
      d.counter = create(CounterSchema, {
        key: reading.key,
        value: BigInt(reading.value),
        valueAfter: BigInt(
          cached || !charged ? reading.value : value + increment,
        ),
        windowStart: timestampFromMs(reading.windowStartSeconds * 1000),
        windowEnd: timestampFromMs(reading.windowEndSeconds * 1000),
        localCacheHit: cached,
        ...(reading.previousKey !== undefined
          ? {
              previousKey: reading.previousKey,
              previousValue: BigInt(previous),
              previousWeight: BigInt(decision.previousWeight),
            }
          : {}),
        comparedCount: BigInt(cached ? reading.value : count),
      });
    }
    const isOver = cached || count > rpu;
    if (cached) {
      d.notes.push(
        "the local over-limit cache holds this key: OVER_LIMIT without a backend round trip",
      );
    }
    if (hits === 0)
      d.notes.push("hits addend 0: checks the counter without consuming");
    if (limit.sliding && !cached) {
      const w = limit.windowSeconds;
      const left = secondsUntilReset(nowSeconds, w);
      d.notes.push(
        `sliding window: the previous window's counter (${String(previous)}) weighs ${String(left)}/${String(w)} → ${String(decision.previousWeight)}; weighted count ${String(decision.previousWeight)} + ${String(count - decision.previousWeight)} = ${String(count)} against the limit ${String(rpu)}`,
      );
    }
    let code = isOver ? RlsCode.OVER_LIMIT : RlsCode.OK;
    if (isOver && limit.shadowMode) {
      code = RlsCode.OK;
      d.verdict = Verdict.OVER_LIMIT_SHADOW;
      d.notes.push("shadow_mode: over the limit, answered OK");
    } else if (isOver) {
      d.verdict = Verdict.OVER_LIMIT;
    } else if (count > nearThreshold) {
      d.verdict = Verdict.NEAR_LIMIT;
      d.notes.push(
        `near limit: ${count} > near-limit threshold ${nearThreshold} (NEAR_LIMIT_RATIO ${String(options.nearLimitRatio ?? 0.8)})`,
      );
    } else {
      d.verdict = Verdict.WITHIN_LIMIT;
    }
    return create(RateLimitResponse_DescriptorStatusSchema, {
      code,
      currentLimit: create(RateLimitResponse_RateLimitSchema, {
        name: limit.name,
        requestsPerUnit: rpu,
        unit: limit.unit,
      }),
      limitRemaining: isOver
        ? 0
        : decision.remaining >= 0
          ? decision.remaining
          : rpu - count,
      durationUntilReset: { seconds: BigInt(reset), nanos: 0 },
    });
  }

  return { explain };
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
