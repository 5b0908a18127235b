// `node dist/bench/override-load.js`: the start of the service (BACKEND_TYPE=kv) with
// BENCH_OVERRIDE_COUNT run-time overrides in the store (docs/operations.md, "Overrides" →
// "Cost"). It starts a redis-server on a free loopback port without persistence, writes the
// overrides of domain `rl` (`remote_address=override-<i>`, as the service itself stores them:
// override-message.ts `overrideToJson`, one reason and actor shared by all, no expiry), starts
// dist/src/main.js with the V8 flags of bin/ratelimit on examples/config, and prints:
//
// - the service's own `overrides loaded from the store` log line (count, ms, compaction ms);
// - the seconds from the spawn to `/healthcheck` 200 (the gRPC port opens after the load);
// - RSS, peak RSS (VmHWM) and heapUsed (the debug port's `/stats` memstats) once healthy;
// - under ghz (`.bench/bin/ghz`, scripts/ensure-go-tools.sh; skipped when missing), 64 calls
//   in flight over 4 connections for BENCH_OVERRIDE_LOAD_SECONDS each, after a 2 s warm-up:
//   distinct values none of which has an override (`v<n>`, the kv-overrides load of
//   `make bench`), then distinct values each of which has one (`override-<n>`): decisions per
//   second, CPU µs per decision of the service, RSS and peak RSS after each;
// - RSS and heapUsed after a forced settle: a full, memory-reducing collection asked through
//   the inspector (`HeapProfiler.collectGarbage`; the service is started with
//   `--inspect-port` and the inspector opened by SIGUSR1 only then).
//
// Environment: BENCH_OVERRIDE_COUNT (default 1000000; 0 for the service without overrides),
// BENCH_OVERRIDE_LOAD_SECONDS (default 10; 0 skips the loads), BENCH_OVERRIDE_MAIN (the
// service's main module, default dist/src/main.js: point it at another build to compare two).

import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { Redis } from "ioredis";
import {
  kvOverrideDomainsKey,
  kvOverridesKey,
  versionField,
} from "../src/backends/kv/kv-override-commands.js";
import { overrideToJson } from "../src/overrides/override-message.js";
import {
  OverrideLimitSchema,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../src/proto.js";
import { runGhz } from "./load-tools.js";
import {
  freePort,
  killAll,
  startProcess,
  treeCpuSeconds,
  treeMemory,
  waitForPort,
  type Started,
} from "./procs.js";

const root = join(import.meta.dirname, "..", "..");
const count = Number(process.env["BENCH_OVERRIDE_COUNT"] ?? "1000000");
const loadSeconds = Number(process.env["BENCH_OVERRIDE_LOAD_SECONDS"] ?? "10");
const ghz = join(root, ".bench", "bin", "ghz");
const main =
  process.env["BENCH_OVERRIDE_MAIN"] ?? join(root, "dist", "src", "main.js");
const domain = "rl";
const work = mkdtempSync(join(tmpdir(), "override-load-"));

const mib = (bytes: number): string => (bytes / 1048576).toFixed(0);

/** Writes `count` overrides of `domain` in the stored form; returns the seconds it took. */
async function preload(port: number): Promise<number> {
  const began = performance.now();
  const client = new Redis({ host: "127.0.0.1", port });
  try {
    const key = kvOverridesKey("", domain);
    const limit = create(OverrideLimitSchema, {
      requestsPerUnit: 100,
      unit: Unit.SECOND,
      unitMultiplier: 1,
      algorithm: "fixed_window",
    });
    const updateMs = Date.now();
    const batch = 10_000;
    for (let from = 0; from < count; from += batch) {
      const fields: string[] = [];
      for (let i = from; i < Math.min(count, from + batch); i++) {
        const entries = [{ key: "remote_address", value: `override-${i}` }];
        fields.push(
          `remote_address=override-${i}`,
          overrideToJson({
            domain,
            entries,
            limit,
            expireMs: undefined,
            reason: "bulk import",
            actor: "bench",
            updateMs,
          }),
        );
      }
      await client.hset(key, ...fields);
    }
    await client.hset(key, versionField, "1");
    await client.sadd(kvOverrideDomainsKey(""), domain);
  } finally {
    client.disconnect();
  }
  return (performance.now() - began) / 1000;
}

/** `process.memoryUsage()` of the service, from its debug port's `/stats`. */
async function memstats(debugPort: number): Promise<NodeJS.MemoryUsage> {
  const text = await (
    await fetch(`http://127.0.0.1:${debugPort}/stats`)
  ).text();
  const line = /^memstats: (.*)$/m.exec(text)?.[1];
  if (line === undefined) throw new Error("no memstats in /stats");
  return JSON.parse(line) as NodeJS.MemoryUsage;
}

/** Resolves with the seconds since `began` once `url` answers 200. */
async function healthyAfter(
  url: string,
  started: Started,
  began: number,
): Promise<number> {
  for (;;) {
    try {
      const response = await fetch(url);
      await response.arrayBuffer();
      if (response.status === 200) return (performance.now() - began) / 1000;
    } catch {
      // Not listening yet.
    }
    if (started.child.exitCode !== null)
      throw new Error(`the service exited:\n${started.output()}`);
    if (performance.now() - began > 600_000)
      throw new Error(`not healthy after 600 s:\n${started.output()}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A full, memory-reducing collection in the service, through its inspector. */
async function forceSettle(
  started: Started,
  inspectPort: number,
): Promise<void> {
  process.kill(started.pid, "SIGUSR1");
  await waitForPort(inspectPort, started, 10_000);
  const targets = (await (
    await fetch(`http://127.0.0.1:${inspectPort}/json/list`)
  ).json()) as { webSocketDebuggerUrl: string }[];
  const url = targets[0]?.webSocketDebuggerUrl;
  if (url === undefined) throw new Error("no inspector target");
  const socket = new WebSocket(url);
  await new Promise<void>((resolve, reject) => {
    socket.onopen = () => {
      socket.send(
        JSON.stringify({ id: 1, method: "HeapProfiler.collectGarbage" }),
      );
    };
    socket.onmessage = (event) => {
      if (String(event.data).includes('"id":1')) resolve();
    };
    socket.onerror = () => {
      reject(new Error("inspector connection failed"));
    };
  });
  socket.close();
}

/** ShouldRateLimit of domain `rl`, one descriptor `remote_address=<prefix><n>`. */
function request(prefix: string): string {
  return JSON.stringify({
    domain,
    descriptors: [
      {
        entries: [
          { key: "remote_address", value: `${prefix}{{.RequestNumber}}` },
        ],
      },
    ],
  });
}

/** One ghz load of `seconds`: decisions per second and the service's CPU µs per decision. */
async function load(
  grpcPort: number,
  pid: number,
  prefix: string,
  seconds: number,
): Promise<{ perSecond: number; cpuUs: number; nonOk: number }> {
  const cpu0 = treeCpuSeconds(pid);
  const result = await runGhz({
    ghz,
    root,
    address: `127.0.0.1:${String(grpcPort)}`,
    inFlight: 64,
    connections: 4,
    seconds,
    request: request(prefix),
  });
  const cpu = treeCpuSeconds(pid) - cpu0;
  return {
    perSecond: result.perSecond,
    cpuUs: (cpu * 1e6) / Math.max(1, result.count),
    nonOk: result.nonOk,
  };
}

async function run(): Promise<void> {
  const redisPort = await freePort();
  const redis = startProcess(
    "redis-server",
    [
      "--port",
      String(redisPort),
      "--bind",
      "127.0.0.1",
      "--save",
      "",
      "--appendonly",
      "no",
      "--dir",
      work,
    ],
    {},
    join(work, "redis.log"),
  );
  let service: Started | undefined;
  try {
    await waitForPort(redisPort, redis);
    const preloadSeconds = count > 0 ? await preload(redisPort) : 0;
    const [http, grpc, debug, inspect] = [
      await freePort(),
      await freePort(),
      await freePort(),
      await freePort(),
    ];
    const began = performance.now();
    const started = startProcess(
      process.execPath,
      [
        "--max-semi-space-size=8",
        `--inspect-port=127.0.0.1:${String(inspect)}`,
        main,
      ],
      {
        BACKEND_TYPE: "kv",
        KV_SOCKET_TYPE: "tcp",
        KV_URL: `127.0.0.1:${String(redisPort)}`,
        HOST: "127.0.0.1",
        PORT: String(http),
        GRPC_HOST: "127.0.0.1",
        GRPC_PORT: String(grpc),
        DEBUG_HOST: "127.0.0.1",
        DEBUG_PORT: String(debug),
        RUNTIME_ROOT: join(root, "examples"),
        RUNTIME_SUBDIRECTORY: "",
        RUNTIME_APPDIRECTORY: "config",
        RUNTIME_WATCH_ROOT: "false",
        USE_PUSHSTATS: "false",
        LOG_LEVEL: "info",
      },
      join(work, "service.log"),
    );
    service = started;
    const healthySeconds = await healthyAfter(
      `http://127.0.0.1:${String(http)}/healthcheck`,
      started,
      began,
    );
    const atStart = treeMemory(started.pid);
    const heapAtStart = await memstats(debug);
    const loaded = readFileSync(join(work, "service.log"), "utf8")
      .split("\n")
      .find((line) => line.includes("overrides loaded"));
    console.log(
      `${String(count)} overrides (written in ${preloadSeconds.toFixed(1)} s); ${main}`,
    );
    if (loaded !== undefined) console.log(`  service: ${loaded}`);
    console.log(
      `  healthy after ${healthySeconds.toFixed(1)} s; RSS ${mib(atStart.rssKiB * 1024)} MiB, peak ${mib(atStart.peakKiB * 1024)} MiB, heapUsed ${mib(heapAtStart.heapUsed)} MiB, heapTotal ${mib(heapAtStart.heapTotal)} MiB`,
    );
    if (loadSeconds > 0 && existsSync(ghz)) {
      await load(grpc, started.pid, "w", 2);
      for (const [name, prefix] of [
        ["distinct values, none overridden", "v"],
        ["distinct values, each overridden", "override-"],
      ] as const) {
        const { perSecond, cpuUs, nonOk } = await load(
          grpc,
          started.pid,
          prefix,
          loadSeconds,
        );
        const after = treeMemory(started.pid);
        console.log(
          `  ghz, 64 in flight, ${name}: ${String(perSecond)} decisions/s${nonOk > 0 ? ` (${String(nonOk)} not OK)` : ""}, ${cpuUs.toFixed(1)} µs CPU/decision; RSS ${mib(after.rssKiB * 1024)} MiB, peak ${mib(after.peakKiB * 1024)} MiB`,
        );
      }
    } else if (loadSeconds > 0) console.log(`  (no load: ${ghz} is missing)`);
    await forceSettle(started, inspect);
    const settled = treeMemory(started.pid);
    const heapSettled = await memstats(debug);
    console.log(
      `  after a forced full GC: RSS ${mib(settled.rssKiB * 1024)} MiB, heapUsed ${mib(heapSettled.heapUsed)} MiB, heapTotal ${mib(heapSettled.heapTotal)} MiB`,
    );
  } finally {
    await service?.stop();
    await redis.stop();
    rmSync(work, { recursive: true, force: true });
  }
}

try {
  await run();
} catch (err) {
  killAll();
  console.error(err);
  process.exitCode = 1;
}
