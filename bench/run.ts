// `make bench`: measures the Go reference service and ours in one run, one target after the
// other, under independent load tools, and prints markdown tables (see bench/README.md).
//
// Targets: the floor (a bare node:http2 handler; h2load and ghz), the reference on kv
// (redis-server), ours on kv, ours on kv with WORKERS=2, ours on memory, ours on mc
// (memcached). Each under ghz: closed loop at BENCH_IN_FLIGHT calls in flight with one key and
// with every value distinct, and a fixed rate (BENCH_RPS) with distinct values. Then a real
// Envoy running examples/envoy/envoy.yaml in front of a trivial upstream, asking the reference
// and ours (kv), under vegeta: a rate sweep that stops after the first rate letting a request
// through unchecked (the Envoy capacity rows). Last, the goals of issue 34 beside what the run
// measured. Everything listens on 127.0.0.1 only and every load is bounded in time.
import { execFileSync } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { create, toBinary } from "@bufbuild/protobuf";
import { Redis } from "ioredis";
import {
  kvOverrideDomainsKey,
  kvOverridesKey,
  versionField,
} from "../src/backends/kv/kv-override-commands.js";
import { RateLimitRequestSchema } from "../src/proto.js";
import { envoyConfig, startEnvoy, type Envoy } from "./envoy.js";
import {
  percentilesOfNs,
  runGhz,
  runVegeta,
  tool,
  type LoadResult,
} from "./load-tools.js";
import {
  freePort,
  killAll,
  runTool,
  startProcess,
  treeCpuSeconds,
  treeMemory,
  waitForHttp200,
  waitForPort,
  type Started,
} from "./procs.js";

const root = join(import.meta.dirname, "..", "..");
const env = process.env;
const quick = env["BENCH_QUICK"] === "1";

/** Reads a positive number from the environment. */
function setting(name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value <= 0)
    throw new Error(`${name} must be a positive number, got "${raw}"`);
  return value;
}

/** Seconds of each measured load. */
const seconds = setting("BENCH_DURATION", quick ? 2 : 10);
/** Seconds of warm-up load per target (not reported). */
const warmupSeconds = setting("BENCH_WARMUP", quick ? 1 : 3);
const inFlight = setting("BENCH_IN_FLIGHT", 64);
const connections = setting("BENCH_CONNECTIONS", 4);
const fixedRate = setting("BENCH_RPS", 2000);
const h2loadCalls = setting("BENCH_CALLS", quick ? 10_000 : 100_000);
const envoySeconds = setting("BENCH_ENVOY_DURATION", quick ? 2 : 10);
/** Reads a comma-separated list of positive rates per second. */
function rates(name: string, fallback: string): readonly number[] {
  const list = (env[name] ?? fallback)
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "")
    .map(Number);
  if (list.length === 0 || list.some((n) => !Number.isFinite(n) || n <= 0))
    throw new Error(
      `${name} must be a comma-separated list of positive rates, got "${env[name] ?? ""}"`,
    );
  return list;
}
/**
 * The Envoy capacity sweep's rates, in order: one vegeta run per rate until the first that
 * lets a request through unchecked or fails (see {@link envoyVerdict}).
 */
const envoyRates = rates(
  "BENCH_ENVOY_RATES",
  quick ? "1000,2000" : "1000,2000,3000,4000,5000,6000,7000,8000",
);
/** The RLQS rows' rates (every rate is run: the service answers reports, not requests). */
const rlqsRates = rates("BENCH_RLQS_RATES", quick ? "1000" : "1000,2000");
/**
 * The container image's size in MiB: BENCH_IMAGE_SIZE_MIB when given, else what `podman image
 * inspect` says of the image `make image` built (RLS_IMAGE, default
 * localhost/ratelimit-ts:latest), if podman has it; the image goal is printed only with one.
 */
const imageSize: { mib: number; source: string } | undefined =
  env["BENCH_IMAGE_SIZE_MIB"] !== undefined &&
  env["BENCH_IMAGE_SIZE_MIB"] !== ""
    ? {
        mib: setting("BENCH_IMAGE_SIZE_MIB", 1),
        source: "BENCH_IMAGE_SIZE_MIB",
      }
    : inspectImageSize(env["RLS_IMAGE"] ?? "localhost/ratelimit-ts:latest");

/** The size of a local image in MiB (`podman image inspect`), or undefined without one. */
function inspectImageSize(
  image: string,
): { mib: number; source: string } | undefined {
  try {
    const bytes = Number(
      execFileSync(
        "podman",
        ["image", "inspect", "--format", "{{.Size}}", image],
        {
          encoding: "utf8",
          stdio: ["ignore", "pipe", "ignore"],
          timeout: 10_000,
        },
      ).trim(),
    );
    return Number.isFinite(bytes) && bytes > 0
      ? { mib: bytes / 1048576, source: `podman image inspect ${image}` }
      : undefined;
  } catch {
    return undefined;
  }
}
/** When the run began (`performance.now()` ms), for the footer's total time. */
const runStarted = performance.now();
/** Which targets to run (comma-separated ids); all by default. */
const only = new Set(
  (env["BENCH_TARGETS"] ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== ""),
);
const wanted = (id: string): boolean => only.size === 0 || only.has(id);
/** Targets measured only when `BENCH_TARGETS` names them (not part of the default run). */
const named = (id: string): boolean => only.has(id);
/** Which ghz loads to run (comma-separated load ids); all by default. */
const onlyLoads = new Set(
  (env["BENCH_LOADS"] ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== ""),
);

const work = mkdtempSync(join(tmpdir(), "rls-bench-"));
let logFiles = 0;
/** A new file in the work directory for one process's output. */
function logFile(name: string): string {
  logFiles += 1;
  return join(work, `${name}-${logFiles}.log`);
}
/**
 * Statistics: `log` (default) leaves both services on their sink for "no sink configured"
 * (the reference's USE_STATSD=false logging sink, our USE_PUSHSTATS=false stdout sink: both
 * write timer lines: the reference one per call, ours a summary per flush); `off` sets
 * DISABLE_STATS=true on both.
 */
const statsMode = env["BENCH_STATS"] ?? "log";
if (statsMode !== "log" && statsMode !== "off")
  throw new Error(`BENCH_STATS must be log or off, got "${statsMode}"`);
const statsEnv: Record<string, string> =
  statsMode === "off" ? { DISABLE_STATS: "true" } : {};
const benchBin = join(root, ".bench", "bin");

const benchConfig = `
domain: bench
descriptors:
  - key: remote_address
    rate_limit: { unit: second, requests_per_unit: 1000000 }
  - key: path
    value: /api/v1/*
    share_threshold: true
    rate_limit: { unit: minute, requests_per_unit: 1000000000 }
`;
// Ours only (the reference refuses these keys, so only our runtime directory has this file):
// the limits of issue 23 on one key each, at rates no load reaches, so every call charges.
const extensionsConfig = `
domain: bench_ext
descriptors:
  - key: bucket
    rate_limit:
      unit: second
      requests_per_unit: 1000000
      algorithm: token_bucket
      burst: 1000000
  - key: two
    rate_limits:
      - { unit: second, requests_per_unit: 1000000 }
      - { unit: hour, requests_per_unit: 1000000000 }
  - key: month
    rate_limit: { unit: month, requests_per_unit: 1000000000, time_zone: Europe/Berlin }
`;
// The domain of examples/envoy/rlqs.yaml (ours only): every tenant 100/s across all Envoys.
const rlqsDomainConfig = `
domain: rlqs
descriptors:
  - key: tenant
    rate_limit: { unit: second, requests_per_unit: 100 }
`;
/** Tenants the RLQS row's requests spread over (one bucket each). */
const rlqsTenants = 10;
// The domain of examples/envoy/envoy.yaml; vegeta's requests carry remote_address only.
const envoyDomainConfig = `
domain: rl
descriptors:
  - key: remote_address
    rate_limit: { unit: second, requests_per_unit: 1000000 }
`;

/** The reference binary: $BENCH_REFERENCE, else shared/reference/bin next to the repository. */
function referenceBinary(): string | undefined {
  const candidates = [
    env["BENCH_REFERENCE"],
    join(root, "..", "shared", "reference", "bin", "ratelimit-reference"),
    join(root, "..", "..", "shared", "reference", "bin", "ratelimit-reference"),
  ];
  return candidates.find((c) => c !== undefined && c !== "" && existsSync(c));
}

const oneKeyRequest = JSON.stringify({
  domain: "bench",
  descriptors: [{ entries: [{ key: "remote_address", value: "10.1.2.3" }] }],
});
// ghz fills in the call's sequence number: every call asks about a value never seen before.
const distinctRequest = JSON.stringify({
  domain: "bench",
  descriptors: [
    { entries: [{ key: "remote_address", value: "v{{.RequestNumber}}" }] },
  ],
});

// Refunds (`is_negative_hits`, Envoy >= 1.38): every call gives one hit back to one key (the
// counter stays at 0: the clamped decrement on every call). Ours only: the reference's API
// predates the field.
const refundRequest = JSON.stringify({
  domain: "bench",
  descriptors: [
    {
      entries: [{ key: "remote_address", value: "10.1.2.3" }],
      hitsAddend: "1",
      isNegativeHits: true,
    },
  ],
});

/** One call on one key of the extensions domain (`bench_ext`). */
function extensionRequest(key: string): string {
  return JSON.stringify({
    domain: "bench_ext",
    descriptors: [{ entries: [{ key, value: "10.1.2.3" }] }],
  });
}

interface Load {
  readonly id:
    | "one-key"
    | "distinct"
    | "fixed"
    | "refunds"
    | "token-bucket"
    | "two-limits"
    | "calendar";
  readonly label: string;
  readonly request: string;
  readonly rps?: number;
  /** Only for our targets (a feature the reference and the floor do not have). */
  readonly oursOnly?: boolean;
}

const loads: readonly Load[] = [
  {
    id: "one-key",
    label: `${inFlight} in flight, one key`,
    request: oneKeyRequest,
  },
  {
    id: "distinct",
    label: `${inFlight} in flight, distinct values`,
    request: distinctRequest,
  },
  {
    id: "fixed",
    label: `fixed ${fixedRate}/s, distinct values`,
    request: distinctRequest,
    rps: fixedRate,
  },
  {
    id: "refunds",
    label: `${inFlight} in flight, refunds (one key)`,
    request: refundRequest,
    oursOnly: true,
  },
  {
    id: "token-bucket",
    label: `${inFlight} in flight, token bucket (one key)`,
    request: extensionRequest("bucket"),
    oursOnly: true,
  },
  {
    id: "two-limits",
    label: `${inFlight} in flight, 2 limits per descriptor (one key)`,
    request: extensionRequest("two"),
    oursOnly: true,
  },
  {
    id: "calendar",
    label: `${inFlight} in flight, calendar month in a time zone (one key)`,
    request: extensionRequest("month"),
    oursOnly: true,
  },
];

interface Row {
  readonly target: string;
  readonly load: string;
  readonly loadId: string;
  readonly result: LoadResult;
  /** CPU µs per answered call, summed over the target's process tree. */
  readonly cpuUs: number;
  /** CPU µs per answered call of the counter store (redis-server / memcached), if any. */
  readonly storeCpuUs: number | undefined;
  /** Peak RSS of the target's process tree so far, MiB. */
  readonly peakMiB: number;
}

interface MemoryRow {
  readonly target: string;
  readonly processes: number;
  readonly idleMiB: number;
  readonly peakMiB: number;
  readonly maxProcessPeakMiB: number;
}

interface EnvoyRow {
  readonly target: string;
  readonly rate: number;
  readonly result: LoadResult;
  readonly ok: number;
  readonly overLimit: number;
  readonly error: number;
  readonly unchecked: number;
  /** Connections Envoy opened to the service during the load. */
  readonly connections: number;
  /** Connections the service closed with GOAWAY during the load. */
  readonly goaways: number;
  /** The service's CPU µs per request (process tree). */
  readonly cpuUs: number;
  /** Why this rate was not clean ({@link envoyVerdict}); `undefined`: nothing unchecked. */
  readonly failure: string | undefined;
}

/** An Envoy rate whose load run itself failed (vegeta did not finish): ends the sweep. */
interface EnvoyFailure {
  readonly target: string;
  readonly rate: number;
  readonly reason: string;
}

const rows: Row[] = [];
const memoryRows: MemoryRow[] = [];
const envoyRows: EnvoyRow[] = [];
const envoyFailures: EnvoyFailure[] = [];

interface RlqsRow {
  readonly target: string;
  readonly rate: number;
  readonly result: LoadResult;
  /** Requests Envoy let through (200) and refused from its token buckets (429). */
  readonly ok: number;
  readonly overLimit: number;
  /** The service's CPU µs per request Envoy received. */
  readonly cpuUsPerRequest: number;
  /** The service's CPU µs per bucket per 5 s report (Envoy 1.40's fixed interval). */
  readonly cpuUsPerBucketReport: number;
}
const rlqsRows: RlqsRow[] = [];
const notes: string[] = [];

const mib = (kib: number): number => Math.round(kib / 1024);

/** A started gRPC target. */
interface Target {
  readonly process: Started;
  readonly grpcPort: number;
}

/** The counter store a target uses, for its CPU column. */
interface Store {
  readonly pid: number;
  flush(): Promise<void>;
}

function progress(message: string): void {
  process.stderr.write(`bench: ${message}\n`);
}

/**
 * Writes a runtime directory: the config every target reads, plus, for ours (`extensions`),
 * the domain of the loads only ours can answer.
 */
function runtimeRoot(extensions: boolean): string {
  const dir = join(work, extensions ? "runtime-ours" : "runtime");
  mkdirSync(join(dir, "config"), { recursive: true });
  writeFileSync(join(dir, "config", "bench.yaml"), benchConfig);
  writeFileSync(join(dir, "config", "rl.yaml"), envoyDomainConfig);
  if (extensions) {
    writeFileSync(join(dir, "config", "bench_ext.yaml"), extensionsConfig);
    writeFileSync(join(dir, "config", "rlqs.yaml"), rlqsDomainConfig);
  }
  return dir;
}

/** Environment both services understand with the same names. */
async function commonEnv(
  runtime: string,
): Promise<{ env: Record<string, string>; grpc: number; http: number }> {
  const grpc = await freePort();
  const http = await freePort();
  return {
    grpc,
    http,
    env: {
      HOST: "127.0.0.1",
      PORT: String(http),
      GRPC_HOST: "127.0.0.1",
      GRPC_PORT: String(grpc),
      DEBUG_HOST: "127.0.0.1",
      DEBUG_PORT: String(await freePort()),
      RUNTIME_ROOT: runtime,
      RUNTIME_SUBDIRECTORY: "",
      RUNTIME_APPDIRECTORY: "config",
      RUNTIME_WATCH_ROOT: "false",
      LOG_LEVEL: "warn",
    },
  };
}

/**
 * Starts ours as a user does, through `bin/ratelimit` (dist/src/main.js with the V8 heap flags
 * it sets, docs/performance.md), with `extra` settings; resolves once healthy.
 */
async function startOurs(
  runtime: string,
  extra: Record<string, string>,
  startTimeoutMs = 30_000,
): Promise<Target> {
  const common = await commonEnv(runtime);
  const started = startProcess(
    join(root, "bin", "ratelimit"),
    [],
    { ...common.env, USE_PUSHSTATS: "false", ...statsEnv, ...extra },
    logFile("ours"),
  );
  await waitForHttp200(
    `http://127.0.0.1:${common.http}/healthcheck`,
    started,
    startTimeoutMs,
  );
  await waitForPort(common.grpc, started);
  return { process: started, grpcPort: common.grpc };
}

/** Starts the reference with the reference's setting names; resolves once healthy. */
async function startReference(
  binary: string,
  runtime: string,
  kvAddress: string,
): Promise<Target> {
  const common = await commonEnv(runtime);
  const started = startProcess(
    binary,
    [],
    {
      ...common.env,
      USE_STATSD: "false",
      ...statsEnv,
      BACKEND_TYPE: "redis",
      REDIS_SOCKET_TYPE: "tcp",
      REDIS_URL: kvAddress,
    },
    logFile("reference"),
  );
  await waitForHttp200(`http://127.0.0.1:${common.http}/healthcheck`, started);
  await waitForPort(common.grpc, started);
  return { process: started, grpcPort: common.grpc };
}

/** Runs the ghz loads against a started target and records its rows. */
async function measure(
  name: string,
  target: Target,
  store: Store | undefined,
  idleBefore?: ReturnType<typeof treeMemory>,
): Promise<void> {
  const ghz = tool(benchBin, "ghz");
  const address = `127.0.0.1:${target.grpcPort}`;
  const pid = target.process.pid;
  const idle = idleBefore ?? treeMemory(pid);
  progress(`${name}: warm-up ${warmupSeconds}s`);
  await runGhz({
    ghz,
    root,
    address,
    inFlight,
    connections,
    seconds: warmupSeconds,
    request: distinctRequest,
  });
  for (const load of loads) {
    if (load.oursOnly === true && !name.startsWith("ours")) continue;
    if (onlyLoads.size > 0 && !onlyLoads.has(load.id)) continue;
    progress(`${name}: ${load.label}, ${seconds}s`);
    const cpu0 = treeCpuSeconds(pid);
    const store0 = store !== undefined ? treeCpuSeconds(store.pid) : 0;
    const result = await runGhz({
      ghz,
      root,
      address,
      inFlight,
      connections,
      seconds,
      request: load.request,
      ...(load.rps !== undefined ? { rps: load.rps } : {}),
    });
    const cpu1 = treeCpuSeconds(pid);
    const store1 = store !== undefined ? treeCpuSeconds(store.pid) : 0;
    const calls = Math.max(1, result.count);
    rows.push({
      target: name,
      load: load.label,
      loadId: load.id,
      result,
      cpuUs: ((cpu1 - cpu0) * 1e6) / calls,
      storeCpuUs:
        store !== undefined ? ((store1 - store0) * 1e6) / calls : undefined,
      peakMiB: mib(treeMemory(pid).peakKiB),
    });
  }
  const end = treeMemory(pid);
  memoryRows.push({
    target: name,
    processes: end.processes,
    idleMiB: mib(idle.rssKiB),
    peakMiB: mib(end.peakKiB),
    maxProcessPeakMiB: mib(end.maxProcessPeakKiB),
  });
}

/** The floor: bare node:http2 under h2load (fixed body, as before) and under ghz. */
async function floor(): Promise<void> {
  const port = await freePort();
  const started = startProcess(
    process.execPath,
    [join(root, "dist", "bench", "floor.js"), String(port)],
    {},
    logFile("floor"),
  );
  try {
    await waitForPort(port, started);
    const idle = treeMemory(started.pid);
    const h2load = await h2loadRow(started.pid, port);
    if (h2load !== undefined) rows.push(h2load);
    await measure(
      "floor (bare node:http2)",
      {
        process: started,
        grpcPort: port,
      },
      undefined,
      idle,
    );
  } finally {
    await started.stop();
  }
}

/** h2load with one fixed request body at the same calls in flight, against the floor. */
async function h2loadRow(pid: number, port: number): Promise<Row | undefined> {
  const message = toBinary(
    RateLimitRequestSchema,
    create(RateLimitRequestSchema, {
      domain: "bench",
      descriptors: [
        { entries: [{ key: "remote_address", value: "10.1.2.3" }] },
      ],
    }),
  );
  const frame = Buffer.alloc(5 + message.length);
  frame.writeUInt32BE(message.length, 1);
  frame.set(message, 5);
  const body = join(work, "request.bin");
  writeFileSync(body, frame);
  const log = join(work, "h2load.log");
  const perConnection = Math.max(1, Math.round(inFlight / connections));
  const args = [
    "-n",
    String(h2loadCalls),
    "-c",
    String(connections),
    "-m",
    String(perConnection),
    "-H",
    "content-type: application/grpc",
    "-H",
    "te: trailers",
    "-d",
    body,
    "--log-file",
    log,
    `http://127.0.0.1:${port}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`,
  ];
  progress(`floor: h2load, ${h2loadCalls} calls`);
  const cpu0 = treeCpuSeconds(pid);
  const run = await runTool("h2load", args, 120_000).catch((err: unknown) => ({
    code: -1,
    stdout: "",
    stderr: String(err),
  }));
  const cpu1 = treeCpuSeconds(pid);
  if (run.code !== 0) {
    notes.push(
      `h2load floor row not measured: ${run.stderr.split("\n")[0] ?? ""}`,
    );
    return undefined;
  }
  const rate = /finished in [\d.]+\w+, ([\d.]+) req\/s/.exec(run.stdout);
  const lines = readFileSync(log, "utf8").trim().split("\n");
  const entries = lines.map((l) => l.split("\t"));
  const nonOk = entries.filter((e) => e[1] !== "200").length;
  return {
    target: "floor (bare node:http2)",
    load: `h2load, ${inFlight} in flight, one fixed body`,
    loadId: "h2load",
    result: {
      count: entries.length,
      perSecond: Math.round(Number(rate?.[1] ?? 0)),
      nonOk,
      statuses: { "200": entries.length - nonOk },
      // h2load logs microseconds.
      ...percentilesOfNs(entries.map((e) => Number(e[2]) * 1000)),
    },
    cpuUs: ((cpu1 - cpu0) * 1e6) / Math.max(1, entries.length),
    storeCpuUs: undefined,
    peakMiB: mib(treeMemory(pid).peakKiB),
  };
}

/** Starts redis-server on a free loopback port without persistence. */
async function startRedis(): Promise<{
  started: Started;
  store: Store;
  address: string;
}> {
  const port = await freePort();
  const dir = join(work, "redis");
  mkdirSync(dir, { recursive: true });
  const started = startProcess(
    "redis-server",
    [
      "--port",
      String(port),
      "--bind",
      "127.0.0.1",
      "--save",
      "",
      "--appendonly",
      "no",
      "--dir",
      dir,
    ],
    {},
    logFile("redis"),
  );
  await waitForPort(port, started);
  return {
    started,
    address: `127.0.0.1:${port}`,
    store: {
      pid: started.pid,
      async flush() {
        const run = await runTool(
          "redis-cli",
          ["-h", "127.0.0.1", "-p", String(port), "FLUSHALL"],
          30_000,
        );
        if (run.code !== 0) throw new Error(`FLUSHALL failed: ${run.stderr}`);
      },
    },
  };
}

/**
 * Writes `count` run-time overrides of domain `bench` (`remote_address=override-<i>`, 10 per
 * second) straight into the kv store in the layout the service reads at start-up
 * (src/backends/kv/kv-override-commands.ts); none matches a value the loads send, so every
 * decision pays the probe of a miss, the common case. Returns the seconds it took.
 */
async function preloadOverrides(
  address: string,
  count: number,
): Promise<number> {
  const started = performance.now();
  const [host, port] = address.split(":");
  const client = new Redis({ host: host ?? "127.0.0.1", port: Number(port) });
  try {
    const key = kvOverridesKey("", "bench");
    const updateTime = new Date().toISOString();
    const batch = 10_000;
    for (let from = 0; from < count; from += batch) {
      const fields: string[] = [];
      for (let i = from; i < Math.min(count, from + batch); i++) {
        fields.push(
          `remote_address=override-${i}`,
          JSON.stringify({
            domain: "bench",
            entries: [{ key: "remote_address", value: `override-${i}` }],
            limit: { requestsPerUnit: 10, unit: "SECOND" },
            reason: "bench",
            actor: "bench",
            updateTime,
            rule: "bench.remote_address",
          }),
        );
      }
      await client.hset(key, ...fields);
    }
    await client.hset(key, versionField, "1");
    await client.sadd(kvOverrideDomainsKey(""), "bench");
  } finally {
    client.disconnect();
  }
  return (performance.now() - started) / 1000;
}

/** Starts memcached on a free loopback port (TCP only). */
async function startMemcached(): Promise<{
  started: Started;
  store: Store;
  address: string;
}> {
  const port = await freePort();
  const started = startProcess(
    "memcached",
    [
      "-l",
      "127.0.0.1",
      "-p",
      String(port),
      "-U",
      "0",
      ...(process.getuid?.() === 0 ? ["-u", "root"] : []),
    ],
    {},
    logFile("memcached"),
  );
  await waitForPort(port, started);
  return {
    started,
    address: `127.0.0.1:${port}`,
    store: { pid: started.pid, flush: () => Promise.resolve() },
  };
}

/** Runs `body` with a started target and always stops it. */
async function withTarget(
  name: string,
  start: () => Promise<Target>,
  body: (target: Target) => Promise<void>,
): Promise<void> {
  progress(`${name}: starting`);
  let target: Target | undefined;
  try {
    target = await start();
    await body(target);
  } catch (err) {
    notes.push(
      `${name} not (fully) measured: ${err instanceof Error ? (err.message.split("\n")[0] ?? "") : String(err)}`,
    );
  } finally {
    await target?.process.stop();
  }
}

/**
 * Runs `body` with a trivial upstream and Envoy in front of it asking `target`, from
 * examples/envoy/envoy.yaml (or `example`), with loopback ports; stops both after.
 */
async function withEnvoy(
  target: Target,
  example: string | undefined,
  body: (envoy: Envoy, dir: string) => Promise<void>,
): Promise<void> {
  const upstreamPort = await freePort();
  const upstream = startProcess(
    process.execPath,
    [join(root, "dist", "bench", "upstream.js"), String(upstreamPort)],
    {},
    logFile("upstream"),
  );
  const dir = mkdtempSync(join(work, "envoy-"));
  const adminPort = await freePort();
  const listenerPort = await freePort();
  try {
    await waitForPort(upstreamPort, upstream);
    const envoy = await startEnvoy(
      dir,
      envoyConfig({
        ...(example !== undefined ? { example } : {}),
        adminPort,
        listenerPort,
        ratelimit: { host: "127.0.0.1", port: target.grpcPort },
        backend: { host: "127.0.0.1", port: upstreamPort },
      }),
      adminPort,
      listenerPort,
    );
    try {
      await body(envoy, dir);
    } finally {
      await envoy.stop();
    }
  } finally {
    await upstream.stop();
  }
}

/**
 * Whether one Envoy rate was clean, and if not why: a request let through unchecked
 * (`failure_mode_allowed`), an RLS error, a request Envoy's filter did not count, an answer
 * other than 2xx/429, a vegeta error, or vegeta not offering the rate (below 95 % of it: then
 * the client, not the service, bounds the row). `undefined` when clean.
 */
function envoyVerdict(row: Omit<EnvoyRow, "failure">): string | undefined {
  const r = row.result;
  const reasons: string[] = [];
  if (row.unchecked > 0) reasons.push(`${row.unchecked} let through unchecked`);
  if (row.error > 0) reasons.push(`${row.error} RLS errors`);
  // Every request Envoy saw is counted once: ok, over_limit, or error (the RLS call failed).
  const counted = row.ok + row.overLimit + row.error;
  if (counted < r.count)
    reasons.push(
      `${r.count - counted} of ${r.count} not counted by Envoy's filter`,
    );
  if (r.nonOk > 0) reasons.push(`${r.nonOk} answers not 2xx/429`);
  if ((r.errors ?? []).length > 0) reasons.push("vegeta errors (notes)");
  if (r.perSecond < 0.95 * row.rate)
    reasons.push(`vegeta offered only ${r.perSecond}/s`);
  return reasons.length > 0 ? reasons.join(", ") : undefined;
}

/**
 * The Envoy rows: Envoy (examples/envoy/envoy.yaml: 20 ms filter timeout, fail-open) asking
 * `target` under vegeta, one run per rate of {@link envoyRates}, stopping after the first rate
 * that is not clean ({@link envoyVerdict}). Unchecked requests are read from Envoy's own
 * counters (`cluster.backend.ratelimit.*`, admin port) before and after each rate.
 */
async function throughEnvoy(name: string, target: Target): Promise<void> {
  const vegeta = tool(benchBin, "vegeta");
  await withEnvoy(target, undefined, async (envoy, dir) => {
    const url = `${envoy.url}/`;
    const prefix = "cluster.backend.ratelimit.";
    const count = async (): Promise<Record<string, number>> =>
      envoy.counters("cluster.");
    // Warm-up at the first rate: connections from Envoy opened, the target's JIT warm.
    const warmRate = Math.min(...envoyRates);
    progress(`${name} through Envoy: warm-up ${warmRate}/s, ${warmupSeconds}s`);
    await runVegeta(
      vegeta,
      url,
      warmRate,
      warmupSeconds,
      join(dir, "warm.bin"),
    );
    for (const rate of envoyRates) {
      progress(`${name} through Envoy: ${rate}/s, ${envoySeconds}s`);
      const before = await count();
      const cpu0 = treeCpuSeconds(target.process.pid);
      let result: LoadResult;
      try {
        result = await runVegeta(
          vegeta,
          url,
          rate,
          envoySeconds,
          join(dir, `${rate}.bin`),
        );
      } catch (err) {
        const reason = err instanceof Error ? err.message : String(err);
        envoyFailures.push({
          target: name,
          rate,
          reason: reason.split("\n")[0] ?? "",
        });
        return;
      }
      const cpu1 = treeCpuSeconds(target.process.pid);
      const after = await count();
      const delta = (counter: string, p = prefix): number =>
        (after[p + counter] ?? 0) - (before[p + counter] ?? 0);
      for (const error of result.errors ?? [])
        notes.push(`${name} through Envoy at ${rate}/s: vegeta: ${error}`);
      const measured = {
        target: name,
        rate,
        result,
        ok: delta("ok"),
        overLimit: delta("over_limit"),
        error: delta("error"),
        unchecked: delta("failure_mode_allowed"),
        connections: delta("upstream_cx_total", "cluster.ratelimit."),
        goaways: delta("upstream_cx_close_notify", "cluster.ratelimit."),
        cpuUs: ((cpu1 - cpu0) * 1e6) / Math.max(1, result.count),
      };
      const failure = envoyVerdict(measured);
      envoyRows.push({ ...measured, failure });
      if (failure !== undefined) return;
    }
  });
}

/**
 * The RLQS rows (ours only): Envoy running examples/envoy/rlqs.yaml against `target`, vegeta
 * at the Envoy rows' rates over {@link rlqsTenants} tenants (one bucket each, 100/s each
 * across the fleet): Envoy decides every request locally from the token buckets the service
 * pushes, so the service's work is the reports (one per bucket every 5 s), not the requests.
 */
async function throughEnvoyRlqs(name: string, target: Target): Promise<void> {
  const vegeta = tool(benchBin, "vegeta");
  await withEnvoy(
    target,
    join(root, "examples", "envoy", "rlqs.yaml"),
    async (envoy, dir) => {
      const url = `${envoy.url}/`;
      const targets = Array.from(
        { length: rlqsTenants },
        (_, i) => `GET ${url}\nx-tenant: t${String(i)}\n`,
      ).join("\n");
      const warmRate = Math.min(...rlqsRates);
      progress(
        `${name} through Envoy (RLQS): warm-up ${warmRate}/s, ${warmupSeconds + 6}s`,
      );
      // Long enough for every bucket's subscription and a first measured report.
      await runVegeta(
        vegeta,
        url,
        warmRate,
        warmupSeconds + 6,
        join(dir, "warm.bin"),
        targets,
      );
      for (const rate of rlqsRates) {
        progress(`${name} through Envoy (RLQS): ${rate}/s, ${envoySeconds}s`);
        const cpu0 = treeCpuSeconds(target.process.pid);
        const result = await runVegeta(
          vegeta,
          url,
          rate,
          envoySeconds,
          join(dir, `rlqs-${rate}.bin`),
          targets,
        );
        const cpuUs = (treeCpuSeconds(target.process.pid) - cpu0) * 1e6;
        for (const error of result.errors ?? [])
          notes.push(`${name} RLQS at ${rate}/s: vegeta: ${error}`);
        const reports = rlqsTenants * Math.max(1, envoySeconds / 5);
        rlqsRows.push({
          target: name,
          rate,
          result,
          ok: result.statuses["200"] ?? 0,
          overLimit: result.statuses["429"] ?? 0,
          cpuUsPerRequest: cpuUs / Math.max(1, result.count),
          cpuUsPerBucketReport: cpuUs / reports,
        });
      }
    },
  );
}

const fmt = (n: number, digits = 2): string =>
  Number.isFinite(n) ? n.toFixed(digits) : "";

/** One target's Envoy capacity: the highest rate of the sweep at which nothing went unchecked. */
interface EnvoyCapacity {
  readonly target: string;
  /** Requests per second; 0 when the first rate was already not clean. */
  readonly rate: number;
  /** The first rate that was not clean and why; `undefined`: every rate of the sweep was clean. */
  readonly firstFailing:
    { readonly rate: number; readonly reason: string } | undefined;
}

/** `target`'s capacity from its Envoy rows, or `undefined` when it was not swept. */
function envoyCapacity(target: string): EnvoyCapacity | undefined {
  const swept = envoyRows.filter((r) => r.target === target);
  const failed = envoyFailures.find((f) => f.target === target);
  if (swept.length === 0 && failed === undefined) return undefined;
  let rate = 0;
  for (const row of swept) {
    if (row.failure !== undefined)
      return {
        target,
        rate,
        firstFailing: { rate: row.rate, reason: row.failure },
      };
    rate = Math.max(rate, row.rate);
  }
  return {
    target,
    rate,
    firstFailing:
      failed !== undefined
        ? { rate: failed.rate, reason: `vegeta failed: ${failed.reason}` }
        : undefined,
  };
}

/** One line of the goals table (issue 34): what was measured against what it should be. */
interface Goal {
  readonly goal: string;
  readonly measured: string;
  readonly bound: string;
  /** `undefined`: not measured in this run, or not decidable from it. */
  readonly met: boolean | undefined;
}

/** The target names the goals compare (as {@link main} names them). */
const names = {
  reference: "reference, kv",
  kv: "ours, kv",
  memory: "ours, memory",
  day2Without: "ours, kv, no subscriber (TOP_OFFENDERS_K=0)",
  day2With: "ours, kv, top offenders and a canary",
} as const;

/**
 * The goals of issue 34 ("Goals": ratios to the Go reference in one run), each computed from
 * this run's rows; a goal whose rows are missing says which targets it needs.
 */
function goals(): Goal[] {
  const find = (target: string, loadId: string): Row | undefined =>
    rows.find((r) => r.target === target && r.loadId === loadId);
  const out: Goal[] = [];
  /** `a ÷ b` of one column, against `≤ limit`. */
  const ratio = (
    goal: string,
    a: [target: string, loadId: string],
    b: [target: string, loadId: string],
    column: (r: Row) => number,
    unit: string,
    limit: number,
  ): void => {
    const x = find(...a);
    const y = find(...b);
    const bound = `≤ ${fmt(limit)}×`;
    if (x === undefined || y === undefined) {
      const missing = [x === undefined ? a[0] : "", y === undefined ? b[0] : ""]
        .filter((t) => t !== "")
        .join(" and ");
      out.push({
        goal,
        measured: `not measured (needs ${missing})`,
        bound,
        met: undefined,
      });
      return;
    }
    const value = column(x) / column(y);
    out.push({
      goal,
      measured: `${fmt(value)}× (${fmt(column(x), unit === "µs" ? 1 : 2)} ÷ ${fmt(column(y), unit === "µs" ? 1 : 2)} ${unit})`,
      bound,
      met: Number.isFinite(value) ? value <= limit : undefined,
    });
  };
  const cpu = (r: Row): number => r.cpuUs;
  const p99 = (r: Row): number => r.result.p99Ms;
  const p999 = (r: Row): number => r.result.p999Ms;
  ratio(
    "CPU per decision, kv, distinct values (ours ÷ reference)",
    [names.kv, "distinct"],
    [names.reference, "distinct"],
    cpu,
    "µs",
    0.2,
  );
  ratio(
    "CPU per decision, kv, fixed rate (ours ÷ reference)",
    [names.kv, "fixed"],
    [names.reference, "fixed"],
    cpu,
    "µs",
    0.3,
  );
  ratio(
    "p99, kv, fixed rate (ours ÷ reference)",
    [names.kv, "fixed"],
    [names.reference, "fixed"],
    p99,
    "ms",
    0.5,
  );
  ratio(
    "p99.9, kv, fixed rate (ours ÷ reference)",
    [names.kv, "fixed"],
    [names.reference, "fixed"],
    p999,
    "ms",
    0.5,
  );
  ratio(
    "CPU per decision, memory, fixed rate (ours on memory ÷ reference on kv)",
    [names.memory, "fixed"],
    [names.reference, "fixed"],
    cpu,
    "µs",
    0.29,
  );
  ratio(
    "p99, memory, fixed rate (ours on memory ÷ reference on kv)",
    [names.memory, "fixed"],
    [names.reference, "fixed"],
    p99,
    "ms",
    0.57,
  );
  for (const target of [names.memory, names.kv]) {
    const m = memoryRows.find((r) => r.target === target);
    for (const [what, limit, value] of [
      ["peak RSS under saturation", 72, m?.peakMiB],
      ["idle RSS after start", 56, m?.idleMiB],
    ] as const)
      out.push({
        goal: `${what} (${target}, process tree)`,
        measured:
          value !== undefined
            ? `${value} MiB`
            : `not measured (needs ${target})`,
        bound: `≤ ${limit} MiB`,
        met: value !== undefined ? value <= limit : undefined,
      });
  }
  for (const loadId of ["distinct", "fixed"])
    ratio(
      `CPU per decision, kv, ${loadId === "fixed" ? "fixed rate" : "distinct values"}, top offenders and a canary ÷ no subscriber`,
      [names.day2With, loadId],
      [names.day2Without, loadId],
      cpu,
      "µs",
      1.1,
    );
  out.push(envoyGoal());
  if (imageSize !== undefined)
    out.push({
      goal: "container image size",
      measured: `${fmt(imageSize.mib, 0)} MiB (${imageSize.source})`,
      bound: "≤ 160 MiB",
      met: imageSize.mib <= 160,
    });
  return out;
}

/** The Envoy capacity goal: ours (kv) ≥ 1.5× the reference's, from the two sweeps. */
function envoyGoal(): Goal {
  const goal =
    "Envoy capacity, highest rate with nothing unchecked (ours, kv ÷ reference)";
  const bound = "≥ 1.50×";
  const ours = envoyCapacity(names.kv);
  const ref = envoyCapacity(names.reference);
  if (ours === undefined || ref === undefined)
    return {
      goal,
      measured: "not measured (needs target envoy and the reference)",
      bound,
      met: undefined,
    };
  const top = Math.max(...envoyRates);
  const pair = `${ours.rate} ÷ ${ref.rate} /s`;
  if (ref.rate === 0)
    return {
      goal,
      measured: `${pair}: the reference was not clean at the sweep's first rate; lower BENCH_ENVOY_RATES`,
      bound,
      met: undefined,
    };
  const value = ours.rate / ref.rate;
  if (ref.firstFailing === undefined)
    return {
      goal,
      measured: `${fmt(value)}× (${pair}): the reference was clean up to the sweep's top rate (${top}/s); add higher BENCH_ENVOY_RATES`,
      bound,
      met: undefined,
    };
  if (ours.firstFailing === undefined)
    return {
      goal,
      measured: `≥ ${fmt(value)}× (${pair}; ours clean up to the sweep's top rate)`,
      bound,
      met: value >= 1.5 ? true : undefined,
    };
  return {
    goal,
    measured: `${fmt(value)}× (${pair})`,
    bound,
    met: value >= 1.5,
  };
}

function printTables(): string {
  const out: string[] = [];
  out.push(
    "| target | load | decisions/s | p50 ms | p90 ms | p99 ms | p99.9 ms | CPU µs/decision (tree) | store CPU µs/decision | peak RSS MiB (tree) | non-OK |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
  );
  for (const row of rows) {
    const r = row.result;
    out.push(
      `| ${row.target} | ${row.load} | ${r.perSecond} | ${fmt(r.p50Ms)} | ${fmt(r.p90Ms)} | ${fmt(r.p99Ms)} | ${fmt(r.p999Ms)} | ${fmt(row.cpuUs, 1)} | ${row.storeCpuUs !== undefined ? fmt(row.storeCpuUs, 1) : ""} | ${row.peakMiB} | ${r.nonOk} of ${r.count} |`,
    );
  }
  const reference = rows.filter((r) => r.target.startsWith("reference"));
  const ours = rows.filter((r) => r.target.startsWith("ours"));
  if (reference.length > 0 && ours.length > 0) {
    out.push(
      "",
      "Ours ÷ reference (kv), same load, same run (decisions/s: higher is better; the rest: lower is better):",
      "",
      "| target | load | decisions/s × | p50 × | p99 × | p99.9 × | CPU µs/decision × |",
      "|---|---|---|---|---|---|---|",
    );
    for (const row of ours) {
      const ref = reference.find((r) => r.loadId === row.loadId);
      if (ref === undefined) continue;
      const a = row.result;
      const b = ref.result;
      out.push(
        `| ${row.target} | ${row.load} | ${fmt(a.perSecond / b.perSecond)} | ${fmt(a.p50Ms / b.p50Ms)} | ${fmt(a.p99Ms / b.p99Ms)} | ${fmt(a.p999Ms / b.p999Ms)} | ${fmt(row.cpuUs / ref.cpuUs)} |`,
      );
    }
  }
  if (memoryRows.length > 0) {
    out.push(
      "",
      "| target | processes | idle RSS MiB (tree, after start) | peak RSS MiB (tree) | peak RSS MiB (largest process) |",
      "|---|---|---|---|---|",
    );
    for (const m of memoryRows)
      out.push(
        `| ${m.target} | ${m.processes} | ${m.idleMiB} | ${m.peakMiB} | ${m.maxProcessPeakMiB} |`,
      );
  }
  if (envoyRows.length > 0) {
    out.push(
      "",
      `Through Envoy (examples/envoy/envoy.yaml: timeout 0.02s, failure_mode_deny false), vegeta GET at a fixed rate for ${envoySeconds}s:`,
      "",
      "| service | rate/s | requests | e2e p50 ms | e2e p90 ms | e2e p99 ms | e2e max ms | checked OK | over limit | RLS errors | let through unchecked | non-2xx/429 | connections opened to the service (GOAWAYs from it) | service CPU µs/request | clean |",
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    );
    for (const e of envoyRows) {
      const r = e.result;
      const share =
        r.count > 0 ? ` (${fmt((100 * e.unchecked) / r.count)} %)` : "";
      out.push(
        `| ${e.target} | ${e.rate} | ${r.count} | ${fmt(r.p50Ms)} | ${fmt(r.p90Ms)} | ${fmt(r.p99Ms)} | ${fmt(r.p999Ms)} | ${e.ok} | ${e.overLimit} | ${e.error} | ${e.unchecked} of ${r.count}${share} | ${r.nonOk} | ${e.connections} (${e.goaways}) | ${fmt(e.cpuUs, 1)} | ${e.failure === undefined ? "yes" : `no: ${e.failure}`} |`,
      );
    }
  }
  const capacities = [names.reference, names.kv]
    .map(envoyCapacity)
    .filter((c) => c !== undefined);
  if (capacities.length > 0) {
    out.push(
      "",
      `Envoy capacity: the highest rate of the sweep (${envoyRates.join(", ")}/s, ${envoySeconds}s each, stopping after the first rate that is not clean) at which Envoy let nothing through unchecked:`,
      "",
      "| service | capacity /s | first rate not clean | why |",
      "|---|---|---|---|",
    );
    for (const c of capacities)
      out.push(
        `| ${c.target} | ${c.firstFailing === undefined ? `≥ ${c.rate}` : c.rate} | ${c.firstFailing?.rate ?? "none (every rate clean)"} | ${c.firstFailing?.reason ?? ""} |`,
      );
  }
  if (rlqsRows.length > 0) {
    out.push(
      "",
      `Through Envoy with RLQS (examples/envoy/rlqs.yaml: the rate_limit_quota filter, ${rlqsTenants} tenants of 100/s each shared across the fleet, reports every 5 s), vegeta GET at a fixed rate for ${envoySeconds}s; the service answers reports, not requests:`,
      "",
      "| service | rate/s | requests | e2e p50 ms | e2e p99 ms | e2e max ms | let through (200) | refused by Envoy (429) | service CPU µs/request | service CPU µs per bucket report |",
      "|---|---|---|---|---|---|---|---|---|---|",
    );
    for (const e of rlqsRows) {
      const r = e.result;
      out.push(
        `| ${e.target} | ${e.rate} | ${r.count} | ${fmt(r.p50Ms)} | ${fmt(r.p99Ms)} | ${fmt(r.p999Ms)} | ${e.ok} | ${e.overLimit} | ${fmt(e.cpuUsPerRequest, 1)} | ${fmt(e.cpuUsPerBucketReport, 0)} |`,
      );
    }
  }
  const goalRows = goals();
  out.push(
    "",
    `Goals (issue 34), from this run's rows (fixed rate: ${fixedRate}/s; distinct values: ${inFlight} in flight):`,
    "",
    "| goal | measured | goal | met |",
    "|---|---|---|---|",
    ...goalRows.map(
      (g) =>
        `| ${g.goal} | ${g.measured} | ${g.bound} | ${g.met === undefined ? "–" : g.met ? "met" : "**not met**"} |`,
    ),
  );
  out.push(
    "",
    `ghz: ${inFlight} calls in flight over ${connections} HTTP/2 connections, ${seconds}s per load after a ${warmupSeconds}s warm-up per target; fixed rate: ghz --rps ${fixedRate}; statistics: ${statsMode === "off" ? "DISABLE_STATS=true on both" : "each service's default sink with none configured (the reference: a log line per call; ours: a summary line per timer per flush)"}. ` +
      `One machine (${availableParallelism()} CPUs), shared with other work: compare rows of this run only. ` +
      `This run took ${fmt((performance.now() - runStarted) / 1000, 0)} s.`,
  );
  for (const note of notes) out.push(`note: ${note}`);
  return out.join("\n");
}

async function main(): Promise<void> {
  const runtime = runtimeRoot(false);
  const oursRuntime = runtimeRoot(true);
  const reference = referenceBinary();
  if (reference === undefined && (wanted("reference") || wanted("envoy")))
    notes.push(
      "reference not measured: no ratelimit-reference found (set BENCH_REFERENCE)",
    );

  if (wanted("floor")) {
    try {
      await floor();
    } catch (err) {
      notes.push(`floor not measured: ${String(err)}`);
    }
  }

  const needsRedis =
    ["reference", "kv", "kv-workers", "kv-overrides", "kv-day2", "envoy"].some(
      wanted,
    ) || named("kv-node");
  const redis = needsRedis ? await startRedis() : undefined;
  try {
    if (redis !== undefined) {
      const kvEnv = {
        BACKEND_TYPE: "kv",
        KV_SOCKET_TYPE: "tcp",
        KV_URL: redis.address,
      };
      if (reference !== undefined && wanted("reference")) {
        await redis.store.flush();
        await withTarget(
          "reference, kv",
          () => startReference(reference, runtime, redis.address),
          (t) => measure("reference, kv", t, redis.store),
        );
      }
      if (wanted("kv")) {
        await redis.store.flush();
        await withTarget(
          "ours, kv",
          () => startOurs(oursRuntime, kvEnv),
          (t) => measure("ours, kv", t, redis.store),
        );
      }
      if (named("kv-node")) {
        // The node:http2 engine, every call through the Connect router (docs/performance.md
        // "The node engine"); only when named in BENCH_TARGETS.
        await redis.store.flush();
        await withTarget(
          "ours, kv, GRPC_HTTP2_ENGINE=node",
          () => startOurs(oursRuntime, { ...kvEnv, GRPC_HTTP2_ENGINE: "node" }),
          (t) => measure("ours, kv, GRPC_HTTP2_ENGINE=node", t, redis.store),
        );
      }
      if (wanted("kv-overrides")) {
        // The same loads with a million run-time overrides loaded (issue 25: within noise).
        await redis.store.flush();
        const count = setting("BENCH_OVERRIDE_COUNT", 1_000_000);
        const name = `ours, kv, ${count.toLocaleString("en-US")} overrides`;
        const loadSeconds = await preloadOverrides(redis.address, count);
        let startSeconds = 0;
        await withTarget(
          name,
          async () => {
            const began = performance.now();
            // Reading and compiling the overrides delays the gRPC port (about 30 µs each).
            const target = await startOurs(oursRuntime, kvEnv, 300_000);
            startSeconds = (performance.now() - began) / 1000;
            return target;
          },
          (t) => measure(name, t, redis.store),
        );
        notes.push(
          `${name}: ${count} overrides written to the store in ${loadSeconds.toFixed(1)} s before the start; the service read them at start-up and was healthy after ${startSeconds.toFixed(1)} s`,
        );
      }
      if (wanted("kv-day2")) {
        // What subscribes to the published decisions (issue 32): none (TOP_OFFENDERS_K=0), then
        // top offenders (on by default) with a config canary whose candidate changes the
        // remote_address limit, so every call is evaluated against it too.
        const candidate = join(work, "canary-candidate");
        mkdirSync(candidate, { recursive: true });
        writeFileSync(
          join(candidate, "bench.yaml"),
          benchConfig.replace(
            "requests_per_unit: 1000000 }",
            "requests_per_unit: 500000 }",
          ),
        );
        for (const [name, extra] of [
          [
            "ours, kv, no subscriber (TOP_OFFENDERS_K=0)",
            { TOP_OFFENDERS_K: "0" },
          ],
          [
            "ours, kv, top offenders and a canary",
            { CANARY_CONFIG_DIR: candidate },
          ],
        ] as const) {
          await redis.store.flush();
          await withTarget(
            name,
            () => startOurs(oursRuntime, { ...kvEnv, ...extra }),
            (t) => measure(name, t, redis.store),
          );
        }
      }
      if (wanted("kv-workers")) {
        await redis.store.flush();
        await withTarget(
          "ours, kv, WORKERS=2",
          () => startOurs(oursRuntime, { ...kvEnv, WORKERS: "2" }),
          (t) => measure("ours, kv, WORKERS=2", t, redis.store),
        );
      }
    }
    if (wanted("memory")) {
      await withTarget(
        "ours, memory",
        () => startOurs(oursRuntime, { BACKEND_TYPE: "memory" }),
        (t) => measure("ours, memory", t, undefined),
      );
    }
    if (named("memory-node")) {
      await withTarget(
        "ours, memory, GRPC_HTTP2_ENGINE=node",
        () =>
          startOurs(oursRuntime, {
            BACKEND_TYPE: "memory",
            GRPC_HTTP2_ENGINE: "node",
          }),
        (t) => measure("ours, memory, GRPC_HTTP2_ENGINE=node", t, undefined),
      );
    }
    if (wanted("mc")) {
      const memcached = await startMemcached();
      try {
        await withTarget(
          "ours, mc",
          () =>
            startOurs(oursRuntime, {
              BACKEND_TYPE: "mc",
              MC_HOST_PORT: memcached.address,
            }),
          (t) => measure("ours, mc", t, memcached.store),
        );
      } finally {
        await memcached.started.stop();
      }
    }
    if (redis !== undefined && wanted("envoy")) {
      if (reference !== undefined) {
        await redis.store.flush();
        await withTarget(
          "reference, kv",
          () => startReference(reference, runtime, redis.address),
          (t) => throughEnvoy("reference, kv", t),
        );
      }
      await redis.store.flush();
      await withTarget(
        "ours, kv",
        () =>
          startOurs(oursRuntime, {
            BACKEND_TYPE: "kv",
            KV_SOCKET_TYPE: "tcp",
            KV_URL: redis.address,
          }),
        async (t) => {
          await throughEnvoy("ours, kv", t);
          await throughEnvoyRlqs("ours, kv", t);
        },
      );
    }
  } finally {
    await redis?.started.stop();
  }

  const tables = printTables();
  process.stdout.write(`\n${tables}\n\n`);
  mkdirSync(join(root, ".bench"), { recursive: true });
  writeFileSync(join(root, ".bench", "last-run.md"), `${tables}\n`);
  writeFileSync(
    join(root, ".bench", "last-run.json"),
    `${JSON.stringify({ rows, memoryRows, envoyRows, envoyFailures, rlqsRows, goals: goals(), notes }, null, 2)}\n`,
  );
}

try {
  await main();
} finally {
  killAll();
  if (process.env["BENCH_KEEP"] === undefined)
    rmSync(work, { recursive: true, force: true });
}
