import type { RateLimit } from "../../src/config/rate-limit-config.js";
import { unitToSeconds } from "../../src/config/units.js";
import { RateLimitResponse_RateLimit_Unit as Unit } from "../../src/proto.js";
import type { StatsManager } from "../../src/stats/stats-manager.js";

/** Builds a RateLimit for tests without going through YAML. */
export function testRateLimit(
  stats: StatsManager,
  statsKey: string,
  requestsPerUnit: number,
  unit: Unit = Unit.MINUTE,
  extra: Partial<RateLimit> = {},
): RateLimit {
  return {
    fullKey: statsKey,
    stats: stats.rateLimitStats(statsKey),
    requestsPerUnit,
    unit,
    unitSeconds: unitToSeconds(unit),
    unitMultiplier: 1,
    windowSeconds: unitToSeconds(unit),
    sliding: false,
    cacheKeySuffix: "",
    allOrNothing: false,
    unlimited: false,
    shadowMode: false,
    quotaMode: false,
    name: "",
    replaces: [],
    detailedMetric: false,
    metadata: undefined,
    shareThresholdValues: undefined,
    ...extra,
  };
}
