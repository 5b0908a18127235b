import { monitorEventLoopDelay, PerformanceObserver } from "node:perf_hooks";
import type { StatsStore } from "./stats-store.js";

/**
 * Names of the process statistics {@link startRuntimeStats} keeps (docs/statistics.md): what
 * the event loop and the garbage collector cost the tail latency of every call.
 */
export const runtimeStatNames = Object.freeze({
  /** Gauges, ms: event-loop delay percentiles and maximum over the last interval. */
  eventLoopDelayP50: "ratelimit.runtime.event_loop_delay_p50_ms",
  eventLoopDelayP99: "ratelimit.runtime.event_loop_delay_p99_ms",
  eventLoopDelayMax: "ratelimit.runtime.event_loop_delay_max_ms",
  /** Timer, ms: one value per garbage-collection pause. */
  gcPause: "ratelimit.runtime.gc_pause",
  /** Gauges, bytes: V8 heap in use and process resident set, sampled each interval. */
  heapUsed: "ratelimit.runtime.heap_used_bytes",
  rss: "ratelimit.runtime.rss_bytes",
});

/** Options of {@link startRuntimeStats}. */
export interface RuntimeStatsOptions {
  readonly store: StatsStore;
  /**
   * How often the gauges are updated and the event-loop histogram restarted, in
   * milliseconds; the statistics flush interval, so each flush reports the last one.
   * @defaultValue 10000
   */
  readonly intervalMs?: number;
  /** Sampling resolution of the event-loop delay, in milliseconds. @defaultValue 10 */
  readonly resolutionMs?: number;
}

/** Handle of {@link startRuntimeStats}. */
export interface RuntimeStats {
  /** Updates the gauges now (also done every interval). */
  sample(): void;
  /** Stops the observer, the histogram and the timer. Idempotent. */
  close(): void;
}

/**
 * Keeps statistics of this process's runtime, off the request path: event-loop delay
 * (`perf_hooks.monitorEventLoopDelay`: how late a timer fires, i.e. how long a ready callback
 * waits; p50/p99/max per interval), every garbage-collection pause (a `gc` performance
 * observer feeding a timer: count and total per flush), heap used and RSS.
 */
export function startRuntimeStats(options: RuntimeStatsOptions): RuntimeStats {
  const { store } = options;
  const p50 = store.gauge(runtimeStatNames.eventLoopDelayP50);
  const p99 = store.gauge(runtimeStatNames.eventLoopDelayP99);
  const max = store.gauge(runtimeStatNames.eventLoopDelayMax);
  const heapUsed = store.gauge(runtimeStatNames.heapUsed);
  const rss = store.gauge(runtimeStatNames.rss);
  const gcPause = store.timer(runtimeStatNames.gcPause);

  const delay = monitorEventLoopDelay({
    resolution: options.resolutionMs ?? 10,
  });
  delay.enable();
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) gcPause.recordMs(entry.duration);
  });
  observer.observe({ entryTypes: ["gc"] });

  const nsPerMs = 1e6;
  const sample = (): void => {
    // Before the first sample of a histogram, percentiles are 0 and min/max are sentinels.
    if (delay.count > 0) {
      p50.set(delay.percentile(50) / nsPerMs);
      p99.set(delay.percentile(99) / nsPerMs);
      max.set(delay.max / nsPerMs);
    }
    delay.reset();
    const memory = process.memoryUsage();
    heapUsed.set(memory.heapUsed);
    rss.set(memory.rss);
  };
  const timer = setInterval(sample, options.intervalMs ?? 10_000);
  timer.unref();
  let closed = false;
  return {
    sample,
    close() {
      if (closed) return;
      closed = true;
      clearInterval(timer);
      observer.disconnect();
      delay.disable();
    },
  };
}
