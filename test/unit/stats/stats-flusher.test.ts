import { describe, expect, it } from "vitest";
import {
  startStatsFlusher,
  type Scheduler,
} from "../../../src/stats/stats-flusher.js";
import type { StatsSink } from "../../../src/stats/stats-sink.js";
import { StatsStore } from "../../../src/stats/stats-store.js";
import { createStdoutSink } from "../../../src/stats/stdout-sink.js";

/** Records every call; tests read `calls` and reset it. */
function recordingSink(): StatsSink & { calls: string[]; closed: boolean } {
  const sink = {
    calls: [] as string[],
    closed: false,
    flushCounter(name: string, delta: number) {
      sink.calls.push(`c ${name} ${delta}`);
    },
    flushGauge(name: string, value: number) {
      sink.calls.push(`g ${name} ${value}`);
    },
    flushTimer(name: string, ms: number, ratio: number) {
      sink.calls.push(`t ${name} ${ms} ${ratio}`);
    },
    endFlush() {
      sink.calls.push("end");
    },
    close() {
      sink.closed = true;
      return Promise.resolve();
    },
  };
  return sink;
}

/** A scheduler the test ticks by hand. */
function manualScheduler(): Scheduler & { tick(): void; stopped: boolean } {
  let task: (() => void) | undefined;
  const s = Object.assign(
    (t: () => void) => {
      task = t;
      return () => {
        s.stopped = true;
      };
    },
    {
      stopped: false,
      tick() {
        task?.();
      },
    },
  );
  return s;
}

describe("startStatsFlusher", () => {
  it("sends counter deltas only when non-zero, gauges always, timers as recorded", async () => {
    const store = new StatsStore();
    const sink = recordingSink();
    const scheduler = manualScheduler();
    const hits = store.counter("a.hits");
    const gauge = store.gauge("a.size");
    const timer = store.timer("a.time");
    const flusher = startStatsFlusher({ store, sink, scheduler });
    hits.add(3);
    gauge.set(7);
    timer.recordMs(1.5);
    timer.recordMs(2);
    scheduler.tick();
    expect(sink.calls).toEqual([
      "c a.hits 3",
      "g a.size 7",
      "t a.time 1.5 1",
      "t a.time 2 1",
      "end",
    ]);
    sink.calls = [];
    scheduler.tick();
    expect(sink.calls).toEqual(["g a.size 7", "end"]);
    sink.calls = [];
    hits.add(2);
    await flusher.close();
    expect(sink.calls).toEqual(["c a.hits 2", "g a.size 7", "end"]);
    expect(scheduler.stopped).toBe(true);
    expect(sink.closed).toBe(true);
    // Closed: timers no longer buffer.
    timer.recordMs(5);
    await flusher.close();
  });

  it("adds EXTRA_TAGS to every name", () => {
    const store = new StatsStore();
    const sink = recordingSink();
    const scheduler = manualScheduler();
    store.counter("x.y").add(1);
    startStatsFlusher({
      store,
      sink,
      scheduler,
      extraTags: [{ key: "env", value: "prod.eu" }],
    });
    scheduler.tick();
    expect(sink.calls[0]).toBe("c x.y.__env=prod_eu 1");
  });

  it("keeps a uniform sample of timer durations past the cap and reports the ratio", () => {
    const store = new StatsStore();
    const sink = recordingSink();
    const scheduler = manualScheduler();
    const timer = store.timer("t");
    startStatsFlusher({
      store,
      sink,
      scheduler,
      maxTimerSamplesPerFlush: 4,
      random: () => 0.1,
    });
    for (let i = 1; i <= 10; i++) timer.recordMs(i);
    scheduler.tick();
    const timers = sink.calls.filter((c) => c.startsWith("t "));
    expect(timers).toHaveLength(4);
    expect(timers.every((c) => c.endsWith(" 0.4"))).toBe(true);
    expect(timer.value()).toEqual({ count: 10, sumMs: 55 });
  });

  it("hands timers to a sink that takes them at record time", () => {
    const store = new StatsStore();
    const seen: string[] = [];
    const sink = {
      ...recordingSink(),
      timerListener: (name: string) => (ms: number) =>
        seen.push(`${name}=${ms}`),
    };
    const timer = store.timer("early");
    startStatsFlusher({
      store,
      sink,
      scheduler: manualScheduler(),
      extraTags: [{ key: "a", value: "b" }],
    });
    timer.recordMs(3);
    store.timer("late").recordMs(4);
    expect(seen).toEqual(["early.__a=b=3", "late.__a=b=4"]);
  });

  it("rejects a non-positive interval", () => {
    expect(() =>
      startStatsFlusher({
        store: new StatsStore(),
        sink: recordingSink(),
        intervalMs: 0,
      }),
    ).toThrow(/intervalMs/);
  });
});

describe("createStdoutSink", () => {
  it("writes one JSON line per statistic", () => {
    const lines: string[] = [];
    const sink = createStdoutSink({
      write: (line) => lines.push(line),
      clock: {
        nowMs: () => 1_700_000_000_500,
        nowSeconds: () => 1_700_000_000,
      },
    });
    sink.flushCounter("a", 2);
    sink.flushGauge("b", 3);
    sink.flushTimer("c", 1.25, 0.5);
    sink.endFlush();
    expect(lines.map((l) => JSON.parse(l) as unknown)).toEqual([
      { ts: 1_700_000_000.5, type: "counter", name: "a", value: 2 },
      { ts: 1_700_000_000.5, type: "gauge", name: "b", value: 3 },
      {
        ts: 1_700_000_000.5,
        type: "timer",
        name: "c",
        value: 1.25,
        sample_ratio: 0.5,
      },
    ]);
    expect(lines.every((l) => l.endsWith("}\n"))).toBe(true);
  });
});
