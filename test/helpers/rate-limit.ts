import {
  bucketOf,
  calendarOf,
  compileAlgorithm,
  fixedEpochWindow,
  type SlidingWindow,
  type TokenBucket,
  type FixedWindow,
} from "../../src/config/algorithm.js";
import type { CalendarWindow } from "../../src/config/calendar-window.js";
import type { GcraParams } from "../../src/config/token-bucket.js";
import type { RateLimit } from "../../src/config/rate-limit-config.js";
import { unitToSeconds, windowShape } from "../../src/config/units.js";
import { RateLimitResponse_RateLimit_Unit as Unit } from "../../src/proto.js";
import type { StatsManager } from "../../src/stats/stats-manager.js";

/**
 * Builds a RateLimit for tests without going through YAML: a fixed epoch window of the unit
 * (or of `extra.windowSeconds`) unless `extra.algorithm` says otherwise ({@link slidingWindow},
 * {@link tokenBucket}, {@link calendarWindow}).
 */
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
    algorithm: fixedEpochWindow(windowSeconds),
    cacheKeySuffix: "",
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
  };
}

/** `algorithm: sliding_window` over epoch-aligned windows of `seconds`. */
export function slidingWindow(seconds: number): SlidingWindow {
  return compileAlgorithm(seconds, true, undefined, undefined) as SlidingWindow;
}

/** `algorithm: token_bucket` with these GCRA parameters (`resolveGcraParams`). */
export function tokenBucket(bucket: GcraParams): TokenBucket {
  return compileAlgorithm(0, false, bucket, undefined) as TokenBucket;
}

/** A fixed window whose bounds are a calendar period (`time_zone:`). */
export function calendarWindow(period: CalendarWindow): FixedWindow {
  return compileAlgorithm(0, false, undefined, period) as FixedWindow;
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
    algorithm: sliding
      ? slidingWindow(shape.windowSeconds)
      : fixedEpochWindow(shape.windowSeconds),
    windowSeconds: shape.windowSeconds,
    cacheKeySuffix: shape.cacheKeySuffix,
    allOrNothing: options.allOrNothing ?? false,
    shadowMode: options.shadowMode ?? false,
  });
}

/** A limit's token-bucket parameters (undefined for window algorithms, or no limit). */
export function bucketOfLimit(
  limit: RateLimit | undefined,
): GcraParams | undefined {
  return limit === undefined ? undefined : bucketOf(limit.algorithm);
}

/** A limit's calendar period (undefined for epoch windows, token buckets, or no limit). */
export function calendarOfLimit(
  limit: RateLimit | undefined,
): CalendarWindow | undefined {
  return limit === undefined ? undefined : calendarOf(limit.algorithm);
}
