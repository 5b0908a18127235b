// `make bench`: measures ShouldRateLimit against a floor on this machine and prints a table.
// Cases: the floor (bare node:http2 handler), the service on the memory backend, on the
// key-value backend (a redis-server started here), /json over HTTP/1.1, and latency at a fixed
// moderate rate. Tools: h2load (fixed body, per-request log) and bench/load.ts (thousands of
// distinct values). Numbers are for comparison within one run; the machine is shared.
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import {
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
  mkdirSync,
} from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, toBinary } from "@bufbuild/protobuf";
import { RateLimitRequestSchema } from "../src/proto.js";

const root = join(import.meta.dirname, "..", "..");
const work = mkdtempSync(join(tmpdir(), "rls-bench-"));
const calls = Number(process.env["BENCH_CALLS"] ?? "100000");
const children: ChildProcess[] = [];

const benchConfig = `
domain: bench
descriptors:
  - key: remote_address
    rate_limit: { unit: second, requests_per_unit: 1000000 }
  - key: path
    value: /api/v1/*
    share_threshold: true
    rate_limit: { unit: minute, requests_per_unit: 1000000000 }
  - key: path
    value: /admin/*
    rate_limit: { unit: minute, requests_per_unit: 10 }
  - key: tenant
    descriptors:
      - key: plan
        value: free
        rate_limit: { unit: hour, requests_per_unit: 1000000000 }
      - key: plan
        value: pro
        rate_limit: { unit: hour, requests_per_unit: 1000000000 }
`;

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port =
        typeof address === "object" && address !== null ? address.port : 0;
      server.close(() => {
        resolve(port);
      });
    });
  });
}

function start(
  command: string,
  args: string[],
  env: Record<string, string>,
  ready: string,
  readyCount = 1,
): Promise<ChildProcess> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    children.push(child);
    let output = "";
    const onData = (d: Buffer): void => {
      output += d.toString();
      if (output.split(ready).length - 1 >= readyCount) resolve(child);
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    child.once("exit", (code) => {
      reject(
        new Error(
          `${command} exited with ${String(code)} before it was ready:\n${output}`,
        ),
      );
    });
  });
}

/** Resolves once something accepts TCP connections on the loopback port (≤ 10 s). */
async function waitForPort(port: number): Promise<void> {
  const { connect } = await import("node:net");
  for (let i = 0; i < 200; i++) {
    const up = await new Promise<boolean>((resolve) => {
      const socket = connect(port, "127.0.0.1");
      socket.once("connect", () => {
        socket.destroy();
        resolve(true);
      });
      socket.once("error", () => {
        resolve(false);
      });
    });
    if (up) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`nothing listens on 127.0.0.1:${port}`);
}

/** The process and its children (worker processes of WORKERS > 1). */
function processTree(pid: number): number[] {
  const pids = [pid];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      if (Number(stat.split(") ")[1]?.split(" ")[1]) === pid)
        pids.push(Number(entry));
    } catch {
      // The process ended while we looked.
    }
  }
  return pids;
}

/** CPU seconds (user + system) used so far by a process and its worker processes. */
function cpuSeconds(pid: number): number {
  let total = 0;
  for (const p of processTree(pid)) {
    const fields = readFileSync(`/proc/${p}/stat`, "utf8")
      .split(") ")[1]!
      .split(" ");
    total += (Number(fields[11]) + Number(fields[12])) / 100;
  }
  return total;
}

/** Peak resident set size of a process and its worker processes (summed), in MiB. */
function peakRssMiB(pid: number): number {
  let kib = 0;
  for (const p of processTree(pid)) {
    const match = /VmHWM:\s+(\d+) kB/.exec(
      readFileSync(`/proc/${p}/status`, "utf8"),
    );
    kib += Number(match?.[1] ?? 0);
  }
  return Math.round(kib / 1024);
}

interface Result {
  perSecond: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  errors: number;
}

function percentiles(
  durationsUs: number[],
): Pick<Result, "p50Ms" | "p90Ms" | "p99Ms"> {
  const sorted = durationsUs.sort((a, b) => a - b);
  const at = (q: number): number =>
    Math.round(
      (sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ??
        0) / 10,
    ) / 100;
  return { p50Ms: at(0.5), p90Ms: at(0.9), p99Ms: at(0.99) };
}

/** Runs h2load and reads its per-request log. */
function h2load(args: string[], url: string): Result {
  const log = join(work, "h2load.log");
  const run = spawnSync("h2load", [...args, "--log-file", log, url], {
    encoding: "utf8",
  });
  if (run.status !== 0) throw new Error(`h2load failed: ${run.stderr}`);
  const rate = /finished in [\d.]+\w+, ([\d.]+) req\/s/.exec(run.stdout);
  const rows = readFileSync(log, "utf8")
    .trim()
    .split("\n")
    .map((l) => l.split("\t"));
  const failed = rows.filter((r) => r[1] !== "200").length;
  return {
    perSecond: Math.round(Number(rate?.[1] ?? 0)),
    ...percentiles(rows.map((r) => Number(r[2]))),
    errors: failed,
  };
}

function grpcBody(): string {
  const message = toBinary(
    RateLimitRequestSchema,
    create(RateLimitRequestSchema, {
      domain: "bench",
      descriptors: [
        { entries: [{ key: "remote_address", value: "10.1.2.3" }] },
        { entries: [{ key: "path", value: "/api/v1/items/7" }] },
      ],
    }),
  );
  const frame = Buffer.alloc(5 + message.length);
  frame.writeUInt32BE(message.length, 1);
  frame.set(message, 5);
  const file = join(work, "request.bin");
  writeFileSync(file, frame);
  return file;
}

const grpcHeaders = [
  "-H",
  "content-type: application/grpc",
  "-H",
  "te: trailers",
];
const rlsPath = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

interface Row {
  name: string;
  result: Result;
  cpuUsPerDecision: number;
  rssMiB: number;
}

/** Measures one gRPC target with a warm-up, then h2load (fixed body) and load.ts (distinct values). */
function measureGrpc(
  name: string,
  pid: number,
  port: number,
  body: string,
): Row[] {
  const url = `http://127.0.0.1:${port}${rlsPath}`;
  h2load(
    ["-n", "20000", "-c", "4", "-m", "64", ...grpcHeaders, "-d", body],
    url,
  );
  let cpu0 = cpuSeconds(pid);
  const fixed = h2load(
    ["-n", String(calls), "-c", "4", "-m", "64", ...grpcHeaders, "-d", body],
    url,
  );
  let cpu1 = cpuSeconds(pid);
  const rows: Row[] = [
    {
      name: `${name}, h2load fixed body`,
      result: fixed,
      cpuUsPerDecision: ((cpu1 - cpu0) * 1e6) / calls,
      rssMiB: peakRssMiB(pid),
    },
  ];
  cpu0 = cpuSeconds(pid);
  const load = spawnSync(
    process.execPath,
    [
      join(root, "dist", "bench", "load.js"),
      `127.0.0.1:${port}`,
      String(calls),
      "256",
      "4",
      "5000",
    ],
    { encoding: "utf8" },
  );
  cpu1 = cpuSeconds(pid);
  if (load.status === 0) {
    const r = JSON.parse(load.stdout) as Result;
    rows.push({
      name: `${name}, 5000 distinct values`,
      result: r,
      cpuUsPerDecision: ((cpu1 - cpu0) * 1e6) / calls,
      rssMiB: peakRssMiB(pid),
    });
  }
  return rows;
}

async function service(
  env: Record<string, string>,
  processes = 1,
): Promise<{ child: ChildProcess; grpc: number; http: number }> {
  const configRoot = join(work, "runtime");
  mkdirSync(join(configRoot, "config"), { recursive: true });
  writeFileSync(join(configRoot, "config", "bench.yaml"), benchConfig);
  const grpc = await freePort();
  const http = await freePort();
  const child = await start(
    process.execPath,
    [join(root, "dist", "src", "main.js")],
    {
      HOST: "127.0.0.1",
      PORT: String(http),
      GRPC_HOST: "127.0.0.1",
      GRPC_PORT: String(grpc),
      DEBUG_HOST: "127.0.0.1",
      DEBUG_PORT: String(await freePort()),
      RUNTIME_ROOT: configRoot,
      RUNTIME_WATCH_ROOT: "false",
      USE_PUSHSTATS: "false",
      DISABLE_STATS: "true",
      LOG_LEVEL: "warn",
      ...env,
    },
    "listening for HTTP",
    processes,
  );
  return { child, grpc, http };
}

function stop(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null) {
      resolve();
      return;
    }
    child.removeAllListeners("exit");
    child.once("exit", () => {
      resolve();
    });
    child.kill("SIGTERM");
  });
}

async function main(): Promise<void> {
  const body = grpcBody();
  const rows: Row[] = [];
  const notes: string[] = [];

  const floorPort = await freePort();
  const floor = await start(
    process.execPath,
    [join(root, "dist", "bench", "floor.js"), String(floorPort)],
    {},
    "floor listening",
  );
  rows.push(
    ...measureGrpc("floor (bare node:http2)", floor.pid!, floorPort, body),
  );
  await stop(floor);

  const memory = await service({ BACKEND_TYPE: "memory" });
  rows.push(
    ...measureGrpc("memory backend", memory.child.pid!, memory.grpc, body),
  );
  const jsonBody = join(work, "request.json");
  writeFileSync(
    jsonBody,
    JSON.stringify({
      domain: "bench",
      descriptors: [
        { entries: [{ key: "remote_address", value: "10.1.2.3" }] },
        { entries: [{ key: "path", value: "/api/v1/items/7" }] },
      ],
    }),
  );
  const jsonUrl = `http://127.0.0.1:${memory.http}/json`;
  h2load(["--h1", "-n", "20000", "-c", "64", "-d", jsonBody], jsonUrl);
  let cpu0 = cpuSeconds(memory.child.pid!);
  const json = h2load(
    ["--h1", "-n", String(calls), "-c", "64", "-d", jsonBody],
    jsonUrl,
  );
  rows.push({
    name: "memory backend, /json HTTP/1.1 (h2load --h1)",
    result: json,
    cpuUsPerDecision: ((cpuSeconds(memory.child.pid!) - cpu0) * 1e6) / calls,
    rssMiB: peakRssMiB(memory.child.pid!),
  });
  await stop(memory.child);

  const redisPort = await freePort();
  let kvFixedRate: Result | undefined;
  try {
    await start(
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
      ],
      {},
      "Ready to accept connections",
    );
    const kv = await service({
      BACKEND_TYPE: "kv",
      KV_SOCKET_TYPE: "tcp",
      KV_URL: `127.0.0.1:${redisPort}`,
    });
    rows.push(
      ...measureGrpc("kv backend (redis-server)", kv.child.pid!, kv.grpc, body),
    );
    // Latency at a fixed, moderate rate: 4 clients × 500 calls/s = 2,000 decisions/s for 10 s.
    cpu0 = cpuSeconds(kv.child.pid!);
    kvFixedRate = h2load(
      [
        "-c",
        "4",
        "-m",
        "1",
        "--rps",
        "500",
        "-D",
        "10",
        ...grpcHeaders,
        "-d",
        body,
      ],
      `http://127.0.0.1:${kv.grpc}${rlsPath}`,
    );
    await stop(kv.child);
    const kvWorkers = await service(
      {
        BACKEND_TYPE: "kv",
        KV_SOCKET_TYPE: "tcp",
        KV_URL: `127.0.0.1:${redisPort}`,
        WORKERS: "2",
      },
      2,
    );
    rows.push(
      ...measureGrpc(
        "kv backend, WORKERS=2",
        kvWorkers.child.pid!,
        kvWorkers.grpc,
        body,
      ),
    );
    await stop(kvWorkers.child);
  } catch (err) {
    notes.push(
      `kv backend not measured: ${err instanceof Error ? (err.message.split("\n")[0] ?? "") : String(err)}`,
    );
  }

  const memcachedPort = await freePort();
  try {
    // Not verbose: -vv would log every command through our pipe.
    const memcached = spawn(
      "memcached",
      [
        "-l",
        "127.0.0.1",
        "-p",
        String(memcachedPort),
        "-U",
        "0",
        ...(process.getuid?.() === 0 ? ["-u", "root"] : []),
      ],
      { stdio: "ignore" },
    );
    children.push(memcached);
    await waitForPort(memcachedPort);
    const mc = await service({
      BACKEND_TYPE: "mc",
      MC_HOST_PORT: `127.0.0.1:${memcachedPort}`,
    });
    rows.push(
      ...measureGrpc("mc backend (memcached)", mc.child.pid!, mc.grpc, body),
    );
    await stop(mc.child);
  } catch (err) {
    notes.push(
      `mc backend not measured: ${err instanceof Error ? (err.message.split("\n")[0] ?? "") : String(err)}`,
    );
  }

  const floorRate = rows[0]?.result.perSecond ?? 1;
  const floorCpu = rows[0]?.cpuUsPerDecision ?? 1;
  const lines = [
    "| case | decisions/s | vs floor | p50 ms | p90 ms | p99 ms | CPU µs/decision | vs floor CPU | peak RSS MiB | errors |",
    "|---|---|---|---|---|---|---|---|---|---|",
  ];
  for (const row of rows) {
    const r = row.result;
    lines.push(
      `| ${row.name} | ${r.perSecond} | ${(r.perSecond / floorRate).toFixed(2)} | ${r.p50Ms} | ${r.p90Ms} | ${r.p99Ms} | ${row.cpuUsPerDecision.toFixed(1)} | ${(row.cpuUsPerDecision / floorCpu).toFixed(2)} | ${row.rssMiB} | ${r.errors} |`,
    );
  }
  if (kvFixedRate !== undefined) {
    lines.push(
      `| kv backend, fixed 2,000 decisions/s (h2load --rps) | ${kvFixedRate.perSecond} | | ${kvFixedRate.p50Ms} | ${kvFixedRate.p90Ms} | ${kvFixedRate.p99Ms} | | | | ${kvFixedRate.errors} |`,
    );
  }
  process.stdout.write(`\n${lines.join("\n")}\n\n`);
  process.stdout.write(
    `calls per case: ${calls}; 256 calls in flight over 4 HTTP/2 connections; /json: 64 HTTP/1.1 connections\n`,
  );
  for (const note of notes) process.stdout.write(`note: ${note}\n`);
}

try {
  await main();
} finally {
  for (const child of children)
    if (child.exitCode === null) child.kill("SIGKILL");
  rmSync(work, { recursive: true, force: true });
}
