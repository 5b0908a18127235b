/**
 * The fixed quantities of `algorithm: token_bucket` (GCRA), derived once per rate limit at
 * config load: emission interval, burst, tolerance and capacity, all in integer µs, and the
 * bucket's cache-key tail. The decision arithmetic that uses them is `limiter/gcra.ts`
 * (which re-exports these), whose header gives the formulas and the admission bound.
 */

const microsPerSecond = 1_000_000;

/**
 * Largest capacity `burst × T` a token bucket may have, in µs: 2⁵¹ µs, about 71 years. Keeps
 * every value the decision computes an exact integer in an IEEE double (see the file header).
 */
export const maxGcraCapacityUs = 2 ** 51;

/** Options of {@link resolveGcraParams}: the rate limit's YAML fields. */
export interface GcraOptions {
  /** `requests_per_unit`: hits per window at the sustained rate; an integer ≥ 1. */
  readonly requestsPerUnit: number;
  /** The window, `unit` seconds × `unit_multiplier`; an integer ≥ 1. */
  readonly windowSeconds: number;
  /**
   * `burst`: hits a full bucket admits at one instant; an integer ≥ 1.
   * @defaultValue `requestsPerUnit` (one window's worth)
   */
  readonly burst?: number;
}

/** The fixed quantities of one token bucket, derived once per rate limit (frozen). */
export interface GcraParams {
  /** Emission interval T, µs: `ceil(windowSeconds × 10⁶ / requestsPerUnit)`, ≥ 1. */
  readonly emissionIntervalUs: number;
  /** Hits a full bucket admits at one instant, ≥ 1. */
  readonly burst: number;
  /** Tolerance τ = `T × (burst − 1)`, µs. */
  readonly toleranceUs: number;
  /** Capacity C = `τ + T = burst × T`, µs; at most {@link maxGcraCapacityUs}. */
  readonly capacityUs: number;
}

/**
 * Checks a token bucket's options and derives its {@link GcraParams} (see the file header for
 * the formulas).
 *
 * @throws RangeError when `requestsPerUnit`, `windowSeconds` or `burst` is not an integer ≥ 1,
 *   when the rate is above 1,000,000 hits per second (T would round to more than the
 *   configured interval), or when `burst × T` exceeds {@link maxGcraCapacityUs}
 */
export function resolveGcraParams(options: GcraOptions): GcraParams {
  const { requestsPerUnit, windowSeconds } = options;
  const burst = options.burst ?? requestsPerUnit;
  checkCount("requestsPerUnit", requestsPerUnit);
  checkCount("windowSeconds", windowSeconds);
  checkCount("burst", burst);
  const windowUs = windowSeconds * microsPerSecond;
  if (requestsPerUnit > windowUs) {
    throw new RangeError(
      `token bucket rate ${String(requestsPerUnit)} per ${String(windowSeconds)} s is above ` +
        `the highest supported rate (1000000 per second)`,
    );
  }
  // ceil(windowUs / requestsPerUnit), corrected in case the quotient rounded onto an integer.
  let emissionIntervalUs = Math.ceil(windowUs / requestsPerUnit);
  while ((emissionIntervalUs - 1) * requestsPerUnit >= windowUs)
    emissionIntervalUs--;
  while (emissionIntervalUs * requestsPerUnit < windowUs) emissionIntervalUs++;
  const capacityUs = burst * emissionIntervalUs;
  if (capacityUs > maxGcraCapacityUs) {
    throw new RangeError(
      `token bucket burst ${String(burst)} × emission interval ${String(emissionIntervalUs)} µs ` +
        `is longer than ${String(maxGcraCapacityUs)} µs (about 71 years)`,
    );
  }
  return Object.freeze({
    emissionIntervalUs,
    burst,
    toleranceUs: capacityUs - emissionIntervalUs,
    capacityUs,
  });
}

function checkCount(name: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new RangeError(
      `token bucket ${name} must be an integer >= 1, got ${String(value)}`,
    );
  }
}

/**
 * Returns the cache-key tail of a token bucket, glued after the key's stem
 * (`<prefix><domain>_<key>_<value>_…_`) where other algorithms put the window start:
 * `tb<windowSeconds>_<requestsPerUnit>_<burst>`, e.g. `api_user_alice_tb60_100_150`. A token
 * bucket has no windows, so one key serves it for good; naming the rate and burst starts a
 * fresh bucket when the config changes them (as `_w`/`_s` name the window of other keys), and
 * the letters after the stem keep it apart from fixed and sliding keys, which continue the
 * stem with a window start.
 */
export function gcraCacheKeyTail(
  windowSeconds: number,
  requestsPerUnit: number,
  burst: number,
): string {
  return `tb${String(windowSeconds)}_${String(requestsPerUnit)}_${String(burst)}`;
}
