import { RateLimitResponse_RateLimit_Unit as Unit } from "../proto.js";

/**
 * Window length in seconds per unit, aligned to the Unix epoch (docs/reference-parity.md#windows,
 * upstream `utilities.go` `UnitToDivider`): MONTH is 30 days and YEAR 365 days, not calendar
 * periods.
 */
const secondsByUnit: Readonly<Record<number, number>> = {
  [Unit.SECOND]: 1,
  [Unit.MINUTE]: 60,
  [Unit.HOUR]: 3600,
  [Unit.DAY]: 86400,
  [Unit.WEEK]: 604800,
  [Unit.MONTH]: 2592000,
  [Unit.YEAR]: 31536000,
};

/**
 * Returns the window length of `unit` in seconds, or 0 for UNKNOWN and any unknown number.
 */
export function unitToSeconds(unit: Unit): number {
  return secondsByUnit[unit] ?? 0;
}

/** Upper-case unit names accepted in YAML (case-insensitive there) and their enum values. */
export const unitByName: ReadonlyMap<string, Unit> = new Map([
  ["SECOND", Unit.SECOND],
  ["MINUTE", Unit.MINUTE],
  ["HOUR", Unit.HOUR],
  ["DAY", Unit.DAY],
  ["WEEK", Unit.WEEK],
  ["MONTH", Unit.MONTH],
  ["YEAR", Unit.YEAR],
]);

/** Enum names by number; numbers outside the enum have none. */
const namesByUnit: ReadonlyMap<number, string> = new Map(
  [...unitByName].map(([name, unit]) => [unit, name] as const),
);

/** Returns the upper-case name of a unit (`MINUTE`), `UNKNOWN` for anything else. */
export function unitName(unit: Unit): string {
  return namesByUnit.get(unit) ?? "UNKNOWN";
}

const unitsByNumber: ReadonlyMap<number, Unit> = new Map(
  [Unit.UNKNOWN, ...unitByName.values()].map((unit) => [unit, unit] as const),
);

/**
 * Returns the response unit with enum number `unitNumber`, UNKNOWN for numbers outside the
 * enum. A request's limit override uses `envoy.type.v3.RateLimitUnit`, numbered like the
 * response unit (0 UNKNOWN … 6 YEAR; the response's WEEK is 7), and upstream `config_impl.go`
 * `GetLimit` casts the number as is.
 */
export function unitFromNumber(unitNumber: number): Unit {
  return unitsByNumber.get(unitNumber) ?? Unit.UNKNOWN;
}

/** Longest window a rate limit may have: 2^32 − 1 seconds (about 136 years). */
export const maxWindowSeconds = 4294967295;

/** The window of a rate limit, decided once at config load. */
export interface WindowShape {
  /** `unitSeconds × unitMultiplier`; 0 for UNKNOWN. */
  readonly windowSeconds: number;
  /**
   * Glued after the window start in the cache key: "" for fixed one-unit windows (the
   * reference's keys), `_w<windowSeconds>` for fixed windows of several units,
   * `_s<windowSeconds>` for sliding windows (docs/configuration.md, "Cache keys").
   */
  readonly cacheKeySuffix: string;
}

/**
 * Returns the window of `unitMultiplier` units of `unit`, counted by a fixed or a sliding
 * window. MONTH and YEAR are the reference's 30 and 365 days, so `unit: month,
 * unit_multiplier: 3` is a 90-day window aligned to multiples of 90 days since the epoch, not a
 * calendar quarter. The caller checks that `windowSeconds` ≤ {@link maxWindowSeconds}.
 *
 * @param unitMultiplier - integer ≥ 1
 */
export function windowShape(
  unit: Unit,
  unitMultiplier: number,
  sliding: boolean,
): WindowShape {
  const windowSeconds = unitToSeconds(unit) * unitMultiplier;
  const cacheKeySuffix = sliding
    ? `_s${String(windowSeconds)}`
    : unitMultiplier === 1
      ? ""
      : `_w${String(windowSeconds)}`;
  return { windowSeconds, cacheKeySuffix };
}
