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
  const clock = {
    nowMs: () => 1_700_000_000_500,
    nowSeconds: () => 1_700_000_000,
  };

  it("writes one JSON line per statistic, all lines of a flush in one write", () => {
    const writes: string[] = [];
    const sink = createStdoutSink({ write: (w) => writes.push(w), clock });
    sink.flushCounter("a", 2);
    sink.flushGauge("b", 3);
    sink.flushTimer("c", 1.25, 1);
    expect(writes).toEqual([]);
    sink.endFlush();
    expect(writes).toHaveLength(1);
    const lines = (writes[0] ?? "").split("\n");
    expect(lines.pop()).toBe("");
    expect(lines.map((l) => JSON.parse(l) as unknown)).toEqual([
      { ts: 1_700_000_000.5, type: "counter", name: "a", value: 2 },
      { ts: 1_700_000_000.5, type: "gauge", name: "b", value: 3 },
      {
        ts: 1_700_000_000.5,
        type: "timer",
        name: "c",
        count: 1,
        min: 1.25,
        max: 1.25,
        mean: 1.25,
        p50: 1.25,
        p90: 1.25,
        p99: 1.25,
      },
    ]);
  });

  it("summarises a timer's durations per flush (nearest-rank percentiles)", () => {
    const writes: string[] = [];
    const sink = createStdoutSink({ write: (w) => writes.push(w), clock });
    // 1..100 ms in a shuffled order, and a second timer.
    for (let i = 0; i < 100; i++) sink.flushTimer("t", ((i * 37) % 100) + 1, 1);
    sink.flushTimer("u", 0.1234567, 1);
    sink.endFlush();
    const records = (writes[0] ?? "")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(records).toEqual([
      {
        ts: 1_700_000_000.5,
        type: "timer",
        name: "t",
        count: 100,
        min: 1,
        max: 100,
        mean: 50.5,
        p50: 50,
        p90: 90,
        p99: 99,
      },
      {
        ts: 1_700_000_000.5,
        type: "timer",
        name: "u",
        count: 1,
        min: 0.123457,
        max: 0.123457,
        mean: 0.123457,
        p50: 0.123457,
        p90: 0.123457,
        p99: 0.123457,
      },
    ]);
    // The next flush starts over: no durations, no timer line, no write at all.
    sink.endFlush();
    expect(writes).toHaveLength(1);
    sink.flushTimer("t", 7, 1);
    sink.endFlush();
    expect(JSON.parse(writes[1] ?? "")).toMatchObject({
      name: "t",
      count: 1,
      min: 7,
      max: 7,
    });
  });

  it("reports the recorded count and the sample ratio of a sampled timer", () => {
    const writes: string[] = [];
    const sink = createStdoutSink({ write: (w) => writes.push(w), clock });
    for (let i = 0; i < 3; i++) sink.flushTimer("t", 2, 3 / 7);
    sink.endFlush();
    expect(JSON.parse(writes[0] ?? "")).toEqual({
      ts: 1_700_000_000.5,
      type: "timer",
      name: "t",
      count: 7,
      min: 2,
      max: 2,
      mean: 2,
      p50: 2,
      p90: 2,
      p99: 2,
      sample_ratio: 3 / 7,
    });
  });

  it("summarises the flush loop's timers in one line each, whatever the call count", async () => {
    const writes: string[] = [];
    const store = new StatsStore();
    const flusher = startStatsFlusher({
      store,
      sink: createStdoutSink({ write: (w) => writes.push(w), clock }),
      scheduler: () => () => undefined,
      maxTimerSamplesPerFlush: 100,
      random: () => 0.5,
    });
    const timer = store.timer("ratelimit_server.ShouldRateLimit.response_time");
    for (let i = 0; i < 1000; i++) timer.recordMs(i % 2 === 0 ? 1 : 3);
    store.counter("ratelimit.service.x").add(1000);
    flusher.flush();
    expect(writes).toHaveLength(1);
    const records = (writes[0] ?? "")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(records).toHaveLength(2);
    expect(records[1]).toMatchObject({
      type: "timer",
      name: "ratelimit_server.ShouldRateLimit.response_time",
      count: 1000,
      min: 1,
      max: 3,
      sample_ratio: 0.1,
    });
    await flusher.close();
  });

  it("writes what is pending on close and nothing after", async () => {
    const writes: string[] = [];
    const sink = createStdoutSink({ write: (w) => writes.push(w), clock });
    sink.flushCounter("a", 1);
    await sink.close();
    sink.flushCounter("a", 1);
    sink.endFlush();
    expect(writes).toEqual([
      '{"ts":1700000000.5,"type":"counter","name":"a","value":1}\n',
    ]);
  });
});
