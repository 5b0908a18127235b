import { describe, expect, it } from "vitest";
import {
  runtimeStatNames,
  startRuntimeStats,
} from "../../../src/stats/runtime-stats.js";
import { StatsStore } from "../../../src/stats/stats-store.js";
import { waitFor } from "../../helpers/wait-for.js";

describe("startRuntimeStats", () => {
  it("records GC pauses, event-loop delay, heap and RSS", async () => {
    const store = new StatsStore();
    const stats = startRuntimeStats({
      store,
      intervalMs: 60_000,
      resolutionMs: 1,
    });
    try {
      // Allocate until at least one collection has been observed.
      let keep: unknown[] = [];
      await waitFor(() => {
        for (let i = 0; i < 100_000; i++) keep.push({ i });
        keep = [];
        return store.timer(runtimeStatNames.gcPause).value().count > 0;
      }, "a GC pause");
      // Block the loop so that the delay histogram has something to report.
      const until = Date.now() + 30;
      while (Date.now() < until);
      await new Promise((r) => setTimeout(r, 20));
      stats.sample();
      expect(
        store.gauge(runtimeStatNames.eventLoopDelayMax).value(),
      ).toBeGreaterThan(0);
      expect(
        store.gauge(runtimeStatNames.eventLoopDelayP99).value(),
      ).toBeGreaterThan(0);
      expect(store.gauge(runtimeStatNames.heapUsed).value()).toBeGreaterThan(0);
      expect(store.gauge(runtimeStatNames.rss).value()).toBeGreaterThan(
        store.gauge(runtimeStatNames.heapUsed).value(),
      );
    } finally {
      stats.close();
      stats.close();
    }
  });
});
