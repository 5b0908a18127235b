/**
 * Time values of the Explain answer that the protobuf runtime does not build: a Duration from
 * microseconds (token buckets count in µs, `limiter/gcra.ts`), and an instant as RFC 3339 with
 * the UTC offset an IANA zone has then (calendar periods, shown as a clock there reads them).
 * Explain only: never on the decision path.
 */
import { create } from "@bufbuild/protobuf";
import {
  DurationSchema,
  TimestampSchema,
  type Duration,
  type Timestamp,
} from "@bufbuild/protobuf/wkt";

/**
 * Returns a Duration of `us` microseconds (≥ 0, an integer).
 *
 * @param us - microseconds; negative values are taken as 0
 */
export function durationFromUs(us: number): Duration {
  const whole = Math.max(0, Math.round(us));
  const seconds = Math.floor(whole / 1_000_000);
  return create(DurationSchema, {
    seconds: BigInt(seconds),
    nanos: (whole - seconds * 1_000_000) * 1000,
  });
}

/** One formatter per zone: building one costs far more than formatting with it. */
const formatters = new Map<string, Intl.DateTimeFormat>();

function formatterFor(timeZone: string): Intl.DateTimeFormat {
  let formatter = formatters.get(timeZone);
  if (formatter === undefined) {
    formatter = new Intl.DateTimeFormat("en-US", {
      timeZone,
      hourCycle: "h23",
      year: "numeric",
      month: "2-digit",
      day: "2-digit",
      hour: "2-digit",
      minute: "2-digit",
      second: "2-digit",
    });
    formatters.set(timeZone, formatter);
  }
  return formatter;
}

/**
 * Returns the instant `seconds` as RFC 3339 in the local time of `timeZone`, with the zone's
 * UTC offset then: `2026-12-01T00:00:00+01:00`; `Z` for a zero offset. An offset that is not a
 * whole number of minutes (local mean time before 1900 in some zones), which RFC 3339 cannot
 * write, gives the instant in UTC instead.
 *
 * @param seconds - whole seconds since the Unix epoch, years 1000 to 9999
 * @param timeZone - an IANA zone name that `Intl` knows
 */
export function localRfc3339(seconds: number, timeZone: string): string {
  const parts: Record<string, string> = {};
  for (const part of formatterFor(timeZone).formatToParts(seconds * 1000))
    parts[part.type] = part.value;
  const year = Number(parts["year"]);
  const month = Number(parts["month"]);
  const day = Number(parts["day"]);
  const hour = Number(parts["hour"]);
  const minute = Number(parts["minute"]);
  const second = Number(parts["second"]);
  // The wall clock read as if it were UTC, minus the instant: the zone's offset.
  const wall = new Date(0);
  wall.setUTCFullYear(year, month - 1, day);
  wall.setUTCHours(hour, minute, second, 0);
  const offsetSeconds = wall.getTime() / 1000 - seconds;
  if (offsetSeconds % 60 !== 0)
    return new Date(seconds * 1000).toISOString().replace(".000Z", "Z");
  const pad = (n: number, width = 2): string => String(n).padStart(width, "0");
  const local = `${pad(year, 4)}-${pad(month)}-${pad(day)}T${pad(hour)}:${pad(minute)}:${pad(second)}`;
  if (offsetSeconds === 0) return `${local}Z`;
  const sign = offsetSeconds < 0 ? "-" : "+";
  const minutes = Math.abs(offsetSeconds) / 60;
  return `${local}${sign}${pad(Math.floor(minutes / 60))}:${pad(minutes % 60)}`;
}

/**
 * Returns a Timestamp of `us` microseconds since the Unix epoch (an integer; token buckets'
 * TAT, `limiter/gcra.ts`).
 */
export function timestampFromUs(us: number): Timestamp {
  const seconds = Math.floor(us / 1_000_000);
  return create(TimestampSchema, {
    seconds: BigInt(seconds),
    nanos: Math.round(us - seconds * 1_000_000) * 1000,
  });
}
