// The request-level decision rules, written once for ShouldRateLimit and Explain: which limits
// a request counts (`unlimited`, `replaces`), the 4294967295 remaining of unlimited rules, and
// the deciding descriptor with quota mode (upstream `ratelimit.go` `shouldRateLimitWorker`;
// docs/reference-parity.md#request-order, #unlimited-replaced and #overall-code). They run on the
// hot path: they fill arrays the caller allocates and create nothing per request beyond what the
// decision needs (the `replaces` set when a matched rule has `replaces`, the unlimited flags when
// one is unlimited).

import type { RateLimit } from "../config/rate-limit-config.js";
import {
  RateLimitResponse_Code as Code,
  type RateLimitResponse_DescriptorStatus,
} from "../proto.js";
import type { LimitRequest } from "./limit-request.js";

/** `limit_remaining` of an unlimited descriptor: the largest uint32. */
export const unlimitedRemaining = 4294967295;

/**
 * Applies the `unlimited` and `replaces` rules, in place, to the limits found for one request
 * (docs/reference-parity.md#unlimited-replaced): an unlimited rule is answered without a counter; a
 * named limit is dropped when the rule of any descriptor of the request (unlimited ones included)
 * lists its name in `replaces`. A `rate_limits:` list (an extension) is one group: when any of
 * its limits is named in another rule's `replaces`, all of them are dropped. Counts nothing.
 *
 * @param limits - parallel to the request's descriptors: on entry the limit each matched, on
 *   return the limit to count (`undefined` where none matched, unlimited, or replaced)
 * @returns parallel to `limits`, whether the rule is unlimited; `undefined` when none is
 */
export function applyLimitRules(
  limits: (RateLimit | undefined)[],
): boolean[] | undefined {
  const n = limits.length;
  let unlimited: boolean[] | undefined;
  let replaced: Set<string> | undefined;
  for (let i = 0; i < n; i++) {
    const limit = limits[i];
    if (limit === undefined) continue;
    if (limit.replaces.length > 0) {
      replaced ??= new Set();
      for (const name of limit.replaces) replaced.add(name);
    }
    const extra = limit.extraLimits;
    if (extra !== undefined) {
      // The config refuses `replaces` in a `rate_limits:` list; read anyway, as for one limit.
      for (const other of extra) {
        if (other.replaces.length === 0) continue;
        replaced ??= new Set();
        for (const name of other.replaces) replaced.add(name);
      }
    }
    if (limit.unlimited) {
      (unlimited ??= new Array<boolean>(n).fill(false))[i] = true;
      limits[i] = undefined;
    }
  }
  if (replaced !== undefined) {
    for (let i = 0; i < n; i++) {
      const limit = limits[i];
      if (limit !== undefined && isReplaced(limit, replaced))
        limits[i] = undefined;
    }
  }
  return unlimited;
}

/**
 * Whether a descriptor's limit group (its limit and, for a `rate_limits:` list, the list's
 * other limits) has a named limit in `replaced`: then the whole group is dropped.
 */
function isReplaced(limit: RateLimit, replaced: ReadonlySet<string>): boolean {
  if (limit.name !== "" && replaced.has(limit.name)) return true;
  const extra = limit.extraLimits;
  if (extra === undefined) return false;
  for (const other of extra) {
    if (other.name !== "" && replaced.has(other.name)) return true;
  }
  return false;
}

/**
 * Answers every unlimited descriptor with `limit_remaining` 4294967295 (its status comes back
 * from the backend as an uncounted OK).
 *
 * @param unlimited - from {@link applyLimitRules} (`LimitRequest.unlimited`), parallel to `statuses`
 */
export function answerUnlimited(
  statuses: readonly RateLimitResponse_DescriptorStatus[],
  unlimited: readonly boolean[],
): void {
  const n = statuses.length;
  for (let i = 0; i < n; i++) {
    if (unlimited[i] === true) statuses[i]!.limitRemaining = unlimitedRemaining;
  }
}

/**
 * Returns the descriptor that makes the request over limit (docs/reference-parity.md#overall-code):
 * the first non-quota descriptor over its limit; else, when every quota descriptor is over its
 * limit (quota mode: per rule `quota_mode`, or `QUOTA_MODE` for all), the first of them; else
 * `undefined` (the overall code is OK). Unlimited descriptors take no part. Also fills `quota`.
 *
 * @param statuses - one per descriptor, after shadow mode (a shadowed descriptor is OK)
 * @param request - the request's counted limits and unlimited flags ({@link applyLimitRules})
 * @param quota - filled, parallel to `statuses`: whether the descriptor is a quota descriptor
 * @returns the index of the deciding descriptor, or `undefined`
 */
export function decidingDescriptor(
  statuses: readonly RateLimitResponse_DescriptorStatus[],
  request: Pick<LimitRequest, "limits" | "unlimited">,
  globalQuotaMode: boolean,
  quota: boolean[],
): number | undefined {
  const n = statuses.length;
  const { limits, unlimited } = request;
  let deciding: number | undefined;
  let firstQuotaOver: number | undefined;
  let quotaCount = 0;
  let quotaOver = 0;
  for (let i = 0; i < n; i++) {
    if (unlimited?.[i] === true) {
      quota[i] = false;
      continue;
    }
    const isQuota = limits[i]?.quotaMode === true || globalQuotaMode;
    quota[i] = isQuota;
    const over = statuses[i]!.code === Code.OVER_LIMIT;
    if (isQuota) {
      quotaCount++;
      if (over) {
        quotaOver++;
        firstQuotaOver ??= i;
      }
    } else if (over) {
      deciding ??= i;
    }
  }
  if (deciding === undefined && quotaCount > 0 && quotaOver === quotaCount)
    return firstQuotaOver;
  return deciding;
}
