// The limit of a run-time override: resolved against the rule it overrides (fields left unset
// keep the rule's window), compiled by the config's own limit compiler (config/limit-compile.ts,
// so every check, window, token bucket, calendar and cache-key tail is the YAML's), and laid
// over the rule's limit for each request it applies to. The rule keeps everything that is not
// the limit itself: its stats handles (same stats key, never one per override or value), name,
// `replaces`, metadata, quota mode and charge mode.

import { calendarOf } from "../config/algorithm.js";
import type { CalendarWindow } from "../config/calendar-window.js";
import { ConfigError } from "../config/config-error.js";
import { compileRuleLimits } from "../config/limit-compile.js";
import type { RateLimit } from "../config/rate-limit-config.js";
import { unitByName, unitName } from "../config/units.js";
import {
  yamlAlgorithms,
  type YamlAlgorithm,
  type YamlDescriptor,
  type YamlRateLimit,
} from "../config/yaml-types.js";
import {
  OverrideLimitSchema,
  RateLimitResponse_RateLimit_Unit as Unit,
  type OverrideLimit,
} from "../proto.js";
import { createStatsManager } from "../stats/stats-manager.js";
import { create } from "@bufbuild/protobuf";

/**
 * A field of an override's limit is invalid. `field` is its proto name under `limit.`
 * (`limit.unit`, `limit.burst`); the message starts with it.
 */
export class OverrideLimitError extends Error {
  override readonly name = "OverrideLimitError";
  /** The offending field, e.g. `limit.requests_per_unit`. */
  readonly field: string;

  constructor(field: string, problem: string, options?: ErrorOptions) {
    super(`${field}: ${problem}`, options);
    this.field = field;
  }
}

/**
 * The compiled limit of an override: the fields of a {@link RateLimit} that describe the limit
 * itself, as the config compiler builds them. Frozen; shared by every override with the same
 * resolved limit.
 */
export type OverrideShape = Pick<
  RateLimit,
  | "requestsPerUnit"
  | "unit"
  | "unitSeconds"
  | "unitMultiplier"
  | "windowSeconds"
  | "algorithm"
  | "cacheKeySuffix"
  | "unlimited"
  | "shadowMode"
>;

/**
 * The algorithm of a compiled limit, as the YAML names it (the kinds carry the YAML names),
 * with the calendar period of its window (`time_zone:`), if any.
 */
function algorithmOf(limit: RateLimit): {
  readonly name: YamlAlgorithm;
  readonly calendar: CalendarWindow | undefined;
} {
  const algorithm = limit.algorithm;
  return { name: algorithm.kind, calendar: calendarOf(algorithm) };
}

const knownUnits: ReadonlySet<number> = new Set(unitByName.values());

/**
 * Resolves a requested override limit against the rule it overrides, filling every field: an
 * unset `unit` keeps the rule's whole window (unit, `unit_multiplier` unless given, algorithm,
 * `time_zone`, `week_start`); an empty `algorithm` is the rule's; `burst` 0 of a token bucket is
 * `requests_per_unit` (the YAML's default, not the rule's burst). `unlimited` takes no other
 * field. Checks only what the compiler cannot see (the result still goes through
 * {@link compileOverrideLimit}).
 *
 * @param rule - the rule's limit as the lookup found it
 * @returns a new, fully resolved limit (the form stored and answered)
 * @throws {@link OverrideLimitError} for `unlimited` with another field, an unknown unit or
 *   algorithm, or an unset unit on an unlimited rule (it has no window to keep)
 */
export function resolveOverrideLimit(
  requested: OverrideLimit,
  rule: RateLimit,
): OverrideLimit {
  if (requested.unlimited) {
    const set: [string, boolean][] = [
      ["requests_per_unit", requested.requestsPerUnit !== 0],
      ["unit", requested.unit !== Unit.UNKNOWN],
      ["unit_multiplier", requested.unitMultiplier !== 0],
      ["algorithm", requested.algorithm !== ""],
      ["burst", requested.burst !== 0],
      ["shadow_mode", requested.shadowMode],
      ["time_zone", requested.timeZone !== ""],
      ["week_start", requested.weekStart !== ""],
    ];
    const extra = set.find(([, isSet]) => isSet);
    if (extra !== undefined)
      throw new OverrideLimitError(
        `limit.${extra[0]}`,
        "must not be set with limit.unlimited (an unlimited override has no window)",
      );
    return create(OverrideLimitSchema, { unlimited: true });
  }
  if (requested.unit !== Unit.UNKNOWN && !knownUnits.has(requested.unit))
    throw new OverrideLimitError(
      "limit.unit",
      `unknown unit ${String(requested.unit)} (valid: ${[...unitByName.keys()].join(", ")})`,
    );
  if (
    requested.algorithm !== "" &&
    !(yamlAlgorithms as readonly string[]).includes(requested.algorithm)
  )
    throw new OverrideLimitError(
      "limit.algorithm",
      `unknown algorithm '${requested.algorithm}' (valid: ${yamlAlgorithms.join(", ")}; empty: the rule's)`,
    );
  const keepsWindow = requested.unit === Unit.UNKNOWN;
  if (keepsWindow && rule.unlimited)
    throw new OverrideLimitError(
      "limit.unit",
      `must be set: the rule ${rule.fullKey} is unlimited and has no window to keep`,
    );
  const algorithm =
    requested.algorithm !== ""
      ? requested.algorithm
      : rule.unlimited
        ? "fixed_window"
        : algorithmOf(rule).name;
  const unitMultiplier =
    requested.unitMultiplier !== 0
      ? requested.unitMultiplier
      : keepsWindow
        ? rule.unitMultiplier
        : 1;
  // The rule's calendar goes with its window, unless the override sets its own zone.
  const calendar = keepsWindow ? algorithmOf(rule).calendar : undefined;
  const timeZone =
    requested.timeZone !== "" ? requested.timeZone : (calendar?.timeZone ?? "");
  const weekStart =
    requested.weekStart !== ""
      ? requested.weekStart
      : requested.timeZone === "" && calendar?.unit === "week"
        ? calendar.weekStart
        : "";
  return create(OverrideLimitSchema, {
    requestsPerUnit: requested.requestsPerUnit,
    unit: keepsWindow ? rule.unit : requested.unit,
    unitMultiplier,
    algorithm,
    burst:
      algorithm === "token_bucket" && requested.burst === 0
        ? requested.requestsPerUnit
        : requested.burst,
    shadowMode: requested.shadowMode,
    timeZone,
    weekStart,
  });
}

// Compiling creates the stats handles of a stats key: these go to a private store that no
// sink reads (the override counts under its rule's handles, see applyOverrideShape).
const compileStats = createStatsManager();
const compilePath = "override";
const fieldPrefix = `${compilePath}.rate_limit.`;

/**
 * Compiles a resolved override limit with the config's limit compiler, exactly as a YAML
 * `rate_limit:` block with the same fields.
 *
 * @throws {@link OverrideLimitError} for whatever the compiler refuses (a token bucket of 0, a
 *   window over 2^32 − 1 s, a time zone it does not know, `burst` without a token bucket, …),
 *   naming the field (`limit.<yaml name>`, the proto's name too)
 */
export function compileOverrideLimit(limit: OverrideLimit): OverrideShape {
  const block: YamlRateLimit = {
    requestsPerUnit: limit.requestsPerUnit,
    unit: limit.unlimited ? "" : unitName(limit.unit),
    unlimited: limit.unlimited,
    name: "",
    replaces: [],
    ...(limit.algorithm !== ""
      ? { algorithm: limit.algorithm as YamlAlgorithm }
      : {}),
    ...(limit.unitMultiplier !== 0
      ? { unitMultiplier: limit.unitMultiplier }
      : {}),
    ...(limit.burst !== 0 ? { burst: limit.burst } : {}),
    ...(limit.timeZone !== "" ? { timeZone: limit.timeZone } : {}),
    ...(limit.weekStart !== "" ? { weekStart: limit.weekStart } : {}),
  };
  const rule: YamlDescriptor = {
    key: compilePath,
    value: "",
    rateLimit: block,
    descriptors: [],
    shadowMode: limit.shadowMode,
    quotaMode: false,
    detailedMetric: false,
    valueToMetric: false,
    shareThreshold: false,
  };
  let compiled;
  try {
    compiled = compileRuleLimits(
      rule,
      compilePath,
      compilePath,
      { statsManager: compileStats, allOrNothing: false },
      (problem, where) =>
        new ConfigError(problem, {
          fieldPath: where?.fieldPath,
          hint: where?.hint,
        }),
    );
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    const path = err.fieldPath ?? "";
    const field = path.startsWith(fieldPrefix)
      ? `limit.${path.slice(fieldPrefix.length)}`
      : "limit";
    throw new OverrideLimitError(
      field,
      err.hint === undefined ? err.message : `${err.message} (${err.hint})`,
      { cause: err },
    );
  }
  // compileRuleLimits returns undefined only for a rule without rate_limit.
  if (compiled === undefined) throw new Error("override limit not compiled");
  const primary = compiled.primary;
  return Object.freeze({
    requestsPerUnit: primary.requestsPerUnit,
    unit: primary.unit,
    unitSeconds: primary.unitSeconds,
    unitMultiplier: primary.unitMultiplier,
    windowSeconds: primary.windowSeconds,
    algorithm: primary.algorithm,
    cacheKeySuffix: primary.cacheKeySuffix,
    unlimited: primary.unlimited,
    shadowMode: primary.shadowMode,
  });
}

/**
 * Returns the limit a request counts when an override applies: the rule's limit as the lookup
 * found it, with the override's limit fields in place of the rule's. Kept from the rule: stats
 * handles (its stats key), `fullKey`, name, `replaces`, metadata, quota mode, charge mode,
 * `statsKeySuffix` and the share_threshold values of the cache key; shadow mode is the rule's
 * or the override's. A `rate_limits:` list becomes the one override limit (counted under the
 * list's first stats key). Frozen.
 */
export function applyOverrideShape(
  rule: RateLimit,
  shape: OverrideShape,
): RateLimit {
  return Object.freeze({
    ...rule,
    requestsPerUnit: shape.requestsPerUnit,
    unit: shape.unit,
    unitSeconds: shape.unitSeconds,
    unitMultiplier: shape.unitMultiplier,
    windowSeconds: shape.windowSeconds,
    algorithm: shape.algorithm,
    cacheKeySuffix: shape.cacheKeySuffix,
    unlimited: shape.unlimited,
    shadowMode: rule.shadowMode || shape.shadowMode,
    extraLimits: undefined,
  });
}
