// Exact counting on memcached (issue 33 item 1), before and after: drives the mc backend's
// usual charge (`McCounterBackend.increment`, one slot per decision) against a memcached
// started here, for this build and, when `BENCH_MC_BASE` names another checkout's root (with
// its `dist/` built), for that one too, in interleaved runs (base, head, base, head, ...;
// `BENCH_MC_RUNS`, default 3) and reports the median of the runs:
//
// - latency p50 / p99 of a decision, one at a time (sequential) and 64 in flight on one key;
// - round trips per decision: the batches (requests closed by a NOOP, one write and one reply
//   each) a sequential decision waited for, and every batch sent, background ones included;
// - admitted of a burst of 400 calls at once on one fresh key with a limit of 100.
//
// Run: `make build && node dist/bench/mc-exact.js` (head only), or
// `BENCH_MC_BASE=/path/to/base node dist/bench/mc-exact.js`. In process, no gRPC: the rows
// differ only by the backend's work. Numbers are for comparison within one run; the machine
// may be shared.
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { pino } from "pino";
import { startStore } from "../src/conformance/processes.js";
import type { CounterSlot } from "../src/limiter/counter-backend.js";

import type * as BackendExports from "../src/backends/mc/mc-counter-backend.js";
import type * as ConnectionExports from "../src/backends/mc/mc-connection.js";
import type * as ClockExports from "../src/util/clock.js";

// Each build's own modules are imported at run time (see load()); these are their shapes.
type BackendModule = typeof BackendExports;
type ConnectionModule = typeof ConnectionExports;
type ClockModule = typeof ClockExports;

const runs = Number(process.env["BENCH_MC_RUNS"] ?? "3");
const sequentialCalls = Number(process.env["BENCH_MC_SEQUENTIAL"] ?? "3000");
const inFlightCalls = Number(
  process.env["BENCH_MC_IN_FLIGHT_CALLS"] ?? "30000",
);
const inFlight = 64;

/** One build to measure: its name and its `dist/` directory. */
interface Build {
  readonly name: string;
  readonly dist: string;
}

/** A build's modules, loaded once, with its batch counters. */
interface Loaded {
  readonly build: Build;
  readonly backend: BackendModule;
  readonly clock: ClockModule;
  /** Batches sent so far. */
  sent: number;
  /** The sequential decision in progress: batches it sent whose reply it waited for. */
  decision: { awaited: number; done: boolean } | undefined;
}

/** What one run of one build measured. */
interface RunResult {
  readonly seqFixedP50: number;
  readonly seqFixedP99: number;
  readonly seqFixedAwaited: number;
  readonly seqFixedSent: number;
  readonly seqSlidingP50: number;
  readonly seqSlidingAwaited: number;
  readonly seqSlidingSent: number;
  readonly hotP50: number;
  readonly hotP99: number;
  readonly hotPerSecond: number;
  readonly hotSent: number;
  readonly burstAdmitted: number;
}

async function load(build: Build): Promise<Loaded> {
  const url = (path: string): string =>
    pathToFileURL(join(build.dist, path)).href;
  const backend = (await import(
    url("src/backends/mc/mc-counter-backend.js")
  )) as BackendModule;
  const connection = (await import(
    url("src/backends/mc/mc-connection.js")
  )) as ConnectionModule;
  const clock = (await import(url("src/util/clock.js"))) as ClockModule;
  const loaded: Loaded = {
    build,
    backend,
    clock,
    sent: 0,
    decision: undefined,
  };
  // Count every batch (`send`: one request frame closed by a NOOP, one reply) and, for the
  // sequential decision in progress, those whose reply it waited for.
  const proto = connection.McConnection.prototype as unknown as {
    send: (...args: unknown[]) => void;
  };
  const send = proto.send;
  proto.send = function (this: unknown, ...args: unknown[]): void {
    loaded.sent++;
    const decision = loaded.decision;
    const onDone = args[3] as (err: Error | undefined) => void;
    args[3] = (err: Error | undefined): void => {
      if (decision !== undefined && !decision.done) decision.awaited++;
      onDone(err);
    };
    send.apply(this, args);
  };
  return loaded;
}

function slot(cacheKey: string, sliding: boolean, limit: number): CounterSlot {
  return {
    cacheKey,
    previousCacheKey: sliding ? `${cacheKey}_previous` : undefined,
    perSecond: false,
    expirationSeconds: sliding ? 120 : 60,
    windowSeconds: 60,
    windowEndSeconds: 0,
    sliding,
    requestsPerUnit: limit,
    shadowMode: false,
    increment: 1,
    current: 0,
    previous: 0,
  };
}

function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!;
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

async function measure(
  loaded: Loaded,
  memcached: string,
  run: number,
): Promise<RunResult> {
  const backend = new loaded.backend.McCounterBackend({
    clock: loaded.clock.systemClock,
    logger: pino({ level: "silent" }),
    hostPorts: [memcached],
  });
  await backend.start();
  const now = () => Math.floor(Date.now() / 1000);
  const prefix = `${loaded.build.name}${run}`;

  const sequential = async (sliding: boolean) => {
    const latencies: number[] = [];
    let awaited = 0;
    const sentBefore = loaded.sent;
    for (let i = 0; i < sequentialCalls; i++) {
      const s = slot(`${prefix}_seq_${sliding ? "s" : "f"}`, sliding, 1e9);
      const decision = { awaited: 0, done: false };
      loaded.decision = decision;
      const start = performance.now();
      await backend.increment([s], now());
      latencies.push(performance.now() - start);
      decision.done = true;
      awaited += decision.awaited;
    }
    loaded.decision = undefined;
    await backend.flush();
    latencies.sort((a, b) => a - b);
    return {
      p50: percentile(latencies, 0.5) * 1000,
      p99: percentile(latencies, 0.99) * 1000,
      awaited: awaited / sequentialCalls,
      sent: (loaded.sent - sentBefore) / sequentialCalls,
    };
  };
  const fixed = await sequential(false);
  const sliding = await sequential(true);

  // 64 in flight on one key.
  const latencies: number[] = [];
  let next = 0;
  const sentBefore = loaded.sent;
  const worker = async (): Promise<void> => {
    while (next < inFlightCalls) {
      next++;
      const s = slot(`${prefix}_hot`, false, 1e9);
      const start = performance.now();
      await backend.increment([s], now());
      latencies.push(performance.now() - start);
    }
  };
  const start = performance.now();
  await Promise.all(Array.from({ length: inFlight }, worker));
  const seconds = (performance.now() - start) / 1000;
  await backend.flush();
  const hotSent = (loaded.sent - sentBefore) / inFlightCalls;
  latencies.sort((a, b) => a - b);

  // 400 at once on a fresh key, limit 100: a decision admits when the counter after its
  // hits is within the limit.
  const burst = Array.from({ length: 400 }, () =>
    slot(`${prefix}_burst`, false, 100),
  );
  await Promise.all(burst.map((s) => backend.increment([s], now())));
  await backend.close();
  return {
    seqFixedP50: fixed.p50,
    seqFixedP99: fixed.p99,
    seqFixedAwaited: fixed.awaited,
    seqFixedSent: fixed.sent,
    seqSlidingP50: sliding.p50,
    seqSlidingAwaited: sliding.awaited,
    seqSlidingSent: sliding.sent,
    hotP50: percentile(latencies, 0.5) * 1000,
    hotP99: percentile(latencies, 0.99) * 1000,
    hotPerSecond: inFlightCalls / seconds,
    hotSent,
    burstAdmitted: burst.filter((s) => s.current <= 100).length,
  };
}

async function main(): Promise<void> {
  const head: Build = { name: "head", dist: join(import.meta.dirname, "..") };
  const baseRoot = process.env["BENCH_MC_BASE"];
  const builds: Build[] =
    baseRoot === undefined || baseRoot === ""
      ? [head]
      : [{ name: "base", dist: join(baseRoot, "dist") }, head];
  const loaded = await Promise.all(builds.map(load));
  const memcached = await startStore("mc", {});
  const results = new Map<string, RunResult[]>(builds.map((b) => [b.name, []]));
  try {
    for (let run = 0; run < runs; run++) {
      for (const l of loaded) {
        const result = await measure(l, memcached.address, run);
        results.get(l.build.name)!.push(result);
        process.stderr.write(
          `${l.build.name} run ${run + 1}: ${JSON.stringify(result)}\n`,
        );
      }
    }
  } finally {
    await memcached.stop();
  }
  const rows: [string, keyof RunResult, number][] = [
    ["sequential, fixed window: p50 µs", "seqFixedP50", 0],
    ["sequential, fixed window: p99 µs", "seqFixedP99", 0],
    [
      "sequential, fixed window: round trips awaited / decision",
      "seqFixedAwaited",
      2,
    ],
    ["sequential, fixed window: batches sent / decision", "seqFixedSent", 2],
    ["sequential, sliding window: p50 µs", "seqSlidingP50", 0],
    [
      "sequential, sliding window: batches awaited / decision",
      "seqSlidingAwaited",
      2,
    ],
    [
      "sequential, sliding window: batches sent / decision",
      "seqSlidingSent",
      2,
    ],
    ["64 in flight, one key: p50 µs", "hotP50", 0],
    ["64 in flight, one key: p99 µs", "hotP99", 0],
    ["64 in flight, one key: decisions/s", "hotPerSecond", 0],
    ["64 in flight, one key: batches sent / decision", "hotSent", 3],
    ["burst of 400 at once, limit 100: admitted", "burstAdmitted", 0],
  ];
  const names = builds.map((b) => b.name);
  const lines = [
    `mc backend, usual charge, median of ${runs} interleaved runs (${sequentialCalls} sequential decisions, ${inFlightCalls} at ${inFlight} in flight)`,
    "",
    `| measure | ${names.join(" | ")} |`,
    `| --- | ${names.map(() => "---:").join(" | ")} |`,
    ...rows.map(
      ([label, field, digits]) =>
        `| ${label} | ${names
          .map((n) =>
            median(results.get(n)!.map((r) => r[field])).toFixed(digits),
          )
          .join(" | ")} |`,
    ),
  ];
  process.stdout.write(`${lines.join("\n")}\n`);
}

await main();
