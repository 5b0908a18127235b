// A LimitRequest from parallel lists, the shape most tests write their cases in. src/ builds
// requests from entries (LimitRequest.of) or resolves them (resolveRequest).
import type { RateLimit } from "../../src/config/rate-limit-config.js";
import { LimitRequest } from "../../src/limiter/limit-request.js";
import type { RateLimitDescriptor } from "../../src/proto.js";

/**
 * The request of `domain` with one entry per descriptor.
 *
 * @param limits - per descriptor, the limit to count (`undefined`: not counted)
 * @param hitsAddends - per descriptor, the hits it adds; absent: 0 each (a read-only request)
 * @param unlimited - per descriptor, whether its rule is `unlimited`
 * @throws Error when a list's length differs from the descriptors'
 */
export function limitRequest(
  domain: string,
  descriptors: readonly RateLimitDescriptor[],
  limits: readonly (RateLimit | undefined)[],
  hitsAddends?: readonly number[],
  unlimited?: readonly boolean[],
): LimitRequest {
  const n = descriptors.length;
  for (const [name, list] of [
    ["limits", limits],
    ["hitsAddends", hitsAddends],
    ["unlimited", unlimited],
  ] as const)
    if (list !== undefined && list.length !== n)
      throw new Error(
        `limitRequest: ${name} has ${String(list.length)} elements for ${String(n)} descriptors`,
      );
  return LimitRequest.of(
    domain,
    descriptors.map((descriptor, i) => ({
      descriptor,
      limit: limits[i],
      hitsAddend: hitsAddends?.[i] ?? 0,
      unlimited: unlimited?.[i] === true,
    })),
  );
}
