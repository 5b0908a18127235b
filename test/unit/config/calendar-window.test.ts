// Calendar windows (src/limiter/calendar-window.ts). Facts about particular days (a 23-hour
// Sunday in Berlin) are asserted as such, and every period is also compared with an
// independent computation: Temporal (`ZonedDateTime`, `PlainDate.toZonedDateTime`, which is
// V8's own implementation), run in a child Node process with `--harmony-temporal` when this
// one lacks it, plus wall-clock checks through a differently formatted `Intl` clock.
import { execFileSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import {
  CalendarWindow,
  CalendarWindowError,
  weekdays,
  type CalendarPeriod,
  type CalendarUnit,
  type Weekday,
} from "../../../src/config/calendar-window.js";
import { mulberry32 } from "../../helpers/seeded-random.js";

/** Unix seconds of a UTC date and time (month 1–12). */
function utc(
  year: number,
  month: number,
  day: number,
  hour = 0,
  minute = 0,
  second = 0,
): number {
  return Date.UTC(year, month - 1, day, hour, minute, second) / 1000;
}

const wallFormats = new Map<string, Intl.DateTimeFormat>();

/** The local wall clock at `t` as `YYYY-MM-DD hh:mm:ss` (Swedish format, ISO order). */
function wall(timeZone: string, t: number): string {
  let format = wallFormats.get(timeZone);
  if (format === undefined) {
    format = new Intl.DateTimeFormat("sv-SE", {
      timeZone,
      calendar: "gregory",
      numberingSystem: "latn",
      hourCycle: "h23",
      year: "numeric",
      month: "2-digit",
      day: "2-digit",
      hour: "2-digit",
      minute: "2-digit",
      second: "2-digit",
    });
    wallFormats.set(timeZone, format);
  }
  return format.format(t * 1000);
}

/** The first local date of a period, from its label. */
function firstDate(unit: CalendarUnit, label: string): string {
  if (unit === "day") return label;
  if (unit === "week") return label.slice(0, 10);
  if (unit === "month") return `${label}-01`;
  return `${label}-01-01`;
}

interface Query {
  readonly zone: string;
  readonly unit: CalendarUnit;
  /** 0 Monday … 6 Sunday. */
  readonly weekStart: number;
  readonly t: number;
}

/** [start, end, label] as Temporal computes them. */
type Reference = readonly [number, number, string];

// Runs in a child process: for each query, the local date at `t`, moved back to the first day
// of its period, and the start of that day and of the next period's first day.
const temporalScript = `
const queries = JSON.parse(require("node:fs").readFileSync(0, "utf8"));
const out = [];
for (const q of queries) {
  const now = Temporal.Instant.fromEpochMilliseconds(q.t * 1000).toZonedDateTimeISO(q.zone);
  let first = now.toPlainDate();
  let step;
  let label;
  if (q.unit === "day") { step = { days: 1 }; }
  else if (q.unit === "week") {
    first = first.subtract({ days: (first.dayOfWeek - 1 - q.weekStart + 7) % 7 });
    step = { weeks: 1 };
  } else if (q.unit === "month") { first = first.with({ day: 1 }); step = { months: 1 }; }
  else { first = first.with({ month: 1, day: 1 }); step = { years: 1 }; }
  const iso = first.toString();
  label = q.unit === "day" ? iso : q.unit === "week" ? iso + "/P1W" : q.unit === "month" ? iso.slice(0, 7) : iso.slice(0, 4);
  const start = first.toZonedDateTime(q.zone).epochMilliseconds / 1000;
  const end = first.add(step).toZonedDateTime(q.zone).epochMilliseconds / 1000;
  out.push([start, end, label]);
}
process.stdout.write(JSON.stringify(out));
`;

/** Periods computed by Temporal in a child Node process, one per query, same order. */
function temporalPeriods(queries: readonly Query[]): Reference[] {
  const flags =
    "Temporal" in globalThis ? [] : ["--harmony-temporal", "--no-warnings"];
  const text = execFileSync(
    process.execPath,
    [...flags, "-e", temporalScript],
    { input: JSON.stringify(queries), maxBuffer: 1 << 28, encoding: "utf8" },
  );
  return JSON.parse(text) as Reference[];
}

const windows = new Map<string, CalendarWindow>();

/** One window per zone, unit and week start, shared by the tests (building one costs ~0.1 ms). */
function windowOf(
  zone: string,
  unit: CalendarUnit,
  weekStart: Weekday = "monday",
): CalendarWindow {
  const key = `${zone} ${unit} ${weekStart}`;
  let window = windows.get(key);
  if (window === undefined) {
    window = new CalendarWindow({ unit, timeZone: zone, weekStart });
    windows.set(key, window);
  }
  return window;
}

const farAway = utc(1500, 6, 1);

/** The period at `t` computed afresh (the window's current period moved far away first). */
function freshPeriod(window: CalendarWindow, t: number): CalendarPeriod {
  window.period(farAway);
  return window.period(t);
}

function hours(period: CalendarPeriod): number {
  return (period.endSeconds - period.startSeconds) / 3600;
}

function days(period: CalendarPeriod): number {
  return (period.endSeconds - period.startSeconds) / 86400;
}

describe("CalendarWindow options", () => {
  it("resolves time zones and units case-insensitively, weeks starting on Monday by default", () => {
    const window = new CalendarWindow({
      unit: "WEEK",
      timeZone: "europe/berlin",
    });
    expect(window.unit).toBe("week");
    expect(window.timeZone).toBe("Europe/Berlin");
    expect(window.weekStart).toBe("monday");
    expect(
      new CalendarWindow({ unit: "day", timeZone: "utc", weekStart: "Sunday" })
        .weekStart,
    ).toBe("sunday");
  });

  it("refuses an unknown time zone, naming the field, suggesting a city's zone, saying how to list names", () => {
    let error: unknown;
    try {
      new CalendarWindow({ unit: "month", timeZone: "Berlin" });
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(CalendarWindowError);
    const calendarError = error as CalendarWindowError;
    expect(calendarError.code).toBe("RLS_CALENDAR_WINDOW");
    expect(calendarError.field).toBe("time_zone");
    expect(calendarError.message).toBe("invalid time zone 'Berlin'");
    expect(calendarError.hint).toContain("did you mean 'Europe/Berlin'?");
    expect(calendarError.hint).toContain("Intl.supportedValuesOf('timeZone')");
    expect(
      () => new CalendarWindow({ unit: "day", timeZone: "Mars/Olympus" }),
    ).toThrow("invalid time zone 'Mars/Olympus'");
    expect(() => new CalendarWindow({ unit: "day", timeZone: "" })).toThrow(
      "invalid time zone ''",
    );
  });

  it("refuses UTC offsets in place of a zone name", () => {
    for (const offset of ["+05:30", "-03", "0"]) {
      expect(
        () => new CalendarWindow({ unit: "day", timeZone: offset }),
      ).toThrow(`invalid time zone '${offset}': a UTC offset, not a zone name`);
    }
  });

  it("refuses units that are not calendar units and unknown week starts", () => {
    for (const unit of ["second", "minute", "hour", "fortnight", ""]) {
      expect(() => new CalendarWindow({ unit, timeZone: "UTC" })).toThrow(
        expect.objectContaining({
          field: "unit",
          message: `time_zone needs a calendar unit, not '${unit}'`,
        }),
      );
    }
    expect(
      () =>
        new CalendarWindow({ unit: "week", timeZone: "UTC", weekStart: "mon" }),
    ).toThrow(
      expect.objectContaining({
        field: "week_start",
        message: "invalid week start 'mon'",
        hint: "valid week starts: monday, tuesday, wednesday, thursday, friday, saturday, sunday",
      }),
    );
  });
});

describe("CalendarWindow.period", () => {
  it("includes the start and excludes the end, to the second", () => {
    const window = windowOf("Europe/Berlin", "month");
    const start = utc(2026, 2, 28, 23); // 2026-03-01 00:00 +01:00
    const end = utc(2026, 3, 31, 22); // 2026-04-01 00:00 +02:00
    expect(window.period(start - 1).label).toBe("2026-02");
    expect(window.period(start)).toMatchObject({
      startSeconds: start,
      endSeconds: end,
      label: "2026-03",
      cacheKeyPart: "2026-03@Europe/Berlin",
    });
    expect(window.period(end - 1).label).toBe("2026-03");
    expect(window.secondsUntilReset(end - 1)).toBe(1);
    expect(window.secondsUntilReset(start)).toBe(743 * 3600); // 31 days less the lost hour
    expect(window.period(end)).toMatchObject({
      startSeconds: end,
      label: "2026-04",
    });
  });

  it("answers from the current period without recomputing, in any order of instants", () => {
    const window = new CalendarWindow({ unit: "day", timeZone: "Asia/Tokyo" });
    const first = window.period(utc(2026, 11, 25, 3));
    expect(window.period(utc(2026, 11, 25, 14, 59, 59))).toBe(first);
    const next = window.period(utc(2026, 11, 25, 15)); // 2026-11-26 00:00 +09:00
    expect(next.label).toBe("2026-11-26");
    expect(window.period(utc(2026, 11, 25, 3)).label).toBe("2026-11-25");
    expect(window.period(utc(2026, 11, 27, 15)).label).toBe("2026-11-28");
    expect(Object.isFrozen(first)).toBe(true);
  });

  it("refuses instants that are not finite Unix seconds within the years 1000–9998", () => {
    const window = windowOf("UTC", "day");
    for (const bad of [
      NaN,
      Infinity,
      -Infinity,
      utc(999, 1, 1),
      utc(9999, 1, 1),
    ]) {
      expect(() => window.period(bad)).toThrow(RangeError);
    }
    expect(window.period(utc(2026, 1, 1)).label).toBe("2026-01-01");
  });

  // Facts from the IANA database as Node 24 ships it, each also compared with Temporal.
  const changes: readonly {
    readonly zone: string;
    readonly date: string;
    readonly hours: number;
    /** Wall clock at the day's first instant. */
    readonly startsAt: string;
    readonly why: string;
  }[] = [
    {
      zone: "Europe/Berlin",
      date: "2026-03-29",
      hours: 23,
      startsAt: "00:00:00",
      why: "CET → CEST at 02:00",
    },
    {
      zone: "Europe/Berlin",
      date: "2026-10-25",
      hours: 25,
      startsAt: "00:00:00",
      why: "CEST → CET at 03:00",
    },
    {
      zone: "America/New_York",
      date: "2026-03-08",
      hours: 23,
      startsAt: "00:00:00",
      why: "EST → EDT",
    },
    {
      zone: "America/New_York",
      date: "2026-11-01",
      hours: 25,
      startsAt: "00:00:00",
      why: "EDT → EST",
    },
    {
      zone: "America/Sao_Paulo",
      date: "2018-11-04",
      hours: 23,
      startsAt: "01:00:00",
      why: "midnight skipped",
    },
    {
      zone: "America/Sao_Paulo",
      date: "2018-02-17",
      hours: 25,
      startsAt: "00:00:00",
      why: "24:00 → 23:00",
    },
    {
      zone: "America/Santiago",
      date: "2026-09-06",
      hours: 23,
      startsAt: "01:00:00",
      why: "midnight skipped",
    },
    {
      zone: "America/Santiago",
      date: "2026-04-04",
      hours: 25,
      startsAt: "00:00:00",
      why: "24:00 → 23:00",
    },
    {
      zone: "Asia/Beirut",
      date: "2026-03-29",
      hours: 23,
      startsAt: "01:00:00",
      why: "midnight skipped",
    },
    {
      zone: "Asia/Beirut",
      date: "2026-10-24",
      hours: 25,
      startsAt: "00:00:00",
      why: "24:00 → 23:00",
    },
    {
      zone: "America/Havana",
      date: "2026-03-08",
      hours: 23,
      startsAt: "01:00:00",
      why: "midnight skipped",
    },
    {
      zone: "America/Havana",
      date: "2026-11-01",
      hours: 25,
      startsAt: "00:00:00",
      why: "01:00 → 00:00",
    },
    {
      zone: "Australia/Lord_Howe",
      date: "2026-10-04",
      hours: 23.5,
      startsAt: "00:00:00",
      why: "30-minute DST starts",
    },
    {
      zone: "Australia/Lord_Howe",
      date: "2026-04-05",
      hours: 24.5,
      startsAt: "00:00:00",
      why: "30-minute DST ends",
    },
    {
      zone: "Asia/Kathmandu",
      date: "1986-01-01",
      hours: 23.75,
      startsAt: "00:15:00",
      why: "+05:30 → +05:45 at midnight",
    },
    {
      zone: "Asia/Kolkata",
      date: "2026-11-25",
      hours: 24,
      startsAt: "00:00:00",
      why: "+05:30, no DST",
    },
    {
      zone: "Pacific/Chatham",
      date: "2026-09-27",
      hours: 23,
      startsAt: "00:00:00",
      why: "+12:45 → +13:45",
    },
    {
      zone: "Antarctica/Troll",
      date: "2026-03-29",
      hours: 22,
      startsAt: "00:00:00",
      why: "two-hour DST",
    },
    {
      zone: "Asia/Dhaka",
      date: "2009-12-31",
      hours: 25,
      startsAt: "00:00:00",
      why: "23:59 → 23:00",
    },
  ];

  it("gives DST and offset-change days their real length and first instant in 12 zones", () => {
    const queries: Query[] = [];
    const got: CalendarPeriod[] = [];
    for (const change of changes) {
      const [year, month, day] = change.date.split("-").map(Number) as [
        number,
        number,
        number,
      ];
      // Local noon of the day is within it whatever the offset.
      const noon =
        utc(year, month, day, 12) -
        offsetNear(change.zone, utc(year, month, day, 12));
      const period = freshPeriod(windowOf(change.zone, "day"), noon);
      got.push(period);
      queries.push({ zone: change.zone, unit: "day", weekStart: 0, t: noon });
      expect(period.label, change.why).toBe(change.date);
      expect(
        hours(period),
        `${change.zone} ${change.date}: ${change.why}`,
      ).toBe(change.hours);
      expect(wall(change.zone, period.startSeconds)).toBe(
        `${change.date} ${change.startsAt}`,
      );
      expect(
        windowOf(change.zone, "day").secondsUntilReset(period.startSeconds),
      ).toBe(change.hours * 3600);
    }
    const reference = temporalPeriods(queries);
    got.forEach((period, i) => {
      expect([period.startSeconds, period.endSeconds, period.label]).toEqual(
        reference[i],
      );
    });
  });

  it("skips local days that never happen (Pacific/Apia 2011-12-30, Pacific/Kiritimati 1994-12-31)", () => {
    const apia = windowOf("Pacific/Apia", "day");
    const before = freshPeriod(apia, utc(2011, 12, 30, 9, 59, 59)); // 2011-12-29 23:59:59 −10:00
    expect(before.label).toBe("2011-12-29");
    const after = apia.period(before.endSeconds);
    expect(after.label).toBe("2011-12-31");
    expect(wall("Pacific/Apia", after.startSeconds)).toBe(
      "2011-12-31 00:00:00",
    );
    expect(after.startSeconds).toBe(before.endSeconds);
    const month = freshPeriod(
      windowOf("Pacific/Apia", "month"),
      before.endSeconds,
    );
    expect(days(month)).toBe(30); // December 2011 lost a day
    const kiritimati = freshPeriod(
      windowOf("Pacific/Kiritimati", "day"),
      utc(1994, 12, 31, 9),
    );
    expect(kiritimati.label).toBe("1994-12-30");
    expect(
      windowOf("Pacific/Kiritimati", "day").period(kiritimati.endSeconds).label,
    ).toBe("1995-01-01");
    // 1994 began at −10:00 and ended at +14:00, a day early.
    expect(
      days(
        freshPeriod(windowOf("Pacific/Kiritimati", "year"), utc(1994, 6, 1)),
      ),
    ).toBe(364);
  });

  it("has months of 28, 29, 30 and 31 days, and leap years by the Gregorian rule", () => {
    const month = windowOf("UTC", "month");
    const monthDays = (year: number, m: number): number =>
      days(freshPeriod(month, utc(year, m, 15)));
    expect(monthDays(2026, 2)).toBe(28);
    expect(monthDays(2028, 2)).toBe(29);
    expect(monthDays(2100, 2)).toBe(28); // divisible by 100, not by 400
    expect(monthDays(2000, 2)).toBe(29); // divisible by 400
    expect(monthDays(2026, 4)).toBe(30);
    expect(monthDays(2026, 1)).toBe(31);
    expect(monthDays(2026, 12)).toBe(31);
    const year = windowOf("UTC", "year");
    expect(days(freshPeriod(year, utc(2026, 6, 1)))).toBe(365);
    expect(days(freshPeriod(year, utc(2028, 6, 1)))).toBe(366);
    expect(days(freshPeriod(year, utc(2100, 6, 1)))).toBe(365);
    expect(days(freshPeriod(year, utc(2000, 6, 1)))).toBe(366);
    // In a DST zone a month is its local days, give or take the hour moved.
    expect(
      hours(freshPeriod(windowOf("Europe/Berlin", "month"), utc(2028, 2, 10))),
    ).toBe(29 * 24);
    expect(
      hours(freshPeriod(windowOf("Europe/Berlin", "month"), utc(2026, 10, 10))),
    ).toBe(31 * 24 + 1);
    expect(
      hours(freshPeriod(windowOf("Europe/Berlin", "year"), utc(2028, 6, 1))),
    ).toBe(366 * 24);
  });

  it("turns the year at local midnight on January 1st", () => {
    const utcYear = windowOf("UTC", "year");
    expect(freshPeriod(utcYear, utc(2026, 12, 31, 23, 59, 59))).toMatchObject({
      label: "2026",
      endSeconds: utc(2027, 1, 1),
    });
    expect(utcYear.period(utc(2027, 1, 1)).label).toBe("2027");
    const tokyo = windowOf("Asia/Tokyo", "year");
    expect(freshPeriod(tokyo, utc(2026, 12, 31, 14, 59, 59)).label).toBe(
      "2026",
    );
    expect(tokyo.period(utc(2026, 12, 31, 15))).toMatchObject({
      label: "2027",
      startSeconds: utc(2026, 12, 31, 15),
    });
    const honolulu = windowOf("Pacific/Honolulu", "year");
    expect(freshPeriod(honolulu, utc(2027, 1, 1, 9, 59, 59)).label).toBe(
      "2026",
    );
    expect(honolulu.period(utc(2027, 1, 1, 10)).label).toBe("2027");
    // A week runs across the new year under the label of its first day.
    const week = freshPeriod(windowOf("UTC", "week"), utc(2027, 1, 1));
    expect(week).toMatchObject({
      label: "2026-12-28/P1W",
      startSeconds: utc(2026, 12, 28),
      endSeconds: utc(2027, 1, 4),
    });
  });

  it("starts weeks on each configured day, labelled by their first local date", () => {
    // Wednesday 2026-11-25, 10:00 in New York.
    const now = utc(2026, 11, 25, 15);
    const expected: Record<Weekday, string> = {
      monday: "2026-11-23",
      tuesday: "2026-11-24",
      wednesday: "2026-11-25",
      thursday: "2026-11-19",
      friday: "2026-11-20",
      saturday: "2026-11-21",
      sunday: "2026-11-22",
    };
    const queries: Query[] = [];
    const got: CalendarPeriod[] = [];
    weekdays.forEach((weekStart, index) => {
      const period = freshPeriod(
        windowOf("America/New_York", "week", weekStart),
        now,
      );
      expect(period.label).toBe(`${expected[weekStart]}/P1W`);
      expect(wall("America/New_York", period.startSeconds)).toBe(
        `${expected[weekStart]} 00:00:00`,
      );
      expect(new Date(`${expected[weekStart]}T00:00:00Z`).getUTCDay()).toBe(
        (index + 1) % 7,
      );
      expect(period.startSeconds).toBeLessThanOrEqual(now);
      expect(period.endSeconds).toBeGreaterThan(now);
      queries.push({
        zone: "America/New_York",
        unit: "week",
        weekStart: index,
        t: now,
      });
      got.push(period);
    });
    // The week holding 2026-11-01 (EDT → EST) is an hour longer.
    expect(
      hours(
        freshPeriod(
          windowOf("America/New_York", "week", "sunday"),
          utc(2026, 11, 2),
        ),
      ),
    ).toBe(7 * 24 + 1);
    const reference = temporalPeriods(queries);
    got.forEach((period, i) => {
      expect([period.startSeconds, period.endSeconds, period.label]).toEqual(
        reference[i],
      );
    });
  });
});

/** The zone's offset (seconds) at `t`, from the test's own wall clock. */
function offsetNear(zone: string, t: number): number {
  const text = wall(zone, t);
  const local = Date.parse(`${text.replace(" ", "T")}Z`) / 1000;
  return local - t;
}

// Zones with DST both ways, midnight changes, half- and quarter-hour offsets, 30-minute DST,
// two-hour DST, date-line jumps and several changes a year (Casablanca's Ramadan).
const propertyZones = [
  "UTC",
  "Europe/Berlin",
  "Europe/London",
  "Europe/Moscow",
  "America/New_York",
  "America/St_Johns",
  "America/Sao_Paulo",
  "America/Santiago",
  "America/Havana",
  "America/Asuncion",
  "America/Nuuk",
  "Asia/Beirut",
  "Asia/Gaza",
  "Asia/Tehran",
  "Asia/Kolkata",
  "Asia/Kathmandu",
  "Asia/Dhaka",
  "Australia/Lord_Howe",
  "Pacific/Chatham",
  "Pacific/Apia",
  "Pacific/Kiritimati",
  "Africa/Casablanca",
  "Antarctica/Troll",
] as const;

const units: readonly CalendarUnit[] = ["day", "week", "month", "year"];

describe("CalendarWindow properties", () => {
  it("tiles time in every zone and unit, agreeing with Temporal at random instants 1970–2100", () => {
    const random = mulberry32(0x23c41);
    const end2100 = utc(2100, 1, 1);
    const samples: { query: Query; period: CalendarPeriod }[] = [];
    for (const zone of propertyZones) {
      for (const unit of units) {
        const weekStart = Math.floor(random() * 7);
        const window = windowOf(zone, unit, weekdays[weekStart]);
        const instants = Array.from({ length: 40 }, () =>
          Math.floor(random() * end2100),
        ).sort((a, b) => a - b);
        let last: CalendarPeriod | undefined;
        for (const t of instants) {
          const period = freshPeriod(window, t);
          const where = `${zone} ${unit} at ${t} (${wall(zone, t)})`;
          expect(period.startSeconds, where).toBeLessThanOrEqual(t);
          expect(period.endSeconds, where).toBeGreaterThan(t);
          expect(window.secondsUntilReset(t), where).toBe(
            period.endSeconds - t,
          );
          expectFirstInstant(zone, unit, period, where);
          expect(freshPeriod(window, period.startSeconds), where).toEqual(
            period,
          );
          expect(freshPeriod(window, period.endSeconds - 1), where).toEqual(
            period,
          );
          const next = freshPeriod(window, period.endSeconds);
          expect(next.startSeconds, where).toBe(period.endSeconds);
          expect(next.label > period.label, where).toBe(true);
          if (last !== undefined) {
            if (last.label === period.label)
              expect(last, where).toEqual(period);
            else expect(last.label < period.label, where).toBe(true);
          }
          last = period;
          samples.push({ query: { zone, unit, weekStart, t }, period });
        }
      }
    }
    const reference = temporalPeriods(samples.map((sample) => sample.query));
    samples.forEach(({ query, period }, i) => {
      expect(
        [period.startSeconds, period.endSeconds, period.label],
        `${query.zone} ${query.unit} at ${query.t}`,
      ).toEqual(reference[i]);
    });
  }, 120_000);

  // Temporal in Node 24 (behind --harmony-temporal) takes about 0.6 ms a query, so the chain is
  // compared with it where the maths is hard (every period whose length or first wall-clock
  // time is not the nominal one) and at every 40th period; every period gets the other checks.
  it("follows a clock moving forward period by period, through every offset change of the years spanned", () => {
    const spans: readonly { unit: CalendarUnit; from: number; to: number }[] = [
      { unit: "day", from: utc(1985, 12, 1), to: utc(1986, 2, 1) },
      { unit: "day", from: utc(1994, 12, 1), to: utc(1995, 2, 1) },
      { unit: "day", from: utc(2008, 1, 1), to: utc(2012, 1, 1) },
      { unit: "day", from: utc(2024, 1, 1), to: utc(2028, 1, 1) },
      { unit: "week", from: utc(2000, 1, 1), to: utc(2030, 1, 1) },
      { unit: "month", from: utc(1970, 1, 2), to: utc(2100, 1, 1) },
      { unit: "year", from: utc(1970, 1, 2), to: utc(2100, 1, 1) },
    ];
    const queries: Query[] = [];
    const got: CalendarPeriod[] = [];
    let periods = 0;
    let irregular = 0;
    for (const zone of propertyZones) {
      spans.forEach(({ unit, from, to }, spanIndex) => {
        const weekStart = (spanIndex + zone.length) % 7;
        const window = windowOf(zone, unit, weekdays[weekStart]);
        let period = freshPeriod(window, from);
        while (period.startSeconds < to) {
          periods++;
          const where = `${zone} ${unit} ${period.label}`;
          const regular =
            wall(zone, period.startSeconds) ===
              `${firstDate(unit, period.label)} 00:00:00` &&
            period.endSeconds - period.startSeconds ===
              nominalSeconds(unit, period.label);
          if (!regular) {
            irregular++;
            expectFirstInstant(zone, unit, period, where);
          }
          if (!regular || periods % 40 === 0) {
            queries.push({ zone, unit, weekStart, t: period.startSeconds });
            got.push(period);
          }
          const next = window.period(period.endSeconds);
          if (next.startSeconds !== period.endSeconds)
            expect(next.startSeconds, `after ${where}`).toBe(period.endSeconds);
          if (!(next.label > period.label))
            expect(next.label, `after ${where}`).toBe("a later label");
          period = next;
        }
      });
    }
    expect(periods).toBeGreaterThan(50_000);
    expect(irregular).toBeGreaterThan(3_000);
    const reference = temporalPeriods(queries);
    got.forEach((period, i) => {
      const query = queries[i]!;
      expect(
        [period.startSeconds, period.endSeconds, period.label],
        `${query.zone} ${query.unit} ${period.label}`,
      ).toEqual(reference[i]);
    });
  }, 120_000);
});

/**
 * Checks that a period starts at the first instant of its first local day: the wall clock
 * reads 00:00:00 there, or that time was skipped (it read earlier a second before, later now).
 */
function expectFirstInstant(
  zone: string,
  unit: CalendarUnit,
  period: CalendarPeriod,
  where: string,
): void {
  const midnight = `${firstDate(unit, period.label)} 00:00:00`;
  const startWall = wall(zone, period.startSeconds);
  if (startWall === midnight) return;
  expect(wall(zone, period.startSeconds - 1) < midnight, where).toBe(true);
  expect(startWall > midnight, where).toBe(true);
}

/** Seconds in a period of `unit` labelled `label` when no offset changes within it. */
function nominalSeconds(unit: CalendarUnit, label: string): number {
  if (unit === "day") return 86400;
  if (unit === "week") return 7 * 86400;
  const [year, month] = label.split("-").map(Number) as [number, number?];
  if (month !== undefined)
    return (Date.UTC(year, month, 1) - Date.UTC(year, month - 1, 1)) / 1000;
  return (Date.UTC(year + 1, 0, 1) - Date.UTC(year, 0, 1)) / 1000;
}
