// Compiles the limits of one descriptor rule, once per config load: its `rate_limit:` block, or
// its `rate_limits:` list (an extension: several limits checked together), into the frozen
// RateLimit objects that lookups return. Every decision about a limit's algorithm, window,
// token bucket, calendar, cache-key tail and stats key is taken here, so requests never look at
// the YAML fields again. descriptor-compile.ts calls it for each rule, in the reference's order
// of checks (docs/reference-parity.md#config-errors).

import type { JsonObject } from "@bufbuild/protobuf";
import { RateLimitResponse_RateLimit_Unit as Unit } from "../proto.js";
import type { StatsManager } from "../stats/stats-manager.js";
import { calendarOf, compileAlgorithm } from "./algorithm.js";
import { CalendarWindow, CalendarWindowError } from "./calendar-window.js";
import { compileLease, defaultLeaseMax, type Lease } from "./lease.js";
import type { ConfigError, ConfigErrorOptions } from "./config-error.js";
import type { RateLimit } from "./rate-limit-config.js";
import { sourceLine } from "./source-lines.js";
import {
  gcraCacheKeyTail,
  resolveGcraParams,
  type GcraParams,
} from "./token-bucket.js";
import {
  maxWindowSeconds,
  unitByName,
  unitName,
  unitToSeconds,
  windowShape,
} from "./units.js";
import type { YamlDescriptor, YamlRateLimit } from "./yaml-types.js";

/** Builds the {@link ConfigError} of a rule problem: `<name>: <problem>`, located. */
export type Fail = (
  problem: string,
  where?: Omit<ConfigErrorOptions, "file" | "cause" | "detail">,
) => ConfigError;

/** What {@link compileRuleLimits} needs besides the rule. */
export interface LimitContext {
  /** Creates the stats handles of every limit. */
  readonly statsManager: StatsManager;
  /** The domain's charge mode is `all_or_nothing`. */
  readonly allOrNothing: boolean;
}

/** A limit before the rule's metadata is checked (metadata comes later in the order). */
export type PendingLimit = Omit<RateLimit, "metadata">;

/** The limits of one rule before its metadata is checked. */
export interface PendingLimits {
  /** `rate_limit:`, or the first entry of `rate_limits:`. */
  readonly primary: PendingLimit;
  /** The other entries of `rate_limits:`, in list order; undefined for `rate_limit:`. */
  readonly extra: readonly PendingLimit[] | undefined;
}

/** `valid units: …`, the hint of an invalid unit. */
const validUnitsHint = `valid units: ${[...unitByName.keys()].join(", ")} (any case)`;

/** Units a `time_zone` applies to. */
const calendarUnitValues: ReadonlySet<Unit> = new Set([
  Unit.DAY,
  Unit.WEEK,
  Unit.MONTH,
  Unit.YEAR,
]);

/**
 * Validates the limits of one rule and builds them: its `rate_limit:` block (statistics under
 * the rule's config path, as the reference), or each entry of its `rate_limits:` list
 * (statistics under the path plus the entry's `statsKeySuffix`).
 *
 * @param rulePath - the rule's field path, e.g. `descriptors[0]`
 * @param fullKey - the rule's config path, e.g. `domain.key_value`
 * @returns undefined for a rule without a limit
 * @throws {@link ConfigError} (through `fail`) for the first invalid limit: the reference's
 *   unit, unlimited and replaces errors, and those of the extensions (both `rate_limit` and
 *   `rate_limits`, an empty list, `unlimited` or `replaces` in a list, two entries sharing a
 *   counter or a stats key, `burst` without a token bucket, a token bucket with
 *   `requests_per_unit: 0` or `unlimited`, `time_zone` and `week_start` where they do not
 *   apply, an unknown time zone or week start, a token bucket beyond the supported range)
 */
export function compileRuleLimits(
  rule: YamlDescriptor,
  rulePath: string,
  fullKey: string,
  context: LimitContext,
  fail: Fail,
): PendingLimits | undefined {
  const list = rule.rateLimits;
  if (list === undefined) {
    const block = rule.rateLimit;
    if (block === undefined) return undefined;
    const primary = compileLimit(block, {
      rule,
      path: `${rulePath}.rate_limit`,
      blockLine: sourceLine(rule, "rate_limit") ?? rule.line,
      inList: false,
      fullKey,
      context,
      fail,
    });
    return { primary, extra: undefined };
  }
  const listWhere = {
    line: sourceLine(rule, "rate_limits") ?? rule.line,
    fieldPath: `${rulePath}.rate_limits`,
  };
  if (rule.rateLimit !== undefined) {
    throw fail("rate_limit and rate_limits cannot both be set", {
      ...listWhere,
      hint: "a rule has one rate_limit: block or a rate_limits: list; move the rate_limit block into the list",
    });
  }
  const first = list[0];
  if (first === undefined) {
    throw fail("rate_limits is empty", {
      ...listWhere,
      hint: "list one or more rate limits, or remove rate_limits",
    });
  }
  const compiled: PendingLimit[] = [];
  const counters: string[] = [];
  for (const [index, block] of list.entries()) {
    const path = `${listWhere.fieldPath}[${index}]`;
    const blockLine = sourceLine(block, "") ?? listWhere.line;
    const limit = compileLimit(block, {
      rule,
      path,
      blockLine,
      inList: true,
      fullKey,
      context,
      fail,
    });
    const counter = counterIdentity(limit);
    const sameCounter = counters.indexOf(counter);
    if (sameCounter >= 0) {
      throw fail(
        `rate_limits[${sameCounter}] and rate_limits[${index}] would share one counter (${counterReason(limit)})`,
        {
          line: blockLine,
          fieldPath: path,
          hint: "the limits of one rule need different windows, algorithms, token buckets or calendars; remove one or change its unit, unit_multiplier, algorithm, burst or time_zone",
        },
      );
    }
    const sameStats = compiled.findIndex(
      (other) => other.statsKeySuffix === limit.statsKeySuffix,
    );
    if (sameStats >= 0) {
      throw fail(
        `rate_limits[${sameStats}] and rate_limits[${index}] have the same stats key '${fullKey}${limit.statsKeySuffix}'`,
        {
          line: sourceLine(block, "name") ?? blockLine,
          fieldPath: block.name === "" ? path : `${path}.name`,
          hint: `give one of them a (different) name: its stats key becomes ${fullKey}_<name>`,
        },
      );
    }
    counters.push(counter);
    compiled.push(limit);
  }
  return { primary: compiled[0]!, extra: compiled.slice(1) };
}

/**
 * Adds the rule's metadata to its limits and freezes them: the primary limit, with the others
 * (each with its own `extraLimits` undefined) as its frozen `extraLimits`.
 */
export function finishLimits(
  pending: PendingLimits,
  metadata: JsonObject | undefined,
): RateLimit {
  const extraLimits =
    pending.extra === undefined
      ? undefined
      : Object.freeze(
          pending.extra.map((limit): RateLimit =>
            Object.freeze({ ...limit, metadata }),
          ),
        );
  return Object.freeze({ ...pending.primary, extraLimits, metadata });
}

/** Where one limit block is, and what it is compiled for. */
interface BlockContext {
  readonly rule: YamlDescriptor;
  /** Field path of the block: `descriptors[0].rate_limit`, `….rate_limits[1]`. */
  readonly path: string;
  /** Line of the block, for fields it does not have; undefined for xDS. */
  readonly blockLine: number | undefined;
  /** An entry of a `rate_limits:` list. */
  readonly inList: boolean;
  readonly fullKey: string;
  readonly context: LimitContext;
  readonly fail: Fail;
}

/**
 * Validates one `rate_limit` block or `rate_limits` entry and builds its limit. The
 * reference's checks come first, in its order (unit / unlimited, replaces), then the
 * extensions'.
 */
function compileLimit(block: YamlRateLimit, where: BlockContext): PendingLimit {
  const { rule, path, fail } = where;
  // A field's own line, else the block's (a missing field).
  const at = (key: string) => ({
    line: sourceLine(block, key) ?? where.blockLine,
    fieldPath: `${path}.${key}`,
  });
  if (where.inList) {
    if (block.unlimited) {
      throw fail("unlimited is not allowed in rate_limits", {
        ...at("unlimited"),
        hint: "an unlimited rule has no other limit: use rate_limit: with unlimited: true",
      });
    }
    if (block.replaces.length > 0) {
      throw fail("replaces is not allowed in rate_limits", {
        ...at("replaces"),
        hint: "use rate_limit: for a limit that replaces others (another rule may still replace a list entry by its name)",
      });
    }
  }
  const unit = unitByName.get(block.unit.toUpperCase());
  if (block.unlimited) {
    if (unit !== undefined) {
      throw fail("should not specify rate limit unit when unlimited", {
        ...at("unit"),
        hint: "remove the unit, or unlimited: true",
      });
    }
  } else if (unit === undefined) {
    throw fail(`invalid rate limit unit '${block.unit}'`, {
      ...at("unit"),
      hint: validUnitsHint,
    });
  }
  for (const [index, replaced] of block.replaces.entries()) {
    const replacesWhere = {
      line: sourceLine(replaced, "name") ?? sourceLine(replaced, ""),
      fieldPath: `${path}.replaces[${index}].name`,
    };
    if (replaced.name === "") {
      throw fail("should not have an empty replaces entry", replacesWhere);
    }
    if (replaced.name === block.name) {
      throw fail("replaces should not contain name of same descriptor", {
        ...replacesWhere,
        hint: `'${replaced.name}' is this rate limit's own name`,
      });
    }
  }
  // Unlimited limits carry unit UNKNOWN whatever was written (upstream `config_impl.go`).
  const effectiveUnit =
    block.unlimited || unit === undefined ? Unit.UNKNOWN : unit;
  // Extensions: decided here, once, so requests never look at the algorithm.
  const unitMultiplier = block.unitMultiplier ?? 1;
  if (!Number.isInteger(unitMultiplier) || unitMultiplier < 1) {
    throw fail(
      `invalid unit_multiplier '${String(unitMultiplier)}' (expected an integer >= 1)`,
      at("unit_multiplier"),
    );
  }
  const algorithm = block.algorithm ?? "fixed_window";
  const sliding = !block.unlimited && algorithm === "sliding_window";
  const shape = windowShape(effectiveUnit, unitMultiplier, sliding);
  if (shape.windowSeconds > maxWindowSeconds) {
    throw fail(
      `unit_multiplier ${String(unitMultiplier)} × ${unitName(effectiveUnit)} is longer than ${String(maxWindowSeconds)} seconds`,
      at("unit_multiplier"),
    );
  }
  const tokenBucket = compileTokenBucket(
    block,
    algorithm,
    shape.windowSeconds,
    at,
    fail,
  );
  const calendar = compileCalendar(
    block,
    algorithm,
    effectiveUnit,
    unitMultiplier,
    at,
    fail,
  );
  let cacheKeySuffix = shape.cacheKeySuffix;
  if (tokenBucket !== undefined) {
    cacheKeySuffix = gcraCacheKeyTail(
      shape.windowSeconds,
      block.requestsPerUnit,
      tokenBucket.burst,
    );
  } else if (where.inList && !sliding && calendar === undefined) {
    // Two fixed windows of one list could start on the same second: name the window even
    // with unit_multiplier 1 (calendar keys name their period instead).
    cacheKeySuffix = `_w${String(shape.windowSeconds)}`;
  }
  const statsKeySuffix = where.inList
    ? listStatsKeySuffix(block.name, effectiveUnit, unitMultiplier)
    : "";
  const lease = checkLease(block, algorithm, at, fail, () =>
    compileLease(
      block.leaseMax ?? defaultLeaseMax(block.requestsPerUnit),
      where.context.statsManager,
      where.fullKey + statsKeySuffix,
    ),
  );
  return {
    fullKey: where.fullKey,
    stats: where.context.statsManager.rateLimitStats(
      where.fullKey + statsKeySuffix,
    ),
    requestsPerUnit: block.requestsPerUnit,
    unit: effectiveUnit,
    unitSeconds: unitToSeconds(effectiveUnit),
    unitMultiplier,
    windowSeconds: shape.windowSeconds,
    algorithm: compileAlgorithm(
      shape.windowSeconds,
      sliding,
      tokenBucket,
      calendar,
    ),
    cacheKeySuffix,
    extraLimits: undefined,
    statsKeySuffix,
    allOrNothing: where.context.allOrNothing,
    unlimited: block.unlimited,
    shadowMode: rule.shadowMode,
    quotaMode: rule.quotaMode,
    name: block.name,
    replaces: Object.freeze(block.replaces.map((replaced) => replaced.name)),
    detailedMetric: rule.detailedMetric,
    shareThresholdValues: undefined,
    // Only on limits with `lease: true`: every other limit keeps the reference's shape.
    ...(lease !== undefined ? { lease } : {}),
  };
}

/**
 * Checks `lease:` and `lease_max:` (docs/configuration.md#leases): a lease splits a window's
 * count between replicas, so it needs a counted window (not `unlimited`, not a token bucket);
 * `lease_max` needs `lease: true` and may not exceed `requests_per_unit` (when that is ≥ 1).
 * Returns the built lease, or undefined without `lease: true`.
 */
function checkLease(
  block: YamlRateLimit,
  algorithm: string,
  at: At,
  fail: Fail,
  build: () => Lease,
): Lease | undefined {
  const leaseMax = block.leaseMax;
  if (block.lease !== true) {
    if (leaseMax !== undefined) {
      throw fail("lease_max is only allowed with lease: true", {
        ...at("lease_max"),
        hint: "add lease: true, or remove lease_max",
      });
    }
    return undefined;
  }
  if (block.unlimited) {
    throw fail("lease cannot be used with unlimited", {
      ...at("lease"),
      hint: "an unlimited rule never counts, so there is nothing to lease: remove lease, or unlimited: true",
    });
  }
  if (algorithm === "token_bucket") {
    throw fail("lease cannot be used with algorithm token_bucket", {
      ...at("lease"),
      hint: "a token bucket stores one arrival time, not a count of hits, so it cannot be split into leases: remove lease, or use algorithm fixed_window or sliding_window",
    });
  }
  if (
    leaseMax !== undefined &&
    (!Number.isInteger(leaseMax) ||
      leaseMax < 1 ||
      leaseMax > Math.max(1, block.requestsPerUnit))
  ) {
    throw fail(
      `invalid lease_max '${String(leaseMax)}' (expected an integer from 1 to requests_per_unit ${String(Math.max(1, block.requestsPerUnit))})`,
      {
        ...at("lease_max"),
        hint: "a lease larger than the window's limit cannot be spent; lower lease_max, or remove it for the default (1 % of requests_per_unit)",
      },
    );
  }
  return build();
}

/** Locates a field of the block being compiled. */
type At = (key: string) => { line: number | undefined; fieldPath: string };

/**
 * Checks `algorithm: token_bucket` and `burst`, and derives the bucket's GCRA parameters;
 * undefined for the window algorithms.
 */
function compileTokenBucket(
  block: YamlRateLimit,
  algorithm: string,
  windowSeconds: number,
  at: At,
  fail: Fail,
): GcraParams | undefined {
  const burst = block.burst;
  if (algorithm !== "token_bucket") {
    if (burst !== undefined) {
      throw fail("burst is only allowed with algorithm: token_bucket", {
        ...at("burst"),
        hint:
          block.algorithm === undefined
            ? "add algorithm: token_bucket, or remove burst"
            : `algorithm ${algorithm} has no burst: remove burst, or use algorithm: token_bucket`,
      });
    }
    return undefined;
  }
  if (block.unlimited) {
    throw fail("algorithm token_bucket cannot be unlimited", {
      ...at("algorithm"),
      hint: "remove algorithm: token_bucket, or unlimited: true",
    });
  }
  if (block.requestsPerUnit < 1) {
    throw fail(
      `algorithm token_bucket needs requests_per_unit >= 1, got ${String(block.requestsPerUnit)}`,
      {
        ...at("requests_per_unit"),
        hint: "requests_per_unit: 0 (every hit over limit) is only allowed with a window algorithm: fixed_window or sliding_window",
      },
    );
  }
  try {
    return resolveGcraParams({
      requestsPerUnit: block.requestsPerUnit,
      windowSeconds,
      ...(burst !== undefined ? { burst } : {}),
    });
  } catch (error) {
    if (!(error instanceof RangeError)) throw error;
    // The rate (requests_per_unit per window) or the capacity (burst × interval) is too large.
    const rate = error.message.startsWith("token bucket rate");
    throw fail(error.message, {
      ...at(
        rate
          ? "requests_per_unit"
          : burst !== undefined
            ? "burst"
            : (block.unitMultiplier ?? 1) > 1
              ? "unit_multiplier"
              : "unit",
      ),
      hint: rate
        ? "lower requests_per_unit or lengthen the window (unit, unit_multiplier)"
        : "lower burst, or shorten the emission interval (more requests_per_unit or a shorter window)",
    });
  }
}

/**
 * Checks `time_zone` and `week_start` and builds the calendar window; undefined without
 * `time_zone` (windows aligned to the Unix epoch).
 */
function compileCalendar(
  block: YamlRateLimit,
  algorithm: string,
  unit: Unit,
  unitMultiplier: number,
  at: At,
  fail: Fail,
): CalendarWindow | undefined {
  const timeZone = block.timeZone;
  if (timeZone === undefined) {
    if (block.weekStart !== undefined) {
      throw fail("week_start needs time_zone", {
        ...at("week_start"),
        hint: "week_start is the first day of a calendar week: add time_zone (with unit: week), or remove week_start",
      });
    }
    return undefined;
  }
  if (block.unlimited) {
    throw fail("time_zone is not allowed with unlimited", {
      ...at("time_zone"),
      hint: "an unlimited rule has no window: remove time_zone",
    });
  }
  if (algorithm !== "fixed_window") {
    throw fail(`time_zone cannot be used with algorithm ${algorithm}`, {
      ...at("time_zone"),
      hint:
        algorithm === "token_bucket"
          ? "a token bucket has no windows: remove time_zone, or algorithm: token_bucket"
          : "calendar windows are fixed windows: remove time_zone, or algorithm: sliding_window",
    });
  }
  if (unitMultiplier !== 1) {
    throw fail(
      `time_zone cannot be used with unit_multiplier ${String(unitMultiplier)}`,
      {
        ...at("unit_multiplier"),
        hint: "a calendar window is one local day, week, month or year: remove unit_multiplier, or time_zone",
      },
    );
  }
  if (
    block.weekStart !== undefined &&
    calendarUnitValues.has(unit) &&
    unit !== Unit.WEEK
  ) {
    throw fail(`week_start only applies to unit WEEK, not ${unitName(unit)}`, {
      ...at("week_start"),
      hint: "remove week_start, or use unit: week",
    });
  }
  try {
    return new CalendarWindow({
      unit: block.unit,
      timeZone,
      weekStart: block.weekStart,
    });
  } catch (error) {
    if (!(error instanceof CalendarWindowError)) throw error;
    throw fail(error.message, { ...at(error.field), hint: error.hint });
  }
}

/**
 * The stats-key suffix of a `rate_limits:` entry: `_<name>`, else `_per_<unit>`
 * (`_per_second`; `_per_5_minute` with `unit_multiplier: 5`).
 */
function listStatsKeySuffix(
  name: string,
  unit: Unit,
  unitMultiplier: number,
): string {
  if (name !== "") return `_${name}`;
  const unitText = unitName(unit).toLowerCase();
  return unitMultiplier === 1
    ? `_per_${unitText}`
    : `_per_${String(unitMultiplier)}_${unitText}`;
}

/**
 * What names a limit's counter among the limits of one rule (they share the cache-key stem):
 * the token bucket's tail, the calendar's unit, zone and week start, or the window's suffix
 * (`_w<seconds>`, `_s<seconds>`).
 */
function counterIdentity(limit: PendingLimit): string {
  const calendar = calendarOf(limit.algorithm);
  if (calendar !== undefined)
    return `calendar ${calendar.unit} ${calendar.timeZone} ${calendar.weekStart}`;
  return limit.cacheKeySuffix;
}

/** Why two limits of {@link counterIdentity} share a counter, for the error. */
function counterReason(limit: PendingLimit): string {
  const algorithm = limit.algorithm;
  if (algorithm.kind === "token_bucket")
    return `the same token bucket: ${String(limit.requestsPerUnit)} per ${String(limit.windowSeconds)} s, burst ${String(algorithm.bucket.burst)}`;
  const calendar = calendarOf(algorithm);
  if (calendar !== undefined) {
    return calendar.unit === "week"
      ? `the same calendar week in ${calendar.timeZone}, starting ${calendar.weekStart}`
      : `the same calendar ${calendar.unit} in ${calendar.timeZone}`;
  }
  return `the same ${algorithm.kind === "sliding_window" ? "sliding" : "fixed"} window of ${String(limit.windowSeconds)} s`;
}
