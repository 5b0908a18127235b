// Hot-key leases (issue 33 item 2): store operations per decision and decisions/s on one hot
// key through 3 replicas sharing one store, with and without `lease: true`. Each replica is a
// decision pipeline with its own store connection (and, with leases, its own lease table), in
// this process, no gRPC: the rows differ only by the counting. For kv and mc, against a
// redis-server and a memcached started here.
//
// - throughput: 64 calls in flight per replica for `BENCH_HOT_MS` ms (default 3000) each, a
//   limit no call reaches (100,000,000 per hour; lease_max = 1 % of it, so the ~50 ms sizing
//   decides n);
// - accuracy: 30,000 calls on a fresh key with a limit of 20,000 per hour and lease_max 200:
//   admitted, against the bound limit − 3 × lease_max.
//
// Store operations come from the store's own statistics: redis `INFO commandstats` (INCRBY
// calls), memcached `stats` (incr_hits + incr_misses). Run: `make build && node
// dist/bench/hot-key.js`. Numbers are for comparison within one run; the machine may be shared.
import { connect } from "node:net";
import { create } from "@bufbuild/protobuf";
import { Redis } from "ioredis";
import { pino } from "pino";
import { KvCounterBackend } from "../src/backends/kv/kv-counter-backend.js";
import { McCounterBackend } from "../src/backends/mc/mc-counter-backend.js";
import { loadConfig } from "../src/config/load-config.js";
import type { RateLimit } from "../src/config/rate-limit-config.js";
import { startStore, type Store } from "../src/conformance/processes.js";
import type { CounterBackend } from "../src/limiter/counter-backend.js";
import { createDecider } from "../src/limiter/decide.js";
import { LimitRequest } from "../src/limiter/limit-request.js";
import { RateLimitPipeline } from "../src/limiter/pipeline.js";
import {
  RateLimitResponse_Code as Code,
  RateLimitDescriptorSchema,
  type RateLimitDescriptor,
} from "../src/proto.js";
import { createStatsManager } from "../src/stats/stats-manager.js";
import { systemClock } from "../src/util/clock.js";

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
  if (store.kind === "kv") {
    const client = new Redis(`redis://${store.address}`);
    try {
      const info = await client.info("commandstats");
      const match = /^cmdstat_incrby:calls=(\d+)/m.exec(info);
      return match === null ? 0 : Number(match[1]);
    } finally {
      client.disconnect();
    }
  }
  const [host, port] = store.address.split(":");
  const text = await new Promise<string>((resolve, reject) => {
    const socket = connect(Number(port), host);
    let data = "";
    socket.on("data", (chunk: Buffer) => {
      data += chunk.toString();
      if (data.endsWith("END\r\n")) {
        socket.end();
        resolve(data);
      }
    });
    socket.on("error", reject);
    socket.write("stats\r\n");
  });
  const stat = (name: string): number =>
    Number(new RegExp(`^STAT ${name} (\\d+)`, "m").exec(text)?.[1] ?? 0);
  return stat("incr_hits") + stat("incr_misses");
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

async function main(): Promise<void> {
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
  console.log(
    "| store | lease | decisions | decisions/s | store increments | increments / decision | admitted | expected |",
  );
  console.log("| --- | --- | --- | --- | --- | --- | --- | --- |");
  for (const r of rows)
    console.log(
      `| ${r.store} | ${r.lease ? "yes" : "no"} | ${String(r.decisions)} | ${String(r.perSecond)} | ${String(r.ops)} | ${r.opsPerDecision.toPrecision(2)} | ${r.admitted === undefined ? "" : String(r.admitted)} | ${r.bound ?? ""} |`,
    );
}

await main();
