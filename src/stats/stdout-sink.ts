import { systemClock, type Clock } from "../util/clock.js";
import { roundDurationMs, type StatsSink } from "./stats-sink.js";

/** Options of {@link createStdoutSink}. */
export interface StdoutSinkOptions {
  /**
   * Writes the lines of one flush (each with its newline), in one call.
   * @defaultValue writes to standard output
   */
  readonly write?: (lines: string) => void;
  /** Time of each line. @defaultValue the system clock */
  readonly clock?: Clock;
}

/** Durations of one timer delivered during the current flush. */
class TimerDurations {
  values = new Float64Array(64);
  length = 0;
  sampleRatio = 1;
  add(durationMs: number, sampleRatio: number): void {
    if (this.length === this.values.length) {
      const grown = new Float64Array(this.values.length * 2);
      grown.set(this.values);
      this.values = grown;
    }
    this.values[this.length++] = durationMs;
    this.sampleRatio = sampleRatio;
  }
}

/**
 * Nearest-rank percentile `p` (0 < p ≤ 100) of sorted `values`, which is not empty.
 */
function percentile(values: Float64Array, p: number): number {
  const rank = Math.max(1, Math.ceil((p / 100) * values.length));
  return values[rank - 1] ?? Number.NaN;
}

/**
 * Creates the sink used when no other is switched on (`USE_PUSHSTATS=false` alone): each flush
 * writes one JSON line per statistic to standard output, e.g.
 * `{"ts":1700000000.123,"type":"counter","name":"ratelimit.service.config_load_success","value":1}`.
 * `ts` is seconds since the Unix epoch; `value` is the increase since the previous flush for a
 * counter and the current value for a gauge. A timer gets one line per flush summarising the
 * durations recorded since the previous one, in milliseconds: `count`, `min`, `max`, `mean`,
 * `p50`, `p90`, `p99` (nearest rank), with `sample_ratio` when the flush loop kept a uniform
 * sample (the summary is then over the sample and `count` is the number recorded). The lines
 * of one flush are written together, in one write, at the end of the flush.
 *
 * (The reference's logging sink writes a line per recorded duration, to standard error; one
 * line per call costs a write per call, or a burst of thousands of writes at each flush that
 * stalls the event loop, so this sink summarises.)
 */
export function createStdoutSink(options: StdoutSinkOptions = {}): StatsSink {
  const write =
    options.write ??
    ((lines: string) => {
      process.stdout.write(lines);
    });
  const clock = options.clock ?? systemClock;
  let closed = false;
  let lines: string[] = [];
  // Timers with durations in this flush, in the order first seen.
  const timers = new Map<string, TimerDurations>();
  const line = (record: Record<string, unknown>): void => {
    lines.push(JSON.stringify(record) + "\n");
  };
  const endFlush = (): void => {
    if (closed) return;
    const ts = clock.nowMs() / 1000;
    const out = lines;
    lines = [];
    for (const [name, durations] of timers) {
      const n = durations.length;
      if (n === 0) continue;
      const sorted = durations.values.subarray(0, n).sort();
      let sum = 0;
      for (let i = 0; i < n; i++) sum += sorted[i] ?? 0;
      const ratio = durations.sampleRatio;
      const record: Record<string, unknown> = {
        ts,
        type: "timer",
        name,
        count: ratio < 1 ? Math.round(n / ratio) : n,
        min: roundDurationMs(sorted[0] ?? 0),
        max: roundDurationMs(sorted[n - 1] ?? 0),
        mean: roundDurationMs(sum / n),
        p50: roundDurationMs(percentile(sorted, 50)),
        p90: roundDurationMs(percentile(sorted, 90)),
        p99: roundDurationMs(percentile(sorted, 99)),
      };
      if (ratio < 1) record["sample_ratio"] = ratio;
      out.push(JSON.stringify(record) + "\n");
      durations.length = 0;
      durations.sampleRatio = 1;
    }
    if (out.length === 0) return;
    try {
      write(out.join(""));
    } catch {
      // Standard output is gone (closed pipe): statistics must never break the service.
    }
  };
  return {
    flushCounter: (name, delta) => {
      if (!closed)
        line({ ts: clock.nowMs() / 1000, type: "counter", name, value: delta });
    },
    flushGauge: (name, value) => {
      if (!closed)
        line({ ts: clock.nowMs() / 1000, type: "gauge", name, value });
    },
    flushTimer: (name, durationMs, sampleRatio) => {
      if (closed) return;
      let durations = timers.get(name);
      if (durations === undefined) {
        durations = new TimerDurations();
        timers.set(name, durations);
      }
      durations.add(durationMs, sampleRatio);
    },
    endFlush,
    close() {
      endFlush();
      closed = true;
      return Promise.resolve();
    },
  };
}
