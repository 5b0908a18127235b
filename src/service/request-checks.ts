import { OverrideRateLimitUnit, type RateLimitRequest } from "../proto.js";
import { RequestError } from "./errors.js";

/**
 * Checks a request as ShouldRateLimit does, same order and texts (empty domain, no
 * descriptors, an entry list empty, an empty key, an override unit outside SECOND…YEAR), for
 * the Explain API, which must refuse what ShouldRateLimit refuses.
 *
 * @param afterHead - runs after the domain and descriptor-list checks, where ShouldRateLimit
 *   checks that a config is loaded (it may throw `NotReadyError`)
 * @throws {@link RequestError} naming the field
 */
export function checkRequest(
  request: RateLimitRequest,
  afterHead: () => void,
): void {
  if (request.domain === "")
    throw new RequestError("rate limit domain must not be empty");
  const descriptors = request.descriptors;
  if (descriptors.length === 0) {
    throw new RequestError("rate limit descriptor list must not be empty");
  }
  afterHead();
  for (let i = 0; i < descriptors.length; i++) {
    const descriptor = descriptors[i]!;
    const entries = descriptor.entries;
    if (entries.length === 0) {
      throw new RequestError(`descriptors[${i}].entries must not be empty`);
    }
    for (let j = 0; j < entries.length; j++) {
      if (entries[j]!.key === "") {
        throw new RequestError(
          `descriptors[${i}].entries[${j}].key must not be empty`,
        );
      }
    }
    const override = descriptor.limit;
    if (
      override !== undefined &&
      (override.unit < OverrideRateLimitUnit.SECOND ||
        override.unit > OverrideRateLimitUnit.YEAR)
    ) {
      throw new RequestError(
        `descriptors[${i}].limit.unit must be one of SECOND, MINUTE, HOUR, DAY, MONTH, YEAR (got ${override.unit === OverrideRateLimitUnit.UNKNOWN ? "UNKNOWN" : String(override.unit)})`,
      );
    }
  }
}
