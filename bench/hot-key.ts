// Hot-key leases (issue 33 item 2): store operations per decision and decisions/s on one hot
// key through 3 replicas sharing one store, with and without `lease: true`, on kv and mc
// (against a redis-server and a memcached started here). Two modes, both by default:
//
// `--pipeline` (in process): each replica is a decision pipeline with its own store connection
// (and, with leases, its own lease table), in this process, no gRPC: the rows differ only by
// the counting.
// - throughput: 64 calls in flight per replica for `BENCH_HOT_MS` ms (default 3000) each, a
//   limit no call reaches (100,000,000 per hour; lease_max = 1 % of it, so the ~50 ms sizing
//   decides n);
// - accuracy: 30,000 calls on a fresh key with a limit of 20,000 per hour and lease_max 200:
//   admitted, against the bound limit − 3 × lease_max.
//
// `--grpc` (issue 33 "Done when"): 3 spawned service processes (bin/ratelimit, WORKERS=1, the
// conformance suite's launch environment) on one store, each loaded by its own load generator
// at once: 32 calls in flight over 4 connections per replica, closed loop, as fast as the box
// allows. `BENCH_HOT_LOAD` (default `ghz,h2load`) names the generators, one after the other:
// ghz (.bench/bin, scripts/ensure-go-tools.sh; decodes every answer) and h2load (nghttp2; one
// fixed body, answers not decoded, several times cheaper per call, so more of the cores is
// left to the services).
// - throughput: `BENCH_HOT_GRPC_SECONDS` (default 5) s per row, rows interleaved plain, lease,
//   plain, lease after a 2 s warm-up of each replica; decisions/s is the sum of the three ghz
//   rates; CPU µs per decision from /proc: the three services' user + system time, the load
//   generators' (the children this process reaped) and the store's;
// - accuracy: the same load for the same time on a limit of 20,000 per day with lease_max 200:
//   admitted = total_hits − over_limit from the replicas' own /stats, against the bound
//   min(demand, limit) − 3 × lease_max … limit.
//
// Store operations come from the store's own statistics (bench/store-stats.ts): redis `INFO
// commandstats` (INCRBY calls), memcached `stats` (incr_hits + incr_misses). Run: `make
// bench-hot-key` (or `make build && node dist/bench/hot-key.js [--grpc|--pipeline]`). Writes
// .bench/hot-key.md and .bench/hot-key.json. Numbers are for comparison within one run; the
// machine may be shared, and under `--grpc` the load generators share its cores.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, toBinary } from "@bufbuild/protobuf";
import { pino } from "pino";
import { KvCounterBackend } from "../src/backends/kv/kv-counter-backend.js";
import { McCounterBackend } from "../src/backends/mc/mc-counter-backend.js";
import { loadConfig } from "../src/config/load-config.js";
import type { RateLimit } from "../src/config/rate-limit-config.js";
import { launchEnv } from "../src/conformance/flavour.js";
import {
  delay,
  freePort,
  startChild,
  startStore,
  type Child,
  type Store,
} from "../src/conformance/processes.js";
import { openWireClient } from "../src/conformance/wire.js";
import type { CounterBackend } from "../src/limiter/counter-backend.js";
import { createDecider } from "../src/limiter/decide.js";
import { LimitRequest } from "../src/limiter/limit-request.js";
import { RateLimitPipeline } from "../src/limiter/pipeline.js";
import {
  RateLimitResponse_Code as Code,
  RateLimitDescriptorSchema,
  RateLimitRequestSchema,
  type RateLimitDescriptor,
} from "../src/proto.js";
import { createStatsManager } from "../src/stats/stats-manager.js";
import { systemClock } from "../src/util/clock.js";
import { runGhz, tool } from "./load-tools.js";
import { processTree, runTool, treeCpuSeconds } from "./procs.js";
import { storeOperations } from "./store-stats.js";

const replicas = 3;
const inFlight = 64;
const durationMs = Number(process.env["BENCH_HOT_MS"] ?? "3000");
const logger = pino({ level: "silent" });

const config = `
domain: hot
descriptors:
  - key: plain
    rate_limit: { unit: hour, requests_per_unit: 100000000 }
  - key: leased
    rate_limit: { unit: hour, requests_per_unit: 100000000, lease: true }
  - key: plain_acc
    rate_limit: { unit: hour, requests_per_unit: 20000 }
  - key: leased_acc
    rate_limit: { unit: hour, requests_per_unit: 20000, lease: true, lease_max: 200 }
`;

const stats = createStatsManager();
const rules = loadConfig([{ name: "hot.yaml", text: config }], {
  statsManager: stats,
});

/** The request descriptor `<key>=tenant` (one hot key per rule). */
function descriptorOf(key: string): RateLimitDescriptor {
  return create(RateLimitDescriptorSchema, {
    entries: [{ key, value: "tenant" }],
  });
}

function limitOf(key: string): RateLimit {
  const limit = rules.getLimit("hot", descriptorOf(key));
  if (limit === undefined) throw new Error(`no limit for ${key}`);
  return limit;
}

function backendOf(store: Store): CounterBackend {
  return store.kind === "kv"
    ? new KvCounterBackend({
        main: { type: "single", socketType: "tcp", url: store.address },
        logger,
        clock: systemClock,
      })
    : new McCounterBackend({
        clock: systemClock,
        logger,
        hostPorts: [store.address],
      });
}

/** Increments the store has run so far (its own statistics). */
async function storeIncrements(store: Store): Promise<number> {
  return (await storeOperations(store)).increments;
}

interface Row {
  readonly store: string;
  readonly lease: boolean;
  readonly decisions: number;
  readonly perSecond: number;
  readonly ops: number;
  readonly opsPerDecision: number;
  readonly admitted?: number;
  readonly bound?: string;
}

/** Calls of one replica, `inFlight` at a time, until `stop()` says so. */
async function drive(
  pipeline: RateLimitPipeline,
  descriptor: RateLimitDescriptor,
  limit: RateLimit,
  stop: (done: number) => boolean,
  onStatus: (ok: boolean) => void,
): Promise<number> {
  let done = 0;
  const lane = async (): Promise<void> => {
    while (!stop(done)) {
      done++;
      const statuses = await pipeline.doLimit(
        LimitRequest.of("hot", [{ descriptor, limit, hitsAddend: 1 }]),
      );
      onStatus(statuses[0]!.code === Code.OK);
    }
  };
  await Promise.all(Array.from({ length: inFlight }, lane));
  return done;
}

async function measure(
  store: Store,
  key: string,
  lease: boolean,
  accuracyCalls: number | undefined,
): Promise<Row> {
  const limit = limitOf(key);
  const descriptor = descriptorOf(key);
  const pipelines = Array.from(
    { length: replicas },
    () =>
      new RateLimitPipeline({
        backend: backendOf(store),
        decider: createDecider({ clock: systemClock }),
        ...(lease ? { leaseClock: systemClock } : {}),
      }),
  );
  await Promise.all(pipelines.map((p) => p.start()));
  const before = await storeIncrements(store);
  const started = performance.now();
  let admitted = 0;
  let total = 0;
  const stop =
    accuracyCalls === undefined
      ? () => performance.now() - started >= durationMs
      : () => total >= accuracyCalls;
  const counts = await Promise.all(
    pipelines.map((p) =>
      drive(
        p,
        descriptor,
        limit,
        () => {
          if (stop()) return true;
          total++;
          return false;
        },
        (ok) => {
          if (ok) admitted++;
        },
      ),
    ),
  );
  const elapsedMs = performance.now() - started;
  await Promise.all(pipelines.map((p) => p.flush()));
  const ops = (await storeIncrements(store)) - before;
  await Promise.all(pipelines.map((p) => p.close()));
  const decisions = counts.reduce((a, b) => a + b, 0);
  const row: Row = {
    store: store.kind,
    lease,
    decisions,
    perSecond: Math.round((decisions / elapsedMs) * 1000),
    ops,
    opsPerDecision: ops / decisions,
    ...(accuracyCalls !== undefined
      ? {
          admitted,
          bound: lease
            ? `${String(limit.requestsPerUnit - replicas * limit.lease!.max)}..${String(limit.requestsPerUnit)}`
            : String(limit.requestsPerUnit),
        }
      : {}),
  };
  return row;
}

function pipelineTable(rows: readonly Row[]): string {
  const lines = [
    "| store | lease | decisions | decisions/s | store increments | increments / decision | admitted | expected |",
    "| --- | --- | --- | --- | --- | --- | --- | --- |",
  ];
  for (const r of rows)
    lines.push(
      `| ${r.store} | ${r.lease ? "yes" : "no"} | ${String(r.decisions)} | ${String(r.perSecond)} | ${String(r.ops)} | ${r.opsPerDecision.toPrecision(2)} | ${r.admitted === undefined ? "" : String(r.admitted)} | ${r.bound ?? ""} |`,
    );
  return lines.join("\n");
}

async function pipelineRows(): Promise<Row[]> {
  const rows: Row[] = [];
  for (const kind of ["kv", "mc"] as const) {
    const store = await startStore(kind, {});
    try {
      // Fresh keys per row: the store's counters of one row do not meet the next's.
      rows.push(await measure(store, "plain", false, undefined));
      rows.push(await measure(store, "leased", true, undefined));
      rows.push(await measure(store, "plain_acc", false, 30_000));
      rows.push(await measure(store, "leased_acc", true, 30_000));
    } finally {
      await store.stop();
    }
  }
  return rows;
}

// ---- gRPC mode: 3 service processes, one ghz each --------------------------------------

const grpcSeconds = Number(process.env["BENCH_HOT_GRPC_SECONDS"] ?? "5");
const grpcInFlight = 32;
const grpcConnections = 4;
const grpcRounds = 2;
const grpcReplicas = 3;
const grpcAccLimit = 20_000;
const grpcAccLeaseMax = 200;
const repoRoot = join(import.meta.dirname, "..", "..");

const grpcConfig = `
domain: hot
descriptors:
  - key: plain
    rate_limit: { unit: hour, requests_per_unit: 100000000 }
  - key: leased
    rate_limit: { unit: hour, requests_per_unit: 100000000, lease: true }
  - key: plain_acc
    rate_limit: { unit: day, requests_per_unit: ${String(grpcAccLimit)} }
  - key: leased_acc
    rate_limit: { unit: day, requests_per_unit: ${String(grpcAccLimit)}, lease: true, lease_max: ${String(grpcAccLeaseMax)} }
`;

/** One row of the gRPC mode. */
interface GrpcRow {
  /** The load generator. */
  readonly tool: LoadTool["kind"];
  readonly store: string;
  readonly phase: "throughput" | "accuracy";
  readonly lease: boolean;
  readonly round: number;
  readonly decisions: number;
  readonly perSecond: number;
  readonly ops: number;
  readonly opsPerDecision: number;
  /** User + system CPU of the 3 service processes ÷ decisions. */
  readonly serviceCpuUs: number;
  /** The same for the 3 ghz processes. */
  readonly loadCpuUs: number;
  /** The same for the store process. */
  readonly storeCpuUs: number;
  readonly nonOk: number;
  readonly admitted?: number;
  /** Hits asked for in the accuracy row (`total_hits` over the replicas). */
  readonly demand?: number;
  readonly bound?: string;
  readonly withinBound?: boolean;
}

/** A service process of the gRPC mode. */
interface Replica {
  readonly child: Child;
  /** `127.0.0.1:<port>` of its gRPC listener. */
  readonly grpc: string;
  /** `127.0.0.1:<port>` of its debug listener (`/stats`). */
  readonly debug: string;
}

/**
 * Starts ours as a user does (bin/ratelimit) with the conformance suite's launch environment
 * (loopback listeners, `dir/config`, no statistics sink) on `backend`, and resolves once its
 * `/healthcheck` answers.
 *
 * @throws Error when it exits or is not healthy within 30 s, with its output
 */
async function startService(
  dir: string,
  backend: "kv" | "mc",
  store: string,
): Promise<Replica> {
  const [httpPort, grpcPort, debugPort] = [
    await freePort(),
    await freePort(),
    await freePort(),
  ];
  const env: Record<string, string> = {
    ...launchEnv(
      "neutral",
      backend,
      {
        httpPort,
        grpcPort,
        debugPort,
        runtimeRoot: dir,
        subdirectory: "",
        appDirectory: "config",
        store,
      },
      {},
    ),
    PATH: process.env["PATH"] ?? "",
  };
  const child = startChild(join(repoRoot, "bin", "ratelimit"), env);
  const client = openWireClient({
    grpc: `127.0.0.1:${String(grpcPort)}`,
    http: `127.0.0.1:${String(httpPort)}`,
  });
  try {
    const deadline = Date.now() + 30_000;
    for (;;) {
      if (child.hasExited() || Date.now() > deadline) {
        await child.stop();
        throw new Error(`service did not start: ${child.output()}`);
      }
      try {
        if ((await client.http("GET", "/healthcheck"))?.status === 200) break;
      } catch {
        // Not listening yet.
      }
      await delay(100);
    }
  } finally {
    client.close();
  }
  return {
    child,
    grpc: `127.0.0.1:${String(grpcPort)}`,
    debug: `127.0.0.1:${String(debugPort)}`,
  };
}

/** A counter of a replica's `/stats` (0 when absent). */
async function replicaStat(replica: Replica, name: string): Promise<number> {
  const text = await (await fetch(`http://${replica.debug}/stats`)).text();
  const line = text.split("\n").find((l) => l.startsWith(`${name}: `));
  return line === undefined ? 0 : Number(line.slice(name.length + 2));
}

/** A rule's counter summed over the replicas' /stats. */
async function statSum(
  replicas: readonly Replica[],
  rule: string,
  name: string,
): Promise<number> {
  const values = await Promise.all(
    replicas.map((r) =>
      replicaStat(r, `ratelimit.service.rate_limit.hot.${rule}.${name}`),
    ),
  );
  return values.reduce((a, b) => a + b, 0);
}

function cpuSeconds(replicas: readonly Replica[]): number {
  return replicas.reduce((sum, r) => sum + treeCpuSeconds(r.child.pid), 0);
}

/**
 * CPU seconds of the children this process has waited for (/proc/self/stat cutime + cstime):
 * over a row, the ghz runs that ended in it (the services and the store are still running).
 */
function reapedChildrenCpuSeconds(): number {
  const stat = readFileSync("/proc/self/stat", "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // Fields 16 and 17 (cutime, cstime), counted from "state" (field 3); clock ticks of 10 ms.
  return (Number(fields[13]) + Number(fields[14])) / 100;
}

/** CPU seconds so far of the store process (a descendant named redis-server or memcached). */
function storeCpuSeconds(): number {
  let total = 0;
  for (const pid of processTree(process.pid)) {
    let comm: string;
    try {
      comm = readFileSync(`/proc/${String(pid)}/comm`, "utf8").trim();
    } catch {
      continue;
    }
    if (comm === "redis-server" || comm === "memcached")
      total += treeCpuSeconds(pid);
  }
  return total;
}

/**
 * The load generator of a gRPC row: ghz (a Go gRPC client: decodes every answer) or h2load
 * (nghttp2's C HTTP/2 load tool: one fixed request body, answers not decoded), several times
 * cheaper per call, so more of the two cores is left to the services.
 */
type LoadTool =
  | { readonly kind: "ghz"; readonly path: string }
  | { readonly kind: "h2load"; readonly workDir: string };

/** One h2load run against one replica for `seconds`: answers and answers per second. */
async function runH2load(
  address: string,
  body: string,
  seconds: number,
): Promise<{ count: number; perSecond: number; nonOk: number }> {
  const args = [
    "-D",
    String(seconds),
    "-c",
    String(grpcConnections),
    "-m",
    String(grpcInFlight / grpcConnections),
    "-H",
    "content-type: application/grpc",
    "-H",
    "te: trailers",
    "-d",
    body,
    `http://${address}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`,
  ];
  const run = await runTool("h2load", args, (seconds + 60) * 1000);
  const done =
    /requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded/.exec(
      run.stdout,
    );
  const rate = /finished in [\d.]+\w+, ([\d.]+) req\/s/.exec(run.stdout);
  if (run.code !== 0 || done === null || rate === null)
    throw new Error(
      `h2load failed (exit ${String(run.code)}): ${run.stdout.slice(-500)}${run.stderr.slice(-500)}`,
    );
  const count = Number(done[1]);
  return {
    count,
    perSecond: Math.round(Number(rate[1])),
    nonOk: count - Number(done[2]),
  };
}

/** One load generator per replica at once on `<key>=<value>`; the rates summed. */
async function loadAll(
  load: LoadTool,
  replicas: readonly Replica[],
  key: string,
  value: string,
  seconds: number,
): Promise<{ decisions: number; perSecond: number; nonOk: number }> {
  let results: { count: number; perSecond: number; nonOk: number }[];
  if (load.kind === "ghz") {
    const request = JSON.stringify({
      domain: "hot",
      descriptors: [{ entries: [{ key, value }] }],
    });
    results = await Promise.all(
      replicas.map((r) =>
        runGhz({
          ghz: load.path,
          root: repoRoot,
          address: r.grpc,
          inFlight: grpcInFlight,
          connections: grpcConnections,
          seconds,
          request,
        }),
      ),
    );
  } else {
    const message = toBinary(
      RateLimitRequestSchema,
      create(RateLimitRequestSchema, {
        domain: "hot",
        descriptors: [{ entries: [{ key, value }] }],
      }),
    );
    // The gRPC message frame: uncompressed flag, 4-byte big-endian length, the message.
    const frame = Buffer.alloc(5 + message.length);
    frame.writeUInt32BE(message.length, 1);
    frame.set(message, 5);
    const body = join(load.workDir, `${key}-${value}.bin`);
    await writeFile(body, frame);
    results = await Promise.all(
      replicas.map((r) => runH2load(r.grpc, body, seconds)),
    );
  }
  return {
    decisions: results.reduce((a, r) => a + r.count, 0),
    perSecond: results.reduce((a, r) => a + r.perSecond, 0),
    nonOk: results.reduce((a, r) => a + r.nonOk, 0),
  };
}

async function grpcRow(
  load: LoadTool,
  store: Store,
  replicas: readonly Replica[],
  phase: GrpcRow["phase"],
  lease: boolean,
  round: number,
): Promise<GrpcRow> {
  const rule =
    phase === "throughput"
      ? lease
        ? "leased"
        : "plain"
      : lease
        ? "leased_acc"
        : "plain_acc";
  const value = `t${String(round)}-${Date.now().toString(36)}`;
  const opsBefore = await storeIncrements(store);
  const cpuBefore = cpuSeconds(replicas);
  const loadBefore = reapedChildrenCpuSeconds();
  const storeBefore = storeCpuSeconds();
  const hitsBefore = await statSum(replicas, rule, "total_hits");
  const overBefore = await statSum(replicas, rule, "over_limit");
  const result = await loadAll(load, replicas, rule, value, grpcSeconds);
  const cpu = cpuSeconds(replicas) - cpuBefore;
  const loadCpu = reapedChildrenCpuSeconds() - loadBefore;
  const storeCpu = storeCpuSeconds() - storeBefore;
  // mc increments run after the answer: let the last ones land before reading the store.
  await new Promise((resolve) => setTimeout(resolve, 300));
  const ops = (await storeIncrements(store)) - opsBefore;
  const row = {
    tool: load.kind,
    store: store.kind,
    phase,
    lease,
    round,
    decisions: result.decisions,
    perSecond: result.perSecond,
    ops,
    opsPerDecision: ops / result.decisions,
    serviceCpuUs: (cpu * 1e6) / result.decisions,
    loadCpuUs: (loadCpu * 1e6) / result.decisions,
    storeCpuUs: (storeCpu * 1e6) / result.decisions,
    nonOk: result.nonOk,
  };
  if (phase === "throughput") return row;
  // Statistics flush on their own: wait until total_hits has counted every answer.
  let demand = 0;
  for (let i = 0; i < 50; i++) {
    demand = (await statSum(replicas, rule, "total_hits")) - hitsBefore;
    if (demand >= result.decisions) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  const refused = (await statSum(replicas, rule, "over_limit")) - overBefore;
  const admitted = demand - refused;
  const high = Math.min(demand, grpcAccLimit);
  const low = lease
    ? Math.max(0, high - replicas.length * grpcAccLeaseMax)
    : high;
  return {
    ...row,
    admitted,
    demand,
    bound: low === high ? String(high) : `${String(low)}..${String(high)}`,
    withinBound: admitted >= low && admitted <= high,
  };
}

async function grpcRows(): Promise<GrpcRow[]> {
  const dir = await mkdtemp(join(tmpdir(), "rls-hot-key-"));
  await mkdir(join(dir, "config"));
  await writeFile(join(dir, "config", "hot.yaml"), grpcConfig);
  const tools: LoadTool[] = [];
  for (const name of (process.env["BENCH_HOT_LOAD"] ?? "ghz,h2load").split(","))
    if (name === "ghz")
      tools.push({
        kind: "ghz",
        path: tool(join(repoRoot, ".bench", "bin"), "ghz"),
      });
    else if (name === "h2load") tools.push({ kind: "h2load", workDir: dir });
    else
      throw new Error(
        `BENCH_HOT_LOAD: unknown load tool ${name} (ghz, h2load)`,
      );
  const rows: GrpcRow[] = [];
  try {
    for (const kind of ["kv", "mc"] as const) {
      const store = await startStore(kind, {});
      const replicas: Replica[] = [];
      try {
        for (let i = 0; i < grpcReplicas; i++)
          replicas.push(await startService(dir, kind, store.address));
        for (const load of tools) {
          await loadAll(load, replicas, "plain", "warm", 2);
          await loadAll(load, replicas, "leased", "warm", 2);
          for (let round = 1; round <= grpcRounds; round++)
            for (const lease of [false, true]) {
              const row = await grpcRow(
                load,
                store,
                replicas,
                "throughput",
                lease,
                round,
              );
              rows.push(row);
              console.error(JSON.stringify(row));
            }
          for (const lease of [false, true]) {
            const row = await grpcRow(
              load,
              store,
              replicas,
              "accuracy",
              lease,
              1,
            );
            rows.push(row);
            console.error(JSON.stringify(row));
          }
        }
      } finally {
        await Promise.all(replicas.map((r) => r.child.stop()));
        await store.stop();
      }
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  return rows;
}

function grpcTable(rows: readonly GrpcRow[]): string {
  const lines = [
    "| load | store | phase | lease | round | decisions | decisions/s (3 replicas) | store increments / decision | CPU µs / decision: services | load tool | store | admitted | bound |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
  ];
  for (const r of rows)
    lines.push(
      `| ${r.tool} | ${r.store} | ${r.phase} | ${r.lease ? "yes" : "no"} | ${String(r.round)} | ${String(r.decisions)}${r.nonOk > 0 ? ` (${String(r.nonOk)} not OK)` : ""} | ${String(r.perSecond)} | ${r.opsPerDecision.toPrecision(2)} | ${r.serviceCpuUs.toFixed(1)} | ${r.loadCpuUs.toFixed(1)} | ${r.storeCpuUs.toFixed(1)} | ${r.admitted === undefined ? "" : `${String(r.admitted)} of ${String(r.demand ?? 0)}`} | ${r.bound === undefined ? "" : `${r.bound}${r.withinBound === true ? " (within)" : " (**outside**)"}`} |`,
    );
  return lines.join("\n");
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const onlyGrpc = args.includes("--grpc");
  const onlyPipeline = args.includes("--pipeline");
  const sections: string[] = [];
  const json: Record<string, unknown> = {};
  if (!onlyGrpc) {
    const rows = await pipelineRows();
    json["pipeline"] = rows;
    sections.push(
      `In process (3 pipelines, no gRPC), ${String(inFlight)} in flight each:\n\n${pipelineTable(rows)}`,
    );
  }
  if (!onlyPipeline) {
    const rows = await grpcRows();
    json["grpc"] = rows;
    sections.push(
      `Through 3 service processes over gRPC (WORKERS=1 each, one load generator (ghz, then h2load) per replica at once: ${String(grpcInFlight)} in flight over ${String(grpcConnections)} connections, ${String(grpcSeconds)} s per row; load generators and services share the machine's cores):\n\n${grpcTable(rows)}`,
    );
  }
  const markdown = `${sections.join("\n\n")}\n`;
  console.log(markdown);
  const out = join(repoRoot, ".bench");
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, "hot-key.md"), markdown);
  writeFileSync(
    join(out, "hot-key.json"),
    `${JSON.stringify(json, null, 2)}\n`,
  );
}

await main();
