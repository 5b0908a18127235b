import type { Clock } from "../../src/util/clock.js";

/**
 * The system clock shifted forward so that, when this is called, it reads exactly 1 s into a
 * fresh fixed window of `windowSeconds` (aligned to the Unix epoch, as the service's fixed
 * windows are). Time still flows, so timers, TTLs and expiries behave as on the system clock;
 * only the window edges move: for the next `windowSeconds - 1` s of real time, every request
 * of an in-process service built with it falls in one window of that length (and of every
 * shorter length that divides it). For tests that count several hits against a real-time
 * service; a test that needs exact times uses `FakeClock` (fake-clock.ts) instead.
 *
 * The shift is less than `windowSeconds + 1` s: do not use it where the test compares the
 * service's times with its own `Date.now()` (a CLI printing "in 1h", say).
 *
 * @param windowSeconds - the window to align to, in seconds (60: a minute, 3600: an hour)
 */
export function windowAlignedClock(windowSeconds = 60): Clock {
  const windowMs = windowSeconds * 1000;
  const offsetMs = windowMs + 1000 - (Date.now() % windowMs);
  return {
    nowMs: () => Date.now() + offsetMs,
    nowSeconds: () => Math.floor((Date.now() + offsetMs) / 1000),
  };
}
