import type { TimerListener } from "./stats-store.js";

/**
 * Where flushed statistics go: a statsd server, a tagged (DogStatsD-style) statsd server, the
 * Prometheus registry, standard output, or nowhere. Same role as the sink interface of the
 * reference's stats library (flush counter / gauge / timer).
 *
 * Names are full names with tags serialized as `.__<key>=<value>` suffixes
 * (see `serializeTags` in `names.ts`); a sink that supports tags splits them off.
 *
 * No method may throw: a sink that cannot deliver logs it (at most once per flush interval) and
 * drops the values.
 */
export interface StatsSink {
  /** Delivers a counter's increase since the previous flush; called only when > 0. */
  flushCounter(name: string, delta: number): void;
  /** Delivers a gauge's current value; called on every flush. */
  flushGauge(name: string, value: number): void;
  /**
   * Delivers one recorded duration in milliseconds, at flush time, for sinks without
   * {@link StatsSink.timerListener}.
   *
   * @param sampleRatio - share of the recorded durations this flush delivers (0 < r ≤ 1); below
   * 1 when the flush loop kept a uniform sample because more were recorded than it keeps
   */
  flushTimer(name: string, durationMs: number, sampleRatio: number): void;
  /**
   * Optional: returns a listener that receives the timer's durations at record time, for sinks
   * that keep distributions themselves (Prometheus histograms). Called once per timer; the
   * listener runs on the request path, so it must be cheap.
   */
  timerListener?(name: string): TimerListener | undefined;
  /** Called after each flush has delivered every value, e.g. to send the buffered lines. */
  endFlush(): void;
  /** Delivers what is buffered and releases sockets and listeners; idempotent. */
  close(): Promise<void>;
}

/**
 * Returns a duration for a text line: integers as they are, anything else rounded to 6 decimals
 * (the reference's statsd line format).
 */
export function roundDurationMs(durationMs: number): number {
  return Number.isInteger(durationMs)
    ? durationMs
    : Math.round(durationMs * 1e6) / 1e6;
}
