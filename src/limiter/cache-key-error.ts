import type { RateLimit } from "../config/rate-limit-config.js";
import type { RateLimitDescriptor } from "../proto.js";
import type { CacheKeyRules } from "./counter-backend.js";

/**
 * A descriptor produces a cache key the backend cannot store: longer than the backend allows,
 * or containing bytes it forbids (the memcached protocol allows at most 250 bytes and no
 * whitespace or control characters; spec "Errors" item 3).
 *
 * It is a problem of the request, not of the backend: a {@link RateLimitCache} rejects the
 * whole call with it before any counter is read or written, so other keys and other callers
 * are unaffected, and the service answers INVALID_ARGUMENT (HTTP 400 on `/json`), counted as
 * `service_error`. The reference instead fails the multi-get of the whole request and lets it
 * through unlimited (docs/reference-parity.md#mc-keys).
 */
export class CacheKeyError extends Error {
  override readonly name = "CacheKeyError";
  readonly code = "RLS_CACHE_KEY";
  /** Index of the offending descriptor in the request. */
  readonly descriptorIndex: number;

  /**
   * @param descriptorIndex - index of the offending descriptor in the request
   * @param message - names the descriptor and entry, e.g.
   *   `descriptors[1].entries[0].value "a b" contains whitespace or control characters, …`
   */
  constructor(descriptorIndex: number, message: string) {
    super(message);
    this.descriptorIndex = descriptorIndex;
  }
}

/**
 * Builds the {@link CacheKeyError} naming the part of a descriptor that makes its cache key
 * one the backend cannot store (spec "Errors" item 3): the entry key or value (or domain, or
 * prefix) holding a forbidden character, or, for a key over `rules.maxKeyBytes`, the longest
 * part.
 *
 * @param index - the descriptor's position in the request
 */
export function cacheKeyError(
  rules: CacheKeyRules,
  problem: "too-long" | "illegal-character",
  index: number,
  domain: string,
  descriptor: RateLimitDescriptor,
  limit: RateLimit,
  cacheKey: string,
): CacheKeyError {
  const entries = descriptor.entries;
  const shared = limit.shareThresholdValues;
  const where = `descriptors[${index}]`;
  if (problem === "illegal-character") {
    const bad = (text: string): boolean => rules.hasIllegalCharacter(text);
    for (let j = 0; j < entries.length; j++) {
      const entry = entries[j]!;
      const value = shared?.[j] ?? entry.value;
      const field = bad(entry.key) ? "key" : bad(value) ? "value" : undefined;
      if (field === undefined) continue;
      const text = field === "key" ? entry.key : value;
      return new CacheKeyError(
        index,
        `${where}.entries[${j}].${field} ${quote(text)} contains whitespace or control characters, which ${rules.backendLabel} cannot store in a cache key`,
      );
    }
    const culprit = bad(domain)
      ? `domain ${quote(domain)}`
      : "the cache key prefix";
    return new CacheKeyError(
      index,
      `${where}: ${culprit} contains whitespace or control characters, which ${rules.backendLabel} cannot store in a cache key`,
    );
  }
  let longest = 0;
  let longestName = "";
  for (let j = 0; j < entries.length; j++) {
    const entry = entries[j]!;
    const value = shared?.[j] ?? entry.value;
    for (const [field, text] of [
      ["key", entry.key],
      ["value", value],
    ] as const) {
      const bytes = Buffer.byteLength(text);
      if (bytes > longest) {
        longest = bytes;
        longestName = `entries[${j}].${field}`;
      }
    }
  }
  return new CacheKeyError(
    index,
    `${where}: its cache key is ${Buffer.byteLength(cacheKey)} bytes, over the ${rules.maxKeyBytes} ${rules.backendLabel} allows (longest part: ${where}.${longestName}, ${longest} bytes)`,
  );
}

/** Quotes a part of a descriptor for an error text, cut at 64 characters. */
function quote(text: string): string {
  return JSON.stringify(text.length > 64 ? `${text.slice(0, 64)}…` : text);
}
