/**
 * Hostile-load bounds on the shape of one `RateLimitRequest` (docs/limits.md). The Go
 * reference has none of them; the defaults sit far above what Envoy's rate-limit actions
 * produce, so reference-compatible traffic is never refused, while one request can no longer
 * make the service do unbounded work (a million descriptors, a 4 MiB cache key).
 *
 * The size of the whole request is bounded earlier, by the transports (gRPC `readMaxBytes`,
 * `/json` `maxBodyBytes`).
 */
export interface RequestBounds {
  /** Most descriptors in one request (`REQUEST_MAX_DESCRIPTORS`), ≥ 1. */
  readonly maxDescriptors: number;
  /** Most entries in one descriptor (`REQUEST_MAX_ENTRIES`), ≥ 1. */
  readonly maxEntries: number;
  /**
   * Longest entry key or entry value, in UTF-8 bytes (`REQUEST_MAX_ENTRY_BYTES`), ≥ 1. The
   * domain is bounded by the same number.
   */
  readonly maxEntryBytes: number;
}

/**
 * The defaults of {@link RequestBounds}:
 * - 1000 descriptors: Envoy sends one descriptor per matching `rate_limits` action list, a
 *   handful per route in practice;
 * - 100 entries: one entry per action; real descriptors have 1 to 5;
 * - 65536 bytes per key/value: the largest request header Envoy accepts by default is 60 KiB
 *   (`max_request_headers_kb`), and header values are the longest thing an action copies.
 */
export const defaultRequestBounds: RequestBounds = Object.freeze({
  maxDescriptors: 1000,
  maxEntries: 100,
  maxEntryBytes: 65536,
});

/**
 * Largest descriptor `hits_addend` accepted: 2^53 − 1, the largest integer a counter (a JS
 * number) holds exactly. Larger values are refused, not rounded.
 */
export const maxHitsAddend = BigInt(Number.MAX_SAFE_INTEGER);

/**
 * Whether `text` is longer than `maxBytes` once UTF-8 encoded, without encoding it. O(1) unless
 * the string is within a factor of 3 of the bound: a UTF-16 code unit takes 1 to 3 UTF-8 bytes
 * (a surrogate pair 4 for 2 units, a lone surrogate 3 as U+FFFD), so only strings of between
 * `maxBytes / 3` and `maxBytes` units are measured (`Buffer.byteLength`, no allocation).
 */
export function exceedsUtf8Bytes(text: string, maxBytes: number): boolean {
  const units = text.length;
  if (units * 3 <= maxBytes) return false;
  if (units > maxBytes) return true;
  return Buffer.byteLength(text, "utf8") > maxBytes;
}

/**
 * Checks `bounds` and returns them complete.
 *
 * @throws RangeError when a bound is not an integer ≥ 1 (names the option)
 */
export function resolveRequestBounds(
  bounds: Partial<RequestBounds> | undefined,
): RequestBounds {
  const resolved = { ...defaultRequestBounds, ...bounds };
  for (const [name, value] of Object.entries(resolved)) {
    if (!Number.isSafeInteger(value) || value < 1)
      throw new RangeError(
        `request bound ${name} must be an integer ≥ 1 (got ${String(value)})`,
      );
  }
  return resolved;
}
