// Accuracy (issue 33 item 5): how many calls a burst on one key admits, against the ground
// truth this bench computes, for every algorithm × backend (kv, mc) × replicas (1, 3) ×
// WORKERS (1, 2), with and without `lease: true` for the windowed algorithms, and the Go
// reference (fixed window, kv and mc, 1 and 3 replicas). Service processes are real: started
// by the conformance suite's launch mode (src/conformance/targets.ts LaunchProvider, its own
// redis-server or memcached per session), reached over gRPC by its wire client, many HTTP/2
// connections per replica.
//
// - One session per target × backend × replicas × WORKERS loads every rule at once; each row
//   then fires `BENCH_ACCURACY_CALLS` (default 400) calls at once on a fresh key, each sent on
//   a connection picked by a seeded generator (`BENCH_SEED`, default 33), every connection
//   warmed first so the burst is not queued behind connection set-up.
// - Ground truth: windows admit exactly `requests_per_unit` (a fresh key, an empty previous
//   window for sliding ones); with leases at least `requests_per_unit − replicas × WORKERS ×
//   lease_max` and never more (docs/configuration.md#leases); a token bucket starting full
//   admits at least `burst` and at most `burst + floor(elapsed / T)`, T = window ÷
//   requests_per_unit, elapsed from the first call sent to the last answer.
// - Store operations per decision: the store's own statistics (redis `INFO commandstats`,
//   memcached `stats`; bench/store-stats.ts) before and after the row, ÷ calls.
//
// Run: `make bench-accuracy` (or `make build && node dist/bench/accuracy.js`). Writes
// .bench/accuracy.md and .bench/accuracy.json. About 1–2 minutes on 2 cores.
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify } from "yaml";
import type { Backend, Flavour } from "../src/conformance/flavour.js";
import type { CallOutcome, CallRequest } from "../src/conformance/model.js";
import { LaunchProvider, type Session } from "../src/conformance/targets.js";
import { openWireClient, type WireClient } from "../src/conformance/wire.js";
import { mulberry32 } from "../test/helpers/seeded-random.js";
import {
  operationsBetween,
  storeOperations,
  type StoreOperations,
} from "./store-stats.js";

const root = join(import.meta.dirname, "..", "..");
const env = process.env;
const calls = Number(env["BENCH_ACCURACY_CALLS"] ?? "400");
const seed = Number(env["BENCH_SEED"] ?? "33");
/** HTTP/2 connections per replica (the wire client's one, plus more). */
const connectionsPerReplica = 8;

/** Windows' limit: half the burst, so every row refuses as many as it admits. */
const windowLimit = 200;
/** `lease_max` of the leased rules: 5 % of the limit, so the lower bound is visible. */
const leaseMax = 10;
/** The token bucket: 60 per minute (T = 1 s), starting full at `bucketBurst`. */
const bucketRate = 60;
const bucketWindowSeconds = 60;
const bucketBurst = 200;
/** The two limits of the all-or-nothing rule: the tighter one decides. */
const pairLimits = [windowLimit, windowLimit + 100] as const;

/** One algorithm row: the rule's key, how it is configured, how its truth is computed. */
interface Algorithm {
  readonly id: string;
  readonly label: string;
  readonly domain: string;
  readonly lease: boolean;
  readonly kind: "window" | "bucket";
}

// The token bucket runs last in a session: on mc its compare-and-swap failures under a burst can
// open the backend's circuit breaker, which would fail the rows after it.
const algorithms: readonly Algorithm[] = [
  {
    id: "fixed",
    label: "fixed window",
    domain: "acc",
    lease: false,
    kind: "window",
  },
  {
    id: "fixed_lease",
    label: "fixed window",
    domain: "acc",
    lease: true,
    kind: "window",
  },
  {
    id: "sliding",
    label: "sliding window",
    domain: "acc",
    lease: false,
    kind: "window",
  },
  {
    id: "sliding_lease",
    label: "sliding window",
    domain: "acc",
    lease: true,
    kind: "window",
  },
  {
    id: "calendar",
    label: "calendar month (Europe/Berlin)",
    domain: "acc",
    lease: false,
    kind: "window",
  },
  {
    id: "calendar_lease",
    label: "calendar month (Europe/Berlin)",
    domain: "acc",
    lease: true,
    kind: "window",
  },
  {
    id: "pair",
    label: "two limits, all_or_nothing",
    domain: "acc_aon",
    lease: false,
    kind: "window",
  },
  {
    id: "bucket",
    label: "token bucket",
    domain: "acc",
    lease: false,
    kind: "bucket",
  },
];

const lease = { lease: true, lease_max: leaseMax };

/** Our config: every rule of {@link algorithms}, plus `warm` (never reached). */
const oursFiles = [
  {
    name: "acc",
    text: stringify({
      domain: "acc",
      descriptors: [
        {
          key: "warm",
          rate_limit: { unit: "day", requests_per_unit: 1_000_000_000 },
        },
        {
          key: "fixed",
          rate_limit: { unit: "day", requests_per_unit: windowLimit },
        },
        {
          key: "fixed_lease",
          rate_limit: { unit: "day", requests_per_unit: windowLimit, ...lease },
        },
        {
          key: "sliding",
          rate_limit: {
            unit: "day",
            requests_per_unit: windowLimit,
            algorithm: "sliding_window",
          },
        },
        {
          key: "sliding_lease",
          rate_limit: {
            unit: "day",
            requests_per_unit: windowLimit,
            algorithm: "sliding_window",
            ...lease,
          },
        },
        {
          key: "calendar",
          rate_limit: {
            unit: "month",
            requests_per_unit: windowLimit,
            time_zone: "Europe/Berlin",
          },
        },
        {
          key: "calendar_lease",
          rate_limit: {
            unit: "month",
            requests_per_unit: windowLimit,
            time_zone: "Europe/Berlin",
            ...lease,
          },
        },
        {
          key: "bucket",
          rate_limit: {
            unit: "minute",
            requests_per_unit: bucketRate,
            algorithm: "token_bucket",
            burst: bucketBurst,
          },
        },
      ],
    }),
  },
  {
    name: "acc_aon",
    text: stringify({
      domain: "acc_aon",
      charge: "all_or_nothing",
      descriptors: [
        {
          key: "pair",
          rate_limits: [
            { unit: "day", requests_per_unit: pairLimits[0] },
            { unit: "hour", requests_per_unit: pairLimits[1] },
          ],
        },
      ],
    }),
  },
];

/** The reference's config: the plain fixed window only (it refuses the rest). */
const referenceFiles = [
  {
    name: "acc",
    text: stringify({
      domain: "acc",
      descriptors: [
        {
          key: "warm",
          rate_limit: { unit: "day", requests_per_unit: 1_000_000_000 },
        },
        {
          key: "fixed",
          rate_limit: { unit: "day", requests_per_unit: windowLimit },
        },
      ],
    }),
  },
];

/** The reference binary: $BENCH_REFERENCE, else shared/reference/bin beside the repository. */
function referenceBinary(): string | undefined {
  return [
    env["BENCH_REFERENCE"],
    join(root, "..", "shared", "reference", "bin", "ratelimit-reference"),
    join(root, "..", "..", "shared", "reference", "bin", "ratelimit-reference"),
  ].find((c) => c !== undefined && c !== "" && existsSync(c));
}

/** What the bench launches: ours or the reference, on one backend, so many processes. */
interface SessionShape {
  readonly target: "ours" | "reference";
  readonly backend: Exclude<Backend, "memory">;
  readonly replicas: number;
  /** WORKERS of each replica (the reference has none: 1). */
  readonly workers: number;
}

/** One measured row of the table. */
interface Row extends SessionShape {
  readonly algorithm: string;
  readonly lease: boolean;
  readonly calls: number;
  readonly admitted: number;
  readonly errors: number;
  /** The first error's text, when any call failed. */
  readonly firstError?: string;
  /** The ground truth: [lowest, highest] admitted the algorithm allows. */
  readonly truth: readonly [number, number];
  readonly truthText: string;
  readonly verdict: string;
  readonly elapsedMs: number;
  readonly storeOps: number;
  readonly opsPerDecision: number;
  readonly commands: string;
}

/** The environment handed to every launched process (the rest comes from launchEnv). */
function baseEnv(workers: number): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of ["PATH", "HOME", "TMPDIR", "GOCACHE"]) {
    const value = env[name];
    if (value !== undefined) out[name] = value;
  }
  if (workers > 1) out["WORKERS"] = String(workers);
  return out;
}

function truthOf(
  algorithm: Algorithm,
  shape: SessionShape,
  elapsedMs: number,
): { range: [number, number]; text: string } {
  if (algorithm.kind === "bucket") {
    // GCRA starting full: `burst` at once, then one hit per emission interval T.
    const intervalMs = (bucketWindowSeconds * 1000) / bucketRate;
    const high = Math.min(
      calls,
      bucketBurst + Math.floor(elapsedMs / intervalMs),
    );
    const low = Math.min(calls, bucketBurst);
    return {
      range: [low, high],
      text: `${low}..${high} (burst ${bucketBurst} + ⌊${Math.round(elapsedMs)} ms ÷ ${intervalMs} ms⌋)`,
    };
  }
  const limit = Math.min(
    calls,
    algorithm.id === "pair" ? pairLimits[0] : windowLimit,
  );
  if (!algorithm.lease) return { range: [limit, limit], text: String(limit) };
  const low = Math.max(0, limit - shape.replicas * shape.workers * leaseMax);
  return {
    range: [low, limit],
    text: `${low}..${limit} (${limit} − ${shape.replicas}×${shape.workers}×${leaseMax})`,
  };
}

function verdictOf(
  admitted: number,
  errors: number,
  [low, high]: readonly [number, number],
): string {
  const base =
    admitted > high
      ? `**over by ${admitted - high}**`
      : admitted < low
        ? `under by ${low - admitted}`
        : low === high
          ? "exact"
          : "within";
  return errors > 0 ? `${base}, ${errors} errors` : base;
}

function admittedOf(outcomes: readonly CallOutcome[]): {
  admitted: number;
  errors: number;
  firstError: string | undefined;
} {
  let admitted = 0;
  let errors = 0;
  let firstError: string | undefined;
  for (const o of outcomes) {
    if (o.kind === "error") {
      errors++;
      firstError ??= o.error;
    } else if (o.answer.overallCode === "OK") admitted++;
  }
  return { admitted, errors, firstError };
}

function commandsText(ops: StoreOperations): string {
  return [...ops.byCommand]
    .filter(([, n]) => n > 0)
    .sort((a, b) => b[1] - a[1])
    .map(([name, n]) => `${name} ${n}`)
    .join(", ");
}

/** Fires one burst of `calls` on a fresh key of `algorithm` and measures it. */
async function burst(
  session: Session,
  clients: readonly WireClient[],
  shape: SessionShape,
  algorithm: Algorithm,
  rowIndex: number,
): Promise<Row> {
  const store = session.store;
  if (store === undefined)
    throw new Error("the session has no store of its own");
  const value = `r${rowIndex}-${Date.now().toString(36)}`;
  const request: CallRequest = {
    domain: algorithm.domain,
    descriptors: [{ entries: [[algorithm.id, value]] }],
  };
  const random = mulberry32(seed + rowIndex);
  const targets = Array.from(
    { length: calls },
    () => clients[Math.floor(random() * clients.length)]!,
  );
  const before = await storeOperations(store);
  const started = performance.now();
  const outcomes = await Promise.all(targets.map((c) => c.call(request)));
  const elapsedMs = performance.now() - started;
  // mc counts in the background after the answer: let the last increments land.
  await new Promise((resolve) => setTimeout(resolve, 200));
  const ops = operationsBetween(before, await storeOperations(store));
  const { admitted, errors, firstError } = admittedOf(outcomes);
  const truth = truthOf(algorithm, shape, elapsedMs);
  return {
    ...shape,
    algorithm: algorithm.label,
    lease: algorithm.lease,
    calls,
    admitted,
    errors,
    ...(firstError !== undefined ? { firstError } : {}),
    truth: truth.range,
    truthText: truth.text,
    verdict: verdictOf(admitted, errors, truth.range),
    elapsedMs: Math.round(elapsedMs),
    storeOps: ops.total,
    opsPerDecision: ops.total / calls,
    commands: commandsText(ops),
  };
}

/** Opens one session of `shape`, runs every row it can, closes it. */
async function runSession(
  shape: SessionShape,
  firstRow: number,
  reference: string | undefined,
): Promise<Row[]> {
  const ours = shape.target === "ours";
  const command = ours ? join(root, "bin", "ratelimit") : reference!;
  const flavour: Flavour = ours ? "neutral" : "reference";
  const provider = new LaunchProvider(
    command,
    flavour,
    shape.backend,
    { token: `acc${String(firstRow)}`, reloadTimeoutMs: 10_000 },
    baseEnv(shape.workers),
  );
  const session = await provider.open(
    ours ? oursFiles : referenceFiles,
    {},
    true,
    {
      replicas: shape.replicas,
      ownStore: true,
    },
  );
  const extra: WireClient[] = [];
  try {
    for (const r of session.replicas)
      for (let i = 1; i < connectionsPerReplica; i++)
        extra.push(openWireClient(r.target));
    const clients = [...session.replicas, ...extra];
    // Every connection made (and, with WORKERS > 1, spread over the workers) before a burst.
    await Promise.all(
      clients.map((c) =>
        c.call({ domain: "acc", descriptors: [{ entries: [["warm", "w"]] }] }),
      ),
    );
    const rows: Row[] = [];
    let index = firstRow;
    for (const algorithm of algorithms) {
      if (!ours && algorithm.id !== "fixed") continue;
      rows.push(await burst(session, clients, shape, algorithm, index++));
      const r = rows[rows.length - 1]!;
      console.error(
        `${shape.target} ${shape.backend} ×${shape.replicas} W${shape.workers} ${algorithm.id}: admitted ${r.admitted} (${r.truthText}) ${r.verdict}, ${r.opsPerDecision.toFixed(2)} ops/decision${r.firstError !== undefined ? ` (first error: ${r.firstError})` : ""}`,
      );
    }
    return rows;
  } finally {
    for (const c of extra) c.close();
    await session.close();
    await provider.close();
  }
}

function table(rows: readonly Row[]): string {
  const lines = [
    "| target | algorithm | lease | backend | replicas × WORKERS | admitted of " +
      String(calls) +
      " | ground truth | verdict | store ops / decision | store commands |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
  ];
  for (const r of rows)
    lines.push(
      `| ${r.target} | ${r.algorithm} | ${r.lease ? `yes (lease_max ${leaseMax})` : "no"} | ${r.backend} | ${r.replicas} × ${r.workers} | ${r.admitted} | ${r.truthText} | ${r.verdict} | ${r.opsPerDecision.toFixed(2)} | ${r.commands} |`,
    );
  return lines.join("\n");
}

async function main(): Promise<void> {
  const reference = referenceBinary();
  const shapes: SessionShape[] = [];
  for (const backend of ["kv", "mc"] as const)
    for (const replicas of [1, 3])
      for (const workers of [1, 2])
        shapes.push({ target: "ours", backend, replicas, workers });
  if (reference !== undefined)
    for (const backend of ["kv", "mc"] as const)
      for (const replicas of [1, 3])
        shapes.push({ target: "reference", backend, replicas, workers: 1 });
  else
    console.error(
      "reference not measured: no ratelimit-reference found (set BENCH_REFERENCE)",
    );
  // BENCH_ACCURACY_ONLY="ours mc 3x1" (a substring of "<target> <backend> <replicas>x<workers>")
  // runs the matching sessions alone.
  const only = env["BENCH_ACCURACY_ONLY"];
  if (only !== undefined && only !== "")
    shapes.splice(
      0,
      shapes.length,
      ...shapes.filter((s) =>
        `${s.target} ${s.backend} ${s.replicas}x${s.workers}`.includes(only),
      ),
    );
  const started = performance.now();
  const rows: Row[] = [];
  for (const shape of shapes)
    rows.push(...(await runSession(shape, rows.length, reference)));
  const seconds = Math.round((performance.now() - started) / 1000);
  const header =
    `Accuracy: ${calls} concurrent ShouldRateLimit calls on one fresh key per row, over ${connectionsPerReplica} HTTP/2 connections per replica (seed ${seed}); ` +
    `windows ${windowLimit} per day (calendar: per month in Europe/Berlin), leases lease_max ${leaseMax}, token bucket ${bucketRate} per minute with burst ${bucketBurst}, ` +
    `two limits ${pairLimits[0]}/day + ${pairLimits[1]}/hour in an all_or_nothing domain. Store operations from the store's own statistics. ${rows.length} rows in ${seconds} s.`;
  const markdown = `${header}\n\n${table(rows)}\n`;
  console.log(markdown);
  mkdirSync(join(root, ".bench"), { recursive: true });
  writeFileSync(join(root, ".bench", "accuracy.md"), markdown);
  writeFileSync(
    join(root, ".bench", "accuracy.json"),
    `${JSON.stringify({ calls, seed, rows }, null, 2)}\n`,
  );
  const over = rows.filter(
    (r) => r.admitted > r.truth[1] && r.target === "ours",
  );
  if (over.length > 0)
    console.error(`${over.length} rows of ours admitted over the ground truth`);
}

await main();
