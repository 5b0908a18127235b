/**
 * Hot-key leases (`lease: true`, optional `lease_max:` in a `rate_limit`; issue 33 item 2):
 * what config load decides about a limit's lease, frozen on its {@link RateLimit}. The
 * in-process half, taking and spending leases, is `limiter/lease-table.ts`.
 */
import { statNames } from "../stats/names.js";
import type { StatsManager } from "../stats/stats-manager.js";
import type { Counter } from "../stats/stats-store.js";

/**
 * A window limit's lease settings: a replica takes up to {@link Lease.max} hits of the current
 * window with one store increment, then admits from them in process (docs/configuration.md#leases).
 */
export interface Lease {
  /**
   * Most hits one lease takes (`lease_max`), ≥ 1; defaults to 1 % of `requests_per_unit`,
   * rounded down, at least 1. Under-admission per window is at most replicas × workers × max.
   */
  readonly max: number;
  /** `ratelimit.service.rate_limit.<statsKey>.lease_taken`: hits granted by the store to leases. */
  readonly taken: Counter;
  /**
   * `ratelimit.service.rate_limit.<statsKey>.lease_unused`: granted hits a lease still held
   * when its window ended (never admitted: the under-admission).
   */
  readonly unused: Counter;
}

/** The default `lease_max` of a limit: 1 % of `requests_per_unit`, rounded down, at least 1. */
export function defaultLeaseMax(requestsPerUnit: number): number {
  return Math.max(1, Math.floor(requestsPerUnit / 100));
}

/**
 * Builds the frozen {@link Lease} of a limit, with its two statistics created under the
 * rule's stats key (only rules with `lease: true` have them, so other configs report exactly
 * the reference's statistics).
 *
 * @param max - `lease_max`, already checked (an integer ≥ 1)
 * @param statsKey - the limit's stats key, unsanitized (as `StatsManager.rateLimitStats` takes)
 */
export function compileLease(
  max: number,
  statsManager: StatsManager,
  statsKey: string,
): Lease {
  const prefix = `${statNames.rateLimitScope}.${statsManager.rateLimitStats(statsKey).key}.`;
  return Object.freeze({
    max,
    taken: statsManager.store.counter(prefix + statNames.leaseTaken),
    unused: statsManager.store.counter(prefix + statNames.leaseUnused),
  });
}
