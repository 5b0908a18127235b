import { compileAlgorithm } from "../../src/config/algorithm.js";
import type { RateLimit } from "../../src/config/rate-limit-config.js";
import { unitToSeconds, windowShape } from "../../src/config/units.js";
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
  const windowSeconds = extra.windowSeconds ?? unitToSeconds(unit);
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
    tokenBucket: undefined,
    calendar: undefined,
    extraLimits: undefined,
    statsKeySuffix: "",
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
    // The algorithm follows the flags a test set, unless it set the algorithm itself.
    algorithm:
      extra.algorithm ??
      compileAlgorithm(
        windowSeconds,
        extra.sliding ?? false,
        extra.tokenBucket,
        extra.calendar,
      ),
  };
}

/** The extension fields of a test limit (see {@link windowedRateLimit}). */
export interface WindowOptions {
  /** `unit_multiplier`. @defaultValue 1 */
  readonly unitMultiplier?: number;
  /** `algorithm: sliding_window`. @defaultValue false */
  readonly sliding?: boolean;
  /** The domain charges all-or-nothing. @defaultValue false */
  readonly allOrNothing?: boolean;
  /** `shadow_mode`. @defaultValue false */
  readonly shadowMode?: boolean;
}

/** Builds a RateLimit with the window extensions, as the config loader decides them. */
export function windowedRateLimit(
  stats: StatsManager,
  statsKey: string,
  requestsPerUnit: number,
  unit: Unit,
  options: WindowOptions = {},
): RateLimit {
  const unitMultiplier = options.unitMultiplier ?? 1;
  const sliding = options.sliding ?? false;
  const shape = windowShape(unit, unitMultiplier, sliding);
  return testRateLimit(stats, statsKey, requestsPerUnit, unit, {
    unitMultiplier,
    sliding,
    windowSeconds: shape.windowSeconds,
    cacheKeySuffix: shape.cacheKeySuffix,
    allOrNothing: options.allOrNothing ?? false,
    shadowMode: options.shadowMode ?? false,
  });
}
