import type { RateLimitDescriptor } from "../proto.js";

/**
 * Returns the hits to add for one descriptor (docs/reference-parity.md#hits-addend): the
 * descriptor's own `hits_addend` when present (0 allowed: check without consuming), else the
 * request's `hits_addend`, where 0 means 1. Values beyond 2^53 − 1 are clamped (the service refuses
 * them before this runs, see `maxHitsAddend`).
 */
export function hitsAddendFor(
  descriptor: RateLimitDescriptor,
  requestHitsAddend: number,
): number {
  const own = descriptor.hitsAddend;
  if (own !== undefined) {
    return own > BigInt(Number.MAX_SAFE_INTEGER)
      ? Number.MAX_SAFE_INTEGER
      : Number(own);
  }
  return requestHitsAddend > 1 ? requestHitsAddend : 1;
}
