/**
 * Calendar windows: a day, week, month or year as a clock on the wall of one IANA time zone
 * shows it, for quotas such as "10,000 per month, reset at local midnight on the 1st in
 * Europe/Berlin". The reference has only epoch-aligned windows (a MONTH is 30 days from the
 * epoch, docs/reference-parity.md#windows); a rate limit without `time_zone` keeps those, and
 * nothing here is used for it.
 *
 * A period starts at the first instant of its first local day: local midnight, or, where a
 * time-zone change skips midnight (America/Santiago, Asia/Beirut, America/Sao_Paulo until
 * 2019), the first instant after the skipped stretch. It ends where the next period starts, so
 * periods tile time with no gap or overlap: a day lasts 23, 24 or 25 hours (or 23.5 and 24.5 on
 * Australia/Lord_Howe), a month 28 to 31 local days, a year 365 or 366. A local day that never
 * happens (Pacific/Apia's 2011-12-30, Pacific/Kiritimati's 1994-12-31) is an empty period,
 * never returned.
 *
 * Offsets come from the platform's time-zone data through `Intl.DateTimeFormat` (ICU's copy of
 * the IANA database bundled with Node), never from a table of our own. Calendar arithmetic on
 * local dates is integer day counting in the proleptic Gregorian calendar, which needs no
 * time-zone data.
 *
 * The decision path calls {@link CalendarWindow.period} once per decision. A window keeps the
 * period it last returned and answers from it while `now` stays inside, with two comparisons
 * and no allocation; only a `now` outside it asks `Intl` again (about a dozen offset look-ups).
 * Measured by bench/calendar-window.ts.
 */

/** The calendar units a `time_zone` applies to, lower case. */
export const calendarUnits = ["day", "week", "month", "year"] as const;

/** A calendar unit: `day`, `week`, `month` or `year`. */
export type CalendarUnit = (typeof calendarUnits)[number];

/** The days a week may start on (`week_start`), Monday first, lower case. */
export const weekdays = [
  "monday",
  "tuesday",
  "wednesday",
  "thursday",
  "friday",
  "saturday",
  "sunday",
] as const;

/** A day of the week, lower case. */
export type Weekday = (typeof weekdays)[number];

/** The rule fields that make a {@link CalendarWindow}, as written in the config. */
export interface CalendarWindowOptions {
  /** `day`, `week`, `month` or `year`, case-insensitive (the rule's `unit`). */
  readonly unit: string;
  /**
   * An IANA time-zone name (`Europe/Berlin`, `America/New_York`, `UTC`, `Etc/GMT-5`),
   * case-insensitive (the rule's `time_zone`). Offsets such as `+05:30` are refused: a named
   * zone says which offset changes apply.
   */
  readonly timeZone: string;
  /**
   * The day a week starts on, case-insensitive (the rule's `week_start`); only weeks use it.
   * @defaultValue `monday`
   */
  readonly weekStart?: string | undefined;
}

/** The config field a {@link CalendarWindowError} is about. */
export type CalendarWindowField = "unit" | "time_zone" | "week_start";

/**
 * A calendar window's options are invalid: an unknown time zone, a unit that is not a calendar
 * unit, or an unknown week start. Raised at config load, never on the decision path; the config
 * loader adds the file, line and field path.
 */
export class CalendarWindowError extends Error {
  override readonly name = "CalendarWindowError";
  readonly code = "RLS_CALENDAR_WINDOW";
  /** The offending field, named as in the YAML config. */
  readonly field: CalendarWindowField;
  /** What would fix it, e.g. how to list the valid time-zone names. */
  readonly hint: string;

  /**
   * @param message - the problem, e.g. `invalid time zone 'Europe/Berln'`
   * @param hint - what would fix it
   */
  constructor(field: CalendarWindowField, message: string, hint: string) {
    super(message);
    this.field = field;
    this.hint = hint;
  }
}

/** One calendar period of a {@link CalendarWindow}: `[startSeconds, endSeconds)`. */
export interface CalendarPeriod {
  /** The period's first instant, Unix seconds (inclusive). */
  readonly startSeconds: number;
  /**
   * The next period's first instant, Unix seconds (exclusive). `endSeconds − now` is the
   * `duration_until_reset` of a decision at `now`, ≥ 1 for a whole-second `now`.
   */
  readonly endSeconds: number;
  /**
   * The period in local time, for cache keys and Explain: `2026-11-25` (day), `2026-11-23/P1W`
   * (week: its first local date and the ISO 8601 duration of one week, so the week start is
   * part of it), `2026-11` (month), `2026` (year). The same for every replica and after a
   * restart; labels of one window sort as their periods do.
   */
  readonly label: string;
  /**
   * The label and the window's time zone, `<label>@<timeZone>` (`2026-11@Europe/Berlin`): names
   * the period among every zone's, for a cache key.
   */
  readonly cacheKeyPart: string;
}

/** Bounds of `nowSeconds`: years 1000 to 9998 (UTC), so that labels have four-digit years. */
const minSeconds = -30610224000 + 2 * 86400; // 1000-01-03T00:00:00Z
const maxSeconds = 253370764800 - 61 * 86400; // 9998-11-01T00:00:00Z

/** A period that contains no instant, so the first call of a window always computes one. */
const noPeriod: CalendarPeriod = Object.freeze({
  startSeconds: Infinity,
  endSeconds: -Infinity,
  label: "",
  cacheKeyPart: "",
});

/**
 * The calendar window of one rate limit, built once per rule at config load. Each worker
 * thread or process loads its own config, so an instance is never shared between threads; one
 * instance serves every decision of its rule.
 */
export class CalendarWindow {
  /** The unit, lower case. */
  readonly unit: CalendarUnit;
  /**
   * The time zone as `Intl` resolves it: the configured name with its canonical case
   * (`europe/berlin` → `Europe/Berlin`); aliases stay as written (`Asia/Calcutta`).
   */
  readonly timeZone: string;
  /** The day weeks start on (also set, unused, for other units). */
  readonly weekStart: Weekday;
  readonly #zone: ZoneOffsets;
  /** 0 for Monday … 6 for Sunday. */
  readonly #weekStartIndex: number;
  #current: CalendarPeriod = noPeriod;
  /** The first local day (days since 1970-01-01) of {@link CalendarWindow.#current}. */
  #currentFirstDay = 0;

  /**
   * Checks a rule's calendar options and compiles its window; call once per rule at config
   * load. Unit, time zone and week start are matched case-insensitively.
   *
   * @throws {@link CalendarWindowError} when the unit is not `day`, `week`, `month` or `year`
   *   (field `unit`), the time zone is not one `Intl` knows or is an offset (`time_zone`), or
   *   the week start is not a day's full English name (`week_start`); its hint says what is
   *   valid
   */
  constructor(options: CalendarWindowOptions) {
    const unit = options.unit.toLowerCase();
    if (!isCalendarUnit(unit))
      throw new CalendarWindowError(
        "unit",
        `time_zone needs a calendar unit, not '${options.unit}'`,
        `a time zone applies to units ${calendarUnits.join(", ")}; remove time_zone for a window aligned to the Unix epoch`,
      );
    const weekStart = (options.weekStart ?? "monday").toLowerCase();
    if (!isWeekday(weekStart))
      throw new CalendarWindowError(
        "week_start",
        `invalid week start '${options.weekStart ?? ""}'`,
        `valid week starts: ${weekdays.join(", ")}`,
      );
    this.unit = unit;
    this.timeZone = resolveTimeZone(options.timeZone);
    this.weekStart = weekStart;
    this.#zone = zoneOffsets(this.timeZone);
    this.#weekStartIndex = weekdays.indexOf(weekStart);
  }

  /**
   * Returns the period containing `nowSeconds`: `startSeconds ≤ now < endSeconds`. While `now`
   * stays in the period last returned, returns that same object without calling `Intl`.
   *
   * @param nowSeconds - Unix seconds, normally whole (the decision clock's); years 1000–9998
   * @throws RangeError when `nowSeconds` is not a finite number in that range
   * @throws Error only if the platform's time-zone data contradicts itself (no period found)
   */
  period(nowSeconds: number): CalendarPeriod {
    const current = this.#current;
    if (nowSeconds >= current.startSeconds && nowSeconds < current.endSeconds)
      return current;
    return this.#compute(nowSeconds, current);
  }

  /**
   * Returns the seconds from `nowSeconds` to the end of its period, the `duration_until_reset`
   * of a decision at `nowSeconds`: ≥ 1 for a whole-second `now`, exact to the second.
   *
   * @throws RangeError as {@link CalendarWindow.period}
   */
  secondsUntilReset(nowSeconds: number): number {
    return this.period(nowSeconds).endSeconds - nowSeconds;
  }

  #compute(nowSeconds: number, previous: CalendarPeriod): CalendarPeriod {
    if (
      !Number.isFinite(nowSeconds) ||
      nowSeconds < minSeconds ||
      nowSeconds >= maxSeconds
    )
      throw new RangeError(
        `calendar window: ${String(nowSeconds)} is not a time in Unix seconds between the years 1000 and 9998`,
      );
    // The clock moved on into the next period: its start is the previous one's end, so only
    // its end is searched for (three offset look-ups instead of about seven).
    if (previous !== noPeriod && nowSeconds >= previous.endSeconds) {
      const first = this.#nextFirstDay(this.#currentFirstDay);
      const end = this.#zone.startOfLocalDay(this.#nextFirstDay(first));
      if (nowSeconds < end) return this.#make(first, previous.endSeconds, end);
    }
    // The local date at `now` names the period, except around an offset change that moves
    // the wall clock back across midnight; then the loop steps to the neighbour. Starts never
    // decrease with the local date, so the steps converge (an empty period is stepped over).
    let first = this.#firstDayOf(
      Math.floor(this.#zone.wallSeconds(nowSeconds) / 86400),
    );
    for (let step = 0; step < 16; step++) {
      const start = this.#zone.startOfLocalDay(first);
      if (nowSeconds < start) {
        first = this.#previousFirstDay(first);
        continue;
      }
      const next = this.#nextFirstDay(first);
      const end = this.#zone.startOfLocalDay(next);
      if (nowSeconds >= end) {
        first = next;
        continue;
      }
      return this.#make(first, start, end);
    }
    throw new Error(
      `calendar window: no ${this.unit} in ${this.timeZone} contains ${String(nowSeconds)} (inconsistent time-zone data)`,
    );
  }

  /** Builds the period starting on local day `first` and makes it the current one. */
  #make(first: number, start: number, end: number): CalendarPeriod {
    const label = this.#label(first);
    this.#currentFirstDay = first;
    return (this.#current = Object.freeze({
      startSeconds: start,
      endSeconds: end,
      label,
      cacheKeyPart: `${label}@${this.timeZone}`,
    }));
  }

  /** The first local day (days since 1970-01-01) of the period holding local day `day`. */
  #firstDayOf(day: number): number {
    switch (this.unit) {
      case "day":
        return day;
      case "week":
        return day - mod(weekdayIndex(day) - this.#weekStartIndex, 7);
      case "month": {
        const { year, month } = civilFromDays(day);
        return daysFromCivil(year, month, 1);
      }
      case "year":
        return daysFromCivil(civilFromDays(day).year, 1, 1);
    }
  }

  /** The first local day of the period after the one starting on local day `first`. */
  #nextFirstDay(first: number): number {
    switch (this.unit) {
      case "day":
        return first + 1;
      case "week":
        return first + 7;
      case "month": {
        const { year, month } = civilFromDays(first);
        return month === 12
          ? daysFromCivil(year + 1, 1, 1)
          : daysFromCivil(year, month + 1, 1);
      }
      case "year":
        return daysFromCivil(civilFromDays(first).year + 1, 1, 1);
    }
  }

  /** The first local day of the period before the one starting on local day `first`. */
  #previousFirstDay(first: number): number {
    switch (this.unit) {
      case "day":
        return first - 1;
      case "week":
        return first - 7;
      case "month": {
        const { year, month } = civilFromDays(first);
        return month === 1
          ? daysFromCivil(year - 1, 12, 1)
          : daysFromCivil(year, month - 1, 1);
      }
      case "year":
        return daysFromCivil(civilFromDays(first).year - 1, 1, 1);
    }
  }

  #label(first: number): string {
    const { year, month, day } = civilFromDays(first);
    const yyyy = String(year).padStart(4, "0");
    const mm = month < 10 ? `0${month}` : String(month);
    const dd = day < 10 ? `0${day}` : String(day);
    switch (this.unit) {
      case "day":
        return `${yyyy}-${mm}-${dd}`;
      case "week":
        return `${yyyy}-${mm}-${dd}/P1W`;
      case "month":
        return `${yyyy}-${mm}`;
      case "year":
        return yyyy;
    }
  }
}

/**
 * Returns the IANA time-zone name `name` as `Intl` resolves it (canonical case).
 *
 * @throws {@link CalendarWindowError} (field `time_zone`) when `Intl` does not know the name,
 *   or it is a UTC offset such as `+05:30` rather than a zone name
 */
export function resolveTimeZone(name: string): string {
  const listHint =
    "time_zone takes an IANA time zone name such as Europe/Berlin, America/New_York or UTC; " +
    `list the names this Node knows with: node -p "Intl.supportedValuesOf('timeZone').join('\\n')"`;
  if (/^\s*[+\-\u2212]?\d/.test(name))
    throw new CalendarWindowError(
      "time_zone",
      `invalid time zone '${name}': a UTC offset, not a zone name`,
      `use the zone whose clock you mean (its daylight-saving changes follow), or Etc/GMT-5 style names for a fixed offset (the sign is inverted: Etc/GMT-5 is UTC+5); ${listHint}`,
    );
  let resolved: string | undefined;
  try {
    resolved = new Intl.DateTimeFormat("en-US", {
      timeZone: name,
    }).resolvedOptions().timeZone;
  } catch {
    resolved = undefined;
  }
  if (resolved === undefined || name.trim() === "") {
    const suggestion = suggestTimeZone(name);
    throw new CalendarWindowError(
      "time_zone",
      `invalid time zone '${name}'`,
      suggestion === undefined
        ? listHint
        : `did you mean '${suggestion}'? ${listHint}`,
    );
  }
  return resolved;
}

/** A zone whose city part is `name` (`berlin`, `new york` → Europe/Berlin, America/New_York). */
function suggestTimeZone(name: string): string | undefined {
  const city = name.trim().toLowerCase().replaceAll(" ", "_");
  if (city === "") return undefined;
  return Intl.supportedValuesOf("timeZone").find(
    (zone) => zone.slice(zone.lastIndexOf("/") + 1).toLowerCase() === city,
  );
}

function isCalendarUnit(text: string): text is CalendarUnit {
  return (calendarUnits as readonly string[]).includes(text);
}

function isWeekday(text: string): text is Weekday {
  return (weekdays as readonly string[]).includes(text);
}

/**
 * The offsets of one time zone, read through `Intl`. One per zone name, shared by every window
 * in that zone.
 */
interface ZoneOffsets {
  /**
   * The local wall-clock time at instant `t` (Unix seconds), as seconds since 1970-01-01 00:00
   * of the proleptic Gregorian calendar read as if it were UTC.
   */
  wallSeconds(t: number): number;
  /**
   * The first instant (Unix seconds) of local day `day` (days since 1970-01-01): the earliest
   * instant at which the wall clock reads its 00:00:00, or, when that time is skipped, the
   * instant the wall clock jumps past it.
   */
  startOfLocalDay(day: number): number;
}

const zones = new Map<string, ZoneOffsets>();

function zoneOffsets(timeZone: string): ZoneOffsets {
  let zone = zones.get(timeZone);
  if (zone === undefined) {
    zone = createZoneOffsets(timeZone);
    zones.set(timeZone, zone);
  }
  return zone;
}

function createZoneOffsets(timeZone: string): ZoneOffsets {
  // Gregorian calendar, Latin digits, 0–23 hours: six numbers that parse as plain integers.
  const format = new Intl.DateTimeFormat("en-US", {
    timeZone,
    calendar: "gregory",
    numberingSystem: "latn",
    hourCycle: "h23",
    year: "numeric",
    month: "numeric",
    day: "numeric",
    hour: "numeric",
    minute: "numeric",
    second: "numeric",
  });
  // `format` is about 3× as fast as `formatToParts` (1.6 µs against 4–6 µs on Node 24), so
  // the order of the six numbers in its text is read once from `formatToParts` and the text's
  // digit runs are taken in that order (en-US: month, day, year, hour, minute, second).
  const order: readonly string[] = format
    .formatToParts(0)
    .map((part): string => part.type)
    .filter((type) => type !== "literal");
  const at = (type: string): number => {
    const index = order.indexOf(type);
    if (index < 0 || order.length !== 6)
      throw new Error(
        `calendar window: Intl formats ${timeZone} times with parts ${order.join(", ")}`,
      );
    return index;
  };
  const yearAt = at("year");
  const monthAt = at("month");
  const dayAt = at("day");
  const hourAt = at("hour");
  const minuteAt = at("minute");
  const secondAt = at("second");
  const digitRuns = /\d+/g;

  function wallSeconds(t: number): number {
    const numbers = format.format(t * 1000).match(digitRuns);
    if (numbers?.length !== 6)
      throw new Error(
        `calendar window: cannot read the ${timeZone} time of ${String(t)}`,
      );
    return (
      daysFromCivil(
        Number(numbers[yearAt]),
        Number(numbers[monthAt]),
        Number(numbers[dayAt]),
      ) *
        86400 +
      Number(numbers[hourAt]) * 3600 +
      Number(numbers[minuteAt]) * 60 +
      Number(numbers[secondAt])
    );
  }

  // The offset (wall − UTC, seconds) in force at instant `t`, for a whole-second `t`.
  function offset(t: number): number {
    return wallSeconds(t) - t;
  }

  function startOfLocalDay(day: number): number {
    const wall = day * 86400;
    // Any zone's offset is within ±1 day, so the instants showing `wall` lie strictly between
    // `wall − 1 day` and `wall + 1 day`. Each offset in force there gives one candidate,
    // `wall − offset`, real if that offset is in force at the candidate. The offsets a day
    // either side, and any other found in force at a candidate, find every offset of the
    // stretch unless it changes more than twice within two days (which no zone does). With no
    // change nearby this is three look-ups.
    const offsets = [offset(wall - 86400)];
    const after = offset(wall + 86400);
    if (after !== offsets[0]) offsets.push(after);
    let first = Infinity;
    for (let i = 0; i < offsets.length && i < 6; i++) {
      const candidate = offsets[i]!;
      const t = wall - candidate;
      const actual = offset(t);
      if (actual === candidate) first = Math.min(first, t);
      else if (!offsets.includes(actual)) offsets.push(actual);
    }
    const lowest = Math.min(...offsets);
    const highest = Math.max(...offsets);
    if (first !== Infinity) return first;
    // 00:00 is skipped: the wall clock jumps from before it to after it at the instant the
    // offset rises. Below `wall − highest` the wall clock reads before 00:00, from
    // `wall − lowest` on after it; bisect (whole seconds, as offset changes are) for the jump.
    let lo = wall - highest; // reads before 00:00
    let hi = wall - lowest; // reads 00:00 or later
    if (wallSeconds(lo) >= wall || wallSeconds(hi) < wall) {
      lo = wall - 86400;
      hi = wall + 86400;
    }
    while (hi - lo > 1) {
      const mid = Math.floor((lo + hi) / 2);
      if (wallSeconds(mid) >= wall) hi = mid;
      else lo = mid;
    }
    return hi;
  }

  return { wallSeconds, startOfLocalDay };
}

function mod(a: number, n: number): number {
  return ((a % n) + n) % n;
}

/** 0 for Monday … 6 for Sunday; day 0 (1970-01-01) was a Thursday. */
function weekdayIndex(day: number): number {
  return mod(day + 3, 7);
}

// Civil-date conversions of the proleptic Gregorian calendar by whole 400-year eras (146,097
// days each), counting months from March so that the leap day ends the year (the published
// `days_from_civil` / `civil_from_days` algorithms of H. Hinnant, reimplemented).

/** Days since 1970-01-01 of the date `year`-`month`-`day` (month 1–12). */
function daysFromCivil(year: number, month: number, day: number): number {
  const y = month <= 2 ? year - 1 : year;
  const era = Math.floor(y / 400);
  const yearOfEra = y - era * 400; // 0–399
  const monthFromMarch = (month + 9) % 12; // March 0 … February 11
  const dayOfYear = Math.floor((153 * monthFromMarch + 2) / 5) + day - 1; // 0–365
  const dayOfEra =
    yearOfEra * 365 +
    Math.floor(yearOfEra / 4) -
    Math.floor(yearOfEra / 100) +
    dayOfYear; // 0–146096
  return era * 146097 + dayOfEra - 719468; // 719468: days from 0000-03-01 to 1970-01-01
}

/** The date of `days` since 1970-01-01. */
function civilFromDays(days: number): {
  year: number;
  month: number;
  day: number;
} {
  const z = days + 719468;
  const era = Math.floor(z / 146097);
  const dayOfEra = z - era * 146097; // 0–146096
  const yearOfEra = Math.floor(
    (dayOfEra -
      Math.floor(dayOfEra / 1460) +
      Math.floor(dayOfEra / 36524) -
      Math.floor(dayOfEra / 146096)) /
      365,
  ); // 0–399
  const dayOfYear =
    dayOfEra -
    (365 * yearOfEra + Math.floor(yearOfEra / 4) - Math.floor(yearOfEra / 100));
  const monthFromMarch = Math.floor((5 * dayOfYear + 2) / 153);
  const day = dayOfYear - Math.floor((153 * monthFromMarch + 2) / 5) + 1;
  const month = monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9;
  return { year: era * 400 + yearOfEra + (month <= 2 ? 1 : 0), month, day };
}
