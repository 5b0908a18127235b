import { OverrideRateLimitUnit, type RateLimitRequest } from "../proto.js";
import { RequestError } from "./errors.js";
import {
  exceedsUtf8Bytes,
  maxHitsAddend,
  type RequestBounds,
} from "./request-bounds.js";

// The request checks of ShouldRateLimit, shared with the Explain API (which must refuse what
// ShouldRateLimit refuses, with the same texts). Split in two so a caller can check that a
// config is loaded in between, where the reference does (upstream `ratelimit.go`
// `shouldRateLimitWorker`: empty domain, empty descriptor list, then the config snapshot).
// Both run on the hot path: length comparisons only, no allocation on the success path.

/**
 * Checks the domain and the descriptor list: not empty (the reference's texts), within
 * `bounds` (docs/limits.md).
 *
 * @throws {@link RequestError} naming the field
 */
export function checkRequestHead(
  request: RateLimitRequest,
  bounds: RequestBounds,
): void {
  if (request.domain === "")
    throw new RequestError("rate limit domain must not be empty");
  if (exceedsUtf8Bytes(request.domain, bounds.maxEntryBytes))
    throw new RequestError(
      `domain must be at most ${bounds.maxEntryBytes} bytes`,
    );
  const count = request.descriptors.length;
  if (count === 0) {
    throw new RequestError("rate limit descriptor list must not be empty");
  }
  if (count > bounds.maxDescriptors) {
    throw new RequestError(
      `descriptors must have at most ${bounds.maxDescriptors} items (got ${count})`,
    );
  }
}

/**
 * Checks every descriptor: entries present and within `bounds`, no empty key, key and value
 * within `bounds.maxEntryBytes` UTF-8 bytes, `hits_addend` ≤ 2^53 − 1 (refused, not rounded),
 * an override unit in SECOND…YEAR.
 *
 * @throws {@link RequestError} naming the field, e.g. `descriptors[0].entries[1].key must not be empty`
 */
export function checkRequestDescriptors(
  request: RateLimitRequest,
  bounds: RequestBounds,
): void {
  const { maxEntries, maxEntryBytes } = bounds;
  const descriptors = request.descriptors;
  for (let i = 0; i < descriptors.length; i++) {
    const descriptor = descriptors[i]!;
    const entries = descriptor.entries;
    if (entries.length === 0) {
      throw new RequestError(`descriptors[${i}].entries must not be empty`);
    }
    if (entries.length > maxEntries) {
      throw new RequestError(
        `descriptors[${i}].entries must have at most ${maxEntries} items (got ${entries.length})`,
      );
    }
    for (let j = 0; j < entries.length; j++) {
      const entry = entries[j]!;
      if (entry.key === "") {
        throw new RequestError(
          `descriptors[${i}].entries[${j}].key must not be empty`,
        );
      }
      if (exceedsUtf8Bytes(entry.key, maxEntryBytes)) {
        throw new RequestError(
          `descriptors[${i}].entries[${j}].key must be at most ${maxEntryBytes} bytes`,
        );
      }
      if (exceedsUtf8Bytes(entry.value, maxEntryBytes)) {
        throw new RequestError(
          `descriptors[${i}].entries[${j}].value must be at most ${maxEntryBytes} bytes`,
        );
      }
    }
    // A counter is a JS number: refuse what it cannot hold exactly instead of rounding.
    const hitsAddend = descriptor.hitsAddend;
    if (hitsAddend !== undefined && hitsAddend > maxHitsAddend) {
      throw new RequestError(
        `descriptors[${i}].hits_addend must be at most ${maxHitsAddend} (got ${hitsAddend})`,
      );
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
