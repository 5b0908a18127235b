// The algorithm of a rate limit as one tagged value, decided at config load (issue 32 item 2).
import type { CalendarWindow } from "./calendar-window.js";
import type { GcraParams } from "./token-bucket.js";

/**
 * Where a window's bounds come from: multiples of `seconds` since the Unix epoch (the
 * reference's windows, and `unit_multiplier`), or a calendar period (`time_zone:`).
 */
export type Window =
  | { readonly kind: "epoch"; readonly seconds: number }
  | { readonly kind: "calendar"; readonly period: CalendarWindow };

/** `algorithm: fixed_window` (the default, the reference's): one counter per window. */
export interface FixedWindow {
  readonly kind: "fixed_window";
  readonly window: Window;
}

/** `algorithm: sliding_window`: the weighted sum of the previous and the current window's counters. */
export interface SlidingWindow {
  readonly kind: "sliding_window";
  readonly window: Window;
}

/** `algorithm: token_bucket`: GCRA over one stored TAT per cache key. */
export interface TokenBucket {
  readonly kind: "token_bucket";
  readonly bucket: GcraParams;
}

/** A rate limit's algorithm, switched on by its `kind`. */
export type Algorithm = FixedWindow | SlidingWindow | TokenBucket;

/**
 * Builds the frozen algorithm of a limit from what config load decided: a token bucket when
 * `bucket` is given, else a sliding or fixed window whose bounds are the calendar period when
 * `calendar` is given, else the epoch-aligned window of `windowSeconds`.
 */
export function compileAlgorithm(
  windowSeconds: number,
  sliding: boolean,
  bucket: GcraParams | undefined,
  calendar: CalendarWindow | undefined,
): Algorithm {
  if (bucket !== undefined)
    return Object.freeze({ kind: "token_bucket", bucket });
  if (!sliding && calendar === undefined)
    return fixedEpochWindow(windowSeconds);
  const window: Window = Object.freeze(
    calendar === undefined
      ? { kind: "epoch", seconds: windowSeconds }
      : { kind: "calendar", period: calendar },
  );
  return Object.freeze(
    sliding
      ? { kind: "sliding_window", window }
      : { kind: "fixed_window", window },
  );
}

const fixedEpochWindows = new Map<number, FixedWindow>();

/**
 * The frozen fixed epoch-aligned window of `seconds`, one shared value per length, for config
 * rules and for a request's own limit (`RateLimitDescriptor.limit`), which so gets its algorithm
 * without an allocation per request.
 */
export function fixedEpochWindow(seconds: number): FixedWindow {
  let algorithm = fixedEpochWindows.get(seconds);
  if (algorithm === undefined) {
    algorithm = Object.freeze({
      kind: "fixed_window",
      window: Object.freeze({ kind: "epoch", seconds }),
    });
    fixedEpochWindows.set(seconds, algorithm);
  }
  return algorithm;
}

/**
 * The calendar period of a window algorithm whose bounds are one (`time_zone:`), else
 * undefined (epoch-aligned windows, token buckets). For the code off the hot path that
 * describes a limit (dump, Explain, the console); the decision switches on the kinds.
 */
export function calendarOf(algorithm: Algorithm): CalendarWindow | undefined {
  return algorithm.kind !== "token_bucket" &&
    algorithm.window.kind === "calendar"
    ? algorithm.window.period
    : undefined;
}

/** The GCRA parameters of a token bucket, else undefined (window algorithms). */
export function bucketOf(algorithm: Algorithm): GcraParams | undefined {
  return algorithm.kind === "token_bucket" ? algorithm.bucket : undefined;
}

/**
 * Whether the algorithm is the reference's: a fixed window whose bounds are epoch-aligned
 * multiples of its length (whatever `unit_multiplier`).
 */
export function isFixedEpochWindow(algorithm: Algorithm): boolean {
  return algorithm.kind === "fixed_window" && algorithm.window.kind === "epoch";
}
