import { create } from "@bufbuild/protobuf";
import { isFixedEpochWindow } from "../config/algorithm.js";
import type { Decision } from "../limiter/decision.js";
import {
  HeaderValueSchema,
  RateLimitResponse_Code as Code,
  type HeaderValue,
} from "../proto.js";

/** Names of the custom rate-limit response headers (`LIMIT_*_HEADER`). */
export interface ResponseHeaderNames {
  /** @defaultValue "RateLimit-Limit" */
  readonly limit: string;
  /** @defaultValue "RateLimit-Remaining" */
  readonly remaining: string;
  /** @defaultValue "RateLimit-Reset" */
  readonly reset: string;
}

const maxUint32 = 4294967295;

/**
 * Returns the three rate-limit headers for a response, or `undefined` when no descriptor had
 * a limit. The chosen descriptor is the one with the fewest remaining hits (first wins ties),
 * except that every non-quota OVER_LIMIT descriptor takes over unconditionally, so the last
 * such one wins (upstream `ratelimit.go` `rateLimitLimitHeader` selection,
 * docs/reference-parity.md#rate-limit-headers).
 *
 * @param decision - the request's statuses, applied limits and quota flags
 * @param nowSeconds - seconds since the Unix epoch, for the reset header
 */
export function rateLimitHeaders(
  names: ResponseHeaderNames,
  decision: Decision,
  nowSeconds: number,
): HeaderValue[] | undefined {
  const { statuses, quota: quotaDescriptor } = decision;
  const limits = decision.request.limits;
  let chosen = -1;
  let minRemaining = maxUint32;
  for (let i = 0; i < statuses.length; i++) {
    const s = statuses[i]!;
    if (s.currentLimit === undefined) continue;
    if (s.code === Code.OVER_LIMIT && quotaDescriptor[i] !== true) {
      chosen = i;
      minRemaining = 0;
      continue;
    }
    if (s.limitRemaining < minRemaining) {
      chosen = i;
      minRemaining = s.limitRemaining;
    }
  }
  if (chosen < 0) return undefined;
  const status = statuses[chosen]!;
  const limit = limits[chosen];
  // The real window (`unit_multiplier` included); a sliding window resets when its weighted
  // count falls by one, a token bucket when it is full, a calendar window at the local period's
  // end, and a rule with several limits as its tightest one: their status already carries it.
  const windowSeconds = limit?.windowSeconds ?? 1;
  const resetSeconds =
    limit !== undefined &&
    (!isFixedEpochWindow(limit.algorithm) || limit.extraLimits !== undefined)
      ? Number(status.durationUntilReset?.seconds ?? 1n)
      : windowSeconds - (nowSeconds % windowSeconds);
  return [
    create(HeaderValueSchema, {
      key: names.limit,
      value: String(status.currentLimit?.requestsPerUnit ?? 0),
    }),
    create(HeaderValueSchema, {
      key: names.remaining,
      value: String(status.limitRemaining),
    }),
    create(HeaderValueSchema, {
      key: names.reset,
      value: String(resetSeconds),
    }),
  ];
}
