import type { StatsSink } from "./stats-sink.js";

/**
 * Creates a sink that discards everything (`DISABLE_STATS=true`). Statistics still count in
 * process, so the debug `/stats` page shows them; nothing leaves the process.
 */
export function createNullSink(): StatsSink {
  return {
    flushCounter() {
      // Discarded.
    },
    flushGauge() {
      // Discarded.
    },
    flushTimer() {
      // Discarded.
    },
    endFlush() {
      // Nothing buffered.
    },
    close: () => Promise.resolve(),
  };
}
