import type { RateLimitDescriptor } from "../proto.js";

/**
 * Returns the hits to add for one descriptor (docs/reference-parity.md#hits-addend): the
 * descriptor's own `hits_addend` when present (0 allowed: check without consuming), else the
 * request's `hits_addend`, where 0 means 1. Values beyond 2^53 − 1 are clamped (the service refuses
 * them before this runs, see `maxHitsAddend`). With `is_negative_hits` (Envoy ≥ 1.38) the same
 * number, negated: a refund (docs/configuration.md#refunds-and-in-flight-limits).
 */
export function hitsAddendFor(
  descriptor: RateLimitDescriptor,
  requestHitsAddend: number,
): number {
  const own = descriptor.hitsAddend;
  const hits =
    own !== undefined
      ? own > BigInt(Number.MAX_SAFE_INTEGER)
        ? Number.MAX_SAFE_INTEGER
        : Number(own)
      : requestHitsAddend > 1
        ? requestHitsAddend
        : 1;
  // `0 - 0` is 0, never -0: a refund of nothing is a check.
  return descriptor.isNegativeHits ? 0 - hits : hits;
}
