import { withExtraTags, type StatTag } from "./names.js";
import type { StatsSink } from "./stats-sink.js";
import type { StatsStore, Timer, TimerListener } from "./stats-store.js";

/** Runs a task every `intervalMs`; returns a function that stops it. */
export type Scheduler = (task: () => void, intervalMs: number) => () => void;

/** The real scheduler: `setInterval`, unref'd so it never keeps the process alive. */
export const intervalScheduler: Scheduler = (task, intervalMs) => {
  const handle = setInterval(task, intervalMs);
  handle.unref();
  return () => {
    clearInterval(handle);
  };
};

/** Options of {@link startStatsFlusher}. */
export interface StatsFlusherOptions {
  /** Where the statistics are read. */
  readonly store: StatsStore;
  /** Where they are delivered. */
  readonly sink: StatsSink;
  /** Milliseconds between flushes, > 0 (`STATS_FLUSH_INTERVAL`). @defaultValue 10000 */
  readonly intervalMs?: number;
  /** Tags added to every statistic (`EXTRA_TAGS`). @defaultValue none */
  readonly extraTags?: readonly StatTag[];
  /**
   * Most durations one timer keeps between two flushes, > 0. Below it every duration is
   * delivered; above it a uniform sample of this size is (reservoir sampling) and the sink is
   * told the sampled share. Bounds memory and flush size whatever the request rate.
   *
   * @defaultValue 10000
   */
  readonly maxTimerSamplesPerFlush?: number;
  /** Source of randomness for the timer sample, in [0, 1). @defaultValue Math.random */
  readonly random?: () => number;
  /** Runs the periodic flush. @defaultValue {@link intervalScheduler} */
  readonly scheduler?: Scheduler;
  /** Told about an unexpected error during a flush (a sink bug); the loop goes on. */
  readonly onError?: (err: unknown) => void;
}

/** Defaults of {@link StatsFlusherOptions}. */
export const statsFlusherDefaults = {
  intervalMs: 10_000, // ms (10s)
  maxTimerSamplesPerFlush: 10_000, // durations per timer per flush
} as const;

/** A running flush loop. */
export interface StatsFlusher {
  /** Delivers everything now (counters as deltas, gauges, timer durations), then `endFlush`. */
  flush(): void;
  /** Stops the loop, flushes once more and closes the sink; idempotent. */
  close(): Promise<void>;
}

/** Uniform sample of at most `capacity` durations (Vitter's algorithm R). */
class DurationSample {
  private readonly values: number[] = [];
  private seen = 0;
  private readonly capacity: number;
  private readonly random: () => number;
  constructor(capacity: number, random: () => number) {
    this.capacity = capacity;
    this.random = random;
  }
  readonly add: TimerListener = (durationMs) => {
    const seen = ++this.seen;
    if (seen <= this.capacity) {
      this.values[seen - 1] = durationMs;
    } else {
      const slot = Math.floor(this.random() * seen);
      if (slot < this.capacity) this.values[slot] = durationMs;
    }
  };
  /** Hands every kept duration to `deliver` with the sampled share, then starts over. */
  drain(deliver: (durationMs: number, sampleRatio: number) => void): void {
    const kept = Math.min(this.seen, this.capacity);
    const ratio = this.seen > this.capacity ? this.capacity / this.seen : 1;
    this.seen = 0;
    for (let i = 0; i < kept; i++) deliver(this.values[i] ?? 0, ratio);
  }
}

/**
 * Starts the flush loop of one sink: every `intervalMs` it delivers each counter's increase
 * since the previous flush (only when non-zero), every gauge, and the durations timers
 * recorded, then calls `endFlush`. Same cadence and delta semantics as the reference's stats
 * library (docs/reference-parity.md#stats-sinks), except that timers are delivered at flush time
 * instead of when recorded (unless the sink takes them at record time via `timerListener`), which
 * keeps I/O off the request path.
 *
 * @throws RangeError when `intervalMs` or `maxTimerSamplesPerFlush` is not > 0
 */
export function startStatsFlusher(options: StatsFlusherOptions): StatsFlusher {
  const { store, sink } = options;
  const intervalMs = options.intervalMs ?? statsFlusherDefaults.intervalMs;
  const maxSamples =
    options.maxTimerSamplesPerFlush ??
    statsFlusherDefaults.maxTimerSamplesPerFlush;
  if (!(intervalMs > 0))
    throw new RangeError(`invalid intervalMs ${intervalMs}: expected > 0`);
  if (!(Number.isInteger(maxSamples) && maxSamples > 0)) {
    throw new RangeError(
      `invalid maxTimerSamplesPerFlush ${maxSamples}: expected an integer > 0`,
    );
  }
  const extraTags = options.extraTags ?? [];
  const random = options.random ?? Math.random;
  const onError = options.onError ?? (() => undefined);

  // Full names (with EXTRA_TAGS serialized in) are built once per handle.
  const fullNames = new Map<string, string>();
  const fullName = (name: string): string => {
    let full = fullNames.get(name);
    if (full === undefined) {
      full = withExtraTags(name, extraTags);
      fullNames.set(name, full);
    }
    return full;
  };
  const flushedCounts = new Map<string, number>();
  const samples = new Map<string, DurationSample>();

  store.setTimerListenerFactory((timer: Timer) => {
    if (sink.timerListener !== undefined)
      return sink.timerListener(fullName(timer.name));
    let sample = samples.get(timer.name);
    if (sample === undefined) {
      sample = new DurationSample(maxSamples, random);
      samples.set(timer.name, sample);
    }
    return sample.add;
  });

  function flush(): void {
    try {
      const { counters, gauges } = store.snapshot();
      for (const counter of counters) {
        const total = counter.value();
        const delta = total - (flushedCounts.get(counter.name) ?? 0);
        if (delta > 0) {
          flushedCounts.set(counter.name, total);
          sink.flushCounter(fullName(counter.name), delta);
        }
      }
      for (const gauge of gauges)
        sink.flushGauge(fullName(gauge.name), gauge.value());
      for (const [name, sample] of samples) {
        const full = fullName(name);
        sample.drain((durationMs, ratio) => {
          sink.flushTimer(full, durationMs, ratio);
        });
      }
      sink.endFlush();
    } catch (err) {
      onError(err);
    }
  }

  const stop = (options.scheduler ?? intervalScheduler)(flush, intervalMs);
  let closing: Promise<void> | undefined;
  return {
    flush,
    close() {
      closing ??= (async () => {
        stop();
        flush();
        store.setTimerListenerFactory(undefined);
        await sink.close();
      })();
      return closing;
    },
  };
}
