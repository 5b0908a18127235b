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
   * Returns the handles for a stats key (unsanitized, e.g. `domain.key_value`); the same
   * object for the same key.
   */
  rateLimitStats(statsKey: string): RateLimitStats;
  /** Returns `ratelimit.service.rate_limit.<domain>.domain_not_found`. */
  domainNotFound(domain: string): Counter;
  /** Returns `ratelimit.service.call.should_rate_limit.<errType>` (e.g. `service_error`). */
  shouldRateLimitError(errType: string): Counter;
  /** Returns `ratelimit_server.<method>.total_requests`. */
  serverTotalRequests(method: string): Counter;
  /** Returns `ratelimit_server.<method>.response_time` (milliseconds). */
  serverResponseTime(method: string): Timer;
}

/** Builds a {@link StatsManager} over a store (a new one by default). */
export function createStatsManager(
  store: StatsStore = new StatsStore(),
): StatsManager {
  const rateLimitStatsByKey = new Map<string, RateLimitStats>();
  const service: ServiceStats = {
    configLoadSuccess: store.counter(statNames.configLoadSuccess),
    configLoadError: store.counter(statNames.configLoadError),
    globalShadowMode: store.counter(statNames.globalShadowMode),
  };
  return {
    store,
    service,
    rateLimitStats(statsKey) {
      let stats = rateLimitStatsByKey.get(statsKey);
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
        rateLimitStatsByKey.set(statsKey, stats);
      }
      return stats;
    },
    domainNotFound(domain) {
      return store.counter(
        `${statNames.rateLimitScope}.${sanitizeStatName(domain)}.${statNames.domainNotFound}`,
      );
    },
    shouldRateLimitError(errType) {
      return store.counter(`${statNames.shouldRateLimitErrorScope}.${errType}`);
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
