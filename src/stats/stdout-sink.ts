import { systemClock, type Clock } from "../util/clock.js";
import { roundDurationMs, type StatsSink } from "./stats-sink.js";

/** Options of {@link createStdoutSink}. */
export interface StdoutSinkOptions {
  /** Writes one line (with its newline). @defaultValue writes to standard output */
  readonly write?: (line: string) => void;
  /** Time of each line. @defaultValue the system clock */
  readonly clock?: Clock;
}

/**
 * Creates the sink used when no other is switched on (`USE_PUSHSTATS=false` alone): each flush
 * writes one JSON line per statistic to standard output, as the spec says, e.g.
 * `{"ts":1700000000.123,"type":"counter","name":"ratelimit.service.config_load_success","value":1}`.
 * `ts` is seconds since the Unix epoch; `value` is the increase since the previous flush for a
 * counter, the current value for a gauge and one duration in milliseconds for a timer (which
 * also carries `sample_ratio` when durations were sampled). The reference's logging sink writes
 * similar lines to standard error.
 */
export function createStdoutSink(options: StdoutSinkOptions = {}): StatsSink {
  const write =
    options.write ??
    ((line: string) => {
      process.stdout.write(line);
    });
  const clock = options.clock ?? systemClock;
  let closed = false;
  const emit = (
    type: "counter" | "gauge" | "timer",
    name: string,
    value: number,
    sampleRatio?: number,
  ): void => {
    if (closed) return;
    const record: Record<string, unknown> = {
      ts: clock.nowMs() / 1000,
      type,
      name,
      value,
    };
    if (sampleRatio !== undefined && sampleRatio < 1)
      record["sample_ratio"] = sampleRatio;
    try {
      write(JSON.stringify(record) + "\n");
    } catch {
      // Standard output is gone (closed pipe): statistics must never break the service.
    }
  };
  return {
    flushCounter: (name, delta) => {
      emit("counter", name, delta);
    },
    flushGauge: (name, value) => {
      emit("gauge", name, value);
    },
    flushTimer: (name, durationMs, sampleRatio) => {
      emit("timer", name, roundDurationMs(durationMs), sampleRatio);
    },
    endFlush() {
      // Lines are written as they come.
    },
    close() {
      closed = true;
      return Promise.resolve();
    },
  };
}
