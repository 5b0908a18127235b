import { sanitizeStatName, statNames } from "./names.js";
import type { Counter, Timer } from "./stats-store.js";
import { StatsStore } from "./stats-store.js";

/** The six counters kept per rate limit (per stats key). */
export interface RateLimitStats {
  /** Sanitized stats key, e.g. `domain.key_value`. */
  readonly key: string;
  readonly totalHits: Counter;
  readonly overLimit: Counter;
  readonly nearLimit: Counter;
  readonly overLimitWithLocalCache: Counter;
  readonly withinLimit: Counter;
  readonly shadowMode: Counter;
}

/** Service-level counters. */
export interface ServiceStats {
  readonly configLoadSuccess: Counter;
  readonly configLoadError: Counter;
  readonly globalShadowMode: Counter;
}

/**
 * Creates and caches statistics handles with the reference's names. Config loading asks for
 * handles once per rate limit; requests reuse them.
 */
export interface StatsManager {
  readonly store: StatsStore;
  readonly service: ServiceStats;
  /**
   * Returns the handles for a stats key built from the config (unsanitized, e.g.
   * `domain.key_value`); the same object for the same key. Not bounded: the config bounds it.
   * Keys derived from request values must use {@link StatsManager.requestRateLimitStats}.
   */
  rateLimitStats(statsKey: string): RateLimitStats;
  /**
   * Returns the handles for a stats key derived from request values (`detailed_metric`,
   * `value_to_metric`, a request-supplied limit override), bounded: the first
   * `maxRequestDerivedStatsKeys` distinct keys get their own handles for the life of the
   * process; any further new key shares the domain's overflow handles
   * `<domain>.stats_overflow` ({@link statNames.overflowKey}). A key the config also produces
   * is returned as is and not counted.
   *
   * @param domain - the request's domain (known to the config), used for the overflow key
   */
  requestRateLimitStats(domain: string, statsKey: string): RateLimitStats;
  /**
   * Returns `ratelimit.service.rate_limit.<domain>.domain_not_found`. The domain comes from the
   * request, so distinct domains are bounded by `maxUnknownDomains`; later ones share
   * `ratelimit.service.rate_limit.stats_overflow.domain_not_found`.
   */
  domainNotFound(domain: string): Counter;
  /** Returns `ratelimit.service.call.should_rate_limit.<errType>` (e.g. `service_error`). */
  shouldRateLimitError(errType: string): Counter;
  /** Returns `ratelimit_server.<method>.total_requests`. */
  serverTotalRequests(method: string): Counter;
  /** Returns `ratelimit_server.<method>.response_time` (milliseconds). */
  serverResponseTime(method: string): Timer;
  /** Number of request-derived stats keys with their own handles (≤ the cap). */
  readonly requestDerivedStatsKeys: number;
}

/** Options of {@link createStatsManager}. */
export interface StatsManagerOptions {
  /**
   * Most distinct stats keys derived from request values that get their own statistics; each
   * costs six counters (six series in every sink). Further keys share one overflow key per
   * domain. Must be ≥ 0.
   *
   * @defaultValue 1000
   */
  readonly maxRequestDerivedStatsKeys?: number;
  /**
   * Most distinct unknown request domains counted under their own `domain_not_found` counter.
   * Must be ≥ 0.
   *
   * @defaultValue 100
   */
  readonly maxUnknownDomains?: number;
}

/** Defaults of {@link StatsManagerOptions}. */
export const statsManagerDefaults: Required<StatsManagerOptions> = {
  maxRequestDerivedStatsKeys: 1000, // stats keys
  maxUnknownDomains: 100, // domains
};

/**
 * Builds a {@link StatsManager} over a store (a new one by default).
 *
 * @throws RangeError when a cap in `options` is negative or not an integer
 */
export function createStatsManager(
  store: StatsStore = new StatsStore(),
  options: StatsManagerOptions = {},
): StatsManager {
  const maxDerived =
    options.maxRequestDerivedStatsKeys ??
    statsManagerDefaults.maxRequestDerivedStatsKeys;
  const maxDomains =
    options.maxUnknownDomains ?? statsManagerDefaults.maxUnknownDomains;
  for (const [name, value] of [
    ["maxRequestDerivedStatsKeys", maxDerived],
    ["maxUnknownDomains", maxDomains],
  ] as const) {
    if (!Number.isInteger(value) || value < 0)
      throw new RangeError(`invalid ${name} ${value}: expected an integer ≥ 0`);
  }

  const byKey = new Map<string, RateLimitStats>();
  const derivedKeys = new Set<string>();
  const domainCounters = new Map<string, Counter>();
  const errorCounters = new Map<string, Counter>();
  let overflowDomainCounter: Counter | undefined;
  const service: ServiceStats = {
    configLoadSuccess: store.counter(statNames.configLoadSuccess),
    configLoadError: store.counter(statNames.configLoadError),
    globalShadowMode: store.counter(statNames.globalShadowMode),
  };

  function rateLimitStats(statsKey: string): RateLimitStats {
    let stats = byKey.get(statsKey);
    if (stats === undefined) {
      const key = sanitizeStatName(statsKey);
      const prefix = `${statNames.rateLimitScope}.${key}.`;
      stats = {
        key,
        totalHits: store.counter(prefix + statNames.totalHits),
        overLimit: store.counter(prefix + statNames.overLimit),
        nearLimit: store.counter(prefix + statNames.nearLimit),
        overLimitWithLocalCache: store.counter(
          prefix + statNames.overLimitWithLocalCache,
        ),
        withinLimit: store.counter(prefix + statNames.withinLimit),
        shadowMode: store.counter(prefix + statNames.shadowMode),
      };
      byKey.set(statsKey, stats);
    }
    return stats;
  }

  return {
    store,
    service,
    rateLimitStats,
    requestRateLimitStats(domain, statsKey) {
      const known = byKey.get(statsKey);
      if (known !== undefined) return known;
      if (derivedKeys.size < maxDerived) {
        derivedKeys.add(statsKey);
        return rateLimitStats(statsKey);
      }
      return rateLimitStats(`${domain}.${statNames.overflowKey}`);
    },
    get requestDerivedStatsKeys() {
      return derivedKeys.size;
    },
    domainNotFound(domain) {
      let counter = domainCounters.get(domain);
      if (counter !== undefined) return counter;
      if (domainCounters.size >= maxDomains) {
        overflowDomainCounter ??= store.counter(
          `${statNames.rateLimitScope}.${statNames.overflowDomain}.${statNames.domainNotFound}`,
        );
        return overflowDomainCounter;
      }
      counter = store.counter(
        `${statNames.rateLimitScope}.${sanitizeStatName(domain)}.${statNames.domainNotFound}`,
      );
      domainCounters.set(domain, counter);
      return counter;
    },
    shouldRateLimitError(errType) {
      let counter = errorCounters.get(errType);
      if (counter === undefined) {
        counter = store.counter(
          `${statNames.shouldRateLimitErrorScope}.${errType}`,
        );
        errorCounters.set(errType, counter);
      }
      return counter;
    },
    serverTotalRequests(method) {
      return store.counter(
        `${statNames.serverScope}.${method}.${statNames.totalRequests}`,
      );
    },
    serverResponseTime(method) {
      return store.timer(
        `${statNames.serverScope}.${method}.${statNames.responseTime}`,
      );
    },
  };
}
