// Sharing one bucket's global rate L among the streams (Envoys) that report it: max-min fair
// by measured demand (water-filling), pure functions. The service calls them once per bucket
// per report interval; docs/rlqs.md states the guarantees they give.

/**
 * Max-min fair split of `capacity` among `demands` (water-filling): every demand at or under
 * the final water level is met in full; every larger one gets the level. When the demands sum
 * to at most `capacity`, each gets its demand and the rest stays unassigned.
 *
 * Guarantees (property-tested): shares sum to at most `capacity`; share i ≤ demand i; share i ≥
 * min(demand i, capacity / n); no share exceeds a share whose demand is unmet (max-min
 * optimality).
 *
 * @param capacity - the rate to share, ≥ 0 (requests per second)
 * @param demands - per stream, ≥ 0 (requests per second)
 * @returns the shares, parallel to `demands`
 */
export function waterFill(
  capacity: number,
  demands: readonly number[],
): number[] {
  const n = demands.length;
  const shares = new Array<number>(n).fill(0);
  const order = demands
    .map((demand, index) => ({ demand: Math.max(0, demand), index }))
    .sort((a, b) => a.demand - b.demand);
  let remaining = Math.max(0, capacity);
  for (let i = 0; i < n; i++) {
    const { demand, index } = order[i] ?? { demand: 0, index: 0 };
    // The level if every stream from here on took an equal part of what is left.
    const level = remaining / (n - i);
    const share = Math.min(demand, level);
    shares[index] = share;
    remaining -= share;
  }
  return shares;
}

/** One stream's entry in a bucket split. */
export interface StreamDemand {
  /**
   * Smoothed measured demand, requests per second; `undefined` for a stream that subscribed
   * since the last measurement (its first report carries no rate): it asks for a fair share.
   */
  readonly demand: number | undefined;
}

/**
 * Splits a bucket's rate `limit` among streams by demand, max-min fair, and hands out what the
 * demands leave equally, so the shares sum to `limit` (never more):
 *
 * - a newly subscribed stream (demand `undefined`) asks for a fair share, `limit / n`, so it
 *   can serve at once; the others' shares shrink in the same push (no over-admission);
 * - every demand counts as at least `min(1, limit / n)` per second, so an idle Envoy keeps a
 *   trickle of tokens and its denials, once traffic starts, show the service its demand at the
 *   next report instead of it being starved at 0 with nothing to report.
 *
 * @param limit - the bucket's global rate L, requests per second, ≥ 0
 * @returns the shares, requests per second, parallel to `streams`
 */
export function splitQuota(
  limit: number,
  streams: readonly StreamDemand[],
): number[] {
  const n = streams.length;
  if (n === 0 || limit <= 0) return new Array<number>(n).fill(0);
  const fair = limit / n;
  const floor = Math.min(1, fair);
  const demands = streams.map(({ demand }) =>
    demand === undefined ? fair : Math.max(floor, demand),
  );
  const shares = waterFill(limit, demands);
  let assigned = 0;
  for (const share of shares) assigned += share;
  // Spread what the demands leave, equally: headroom for demand growth until the next split.
  const surplus = Math.max(0, limit - assigned) / n;
  return shares.map((share) => share + surplus);
}

/** Weight of the newest measurement in {@link smoothDemand}. */
export const demandSmoothing = 0.5;

/**
 * Exponentially weighted moving average of a stream's demand: `measured` when there is no
 * previous value. With weight 0.5 a step change is followed to 75 % within two reports (10 s at
 * Envoy 1.40's fixed 5 s), while one noisy interval moves the estimate only half-way.
 */
export function smoothDemand(
  previous: number | undefined,
  measured: number,
  weight = demandSmoothing,
): number {
  if (previous === undefined) return measured;
  return previous + weight * (measured - previous);
}
