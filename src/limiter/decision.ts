/**
 * One request's answer as one value: the {@link Decision} ShouldRateLimit answers from and
 * publishes once, after the answer is built, to whatever listens (top offenders, the config
 * canary; `decision-channel.ts`). Built by {@link decideRequest} from the request and the
 * statuses the counting step returned; read-only throughout.
 */
import type { RateLimitConfig } from "../config/rate-limit-config.js";
import {
  RateLimitResponse_Code as Code,
  type RateLimitResponse_DescriptorStatus,
} from "../proto.js";
import { answerUnlimited, decidingDescriptor } from "./decision-rules.js";
import type { LimitRequest } from "./limit-request.js";
import type { RequestPlan } from "./request-plan.js";

/**
 * When the store was called and when it answered (or failed), on the `performance.now()`
 * clock in milliseconds: read only when a subscriber of the decision channel asked for them
 * (`DecisionSubscription.times`; tracing's backend span).
 */
export interface DecisionTimes {
  readonly backendStartMs: number;
  readonly backendEndMs: number;
}

/** One request's answer (see the file comment). */
export interface Decision {
  /** The request as the decision rules resolved it (domain, descriptors, limits, hits). */
  readonly request: LimitRequest;
  /** The config the request was decided with. */
  readonly config: RateLimitConfig;
  /**
   * What the store counted: the plan with the counters it read (`LimitRequest.counted`), or undefined when the store
   * did not answer this request (the backend guard's failure mode or local mode answered).
   */
  readonly counted: RequestPlan | undefined;
  /** One per request descriptor, in request order (before global shadow mode). */
  readonly statuses: readonly RateLimitResponse_DescriptorStatus[];
  /** The overall code before global shadow mode (`SHADOW_MODE`). */
  readonly overallCode: Code;
  /** The descriptor that made the request over limit (`decidingDescriptor`); -1 when OK. */
  readonly deciding: number;
  /** Per descriptor, whether it counts as a quota descriptor (`quota_mode` or `QUOTA_MODE`). */
  readonly quota: readonly boolean[];
  /** The store call's times, when a subscriber asked for them ({@link DecisionTimes}). */
  readonly times?: DecisionTimes | undefined;
}

/**
 * Builds the {@link Decision} of a counted request: unlimited descriptors answer with
 * `limit_remaining` 4294967295 (`answerUnlimited`, which writes into `statuses`), then the
 * deciding descriptor and overall code with quota mode (docs/reference-parity.md#overall-code).
 *
 * @param statuses - what the counting step returned, one per descriptor (taken over, not copied)
 * @param globalQuotaMode - `QUOTA_MODE`: every descriptor is a quota descriptor
 * @param times - the store call's times, when a subscriber asked for them
 */
export function decideRequest(
  request: LimitRequest,
  config: RateLimitConfig,
  statuses: RateLimitResponse_DescriptorStatus[],
  globalQuotaMode: boolean,
  times?: DecisionTimes,
): Decision {
  const unlimited = request.unlimited;
  if (unlimited !== undefined) answerUnlimited(statuses, unlimited);
  const quota = new Array<boolean>(statuses.length);
  const deciding = decidingDescriptor(
    statuses,
    request,
    globalQuotaMode,
    quota,
  );
  return {
    request,
    config,
    counted: request.counted,
    statuses,
    overallCode: deciding === undefined ? Code.OK : Code.OVER_LIMIT,
    deciding: deciding ?? -1,
    quota,
    times,
  };
}
