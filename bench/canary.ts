// `make bench-canary` (or `node dist/bench/canary.js` after `make build`): the cost per decision
// of the config canary (docs/operations.md#config-canary). One process, no network: the
// in-process ShouldRateLimit (service → pipeline → memory backend) with the canary wired as
// create-app wires it (its observer among the service's, the store pipeline's countObserver),
// driven in batches of concurrent requests with a turn of the event loop between batches (where
// the canary evaluates the batch, as it does between network reads). CPU time of the process
// (user + system) per decision, evaluations included (the report is awaited before the clock
// stops). Each row runs the same requests on the same live config without a canary (the
// observer installed, none started: production without a canary) and with its canary:
//
// - unchanged domain: the candidate has the same rules (nothing evaluated);
// - changed limit: the request's rule has another limit in the candidate (every request
//   evaluated, its counter read from the live decision);
// - new rule: the candidate adds a rule for the request's second descriptor (every request
//   evaluated, a candidate-only counter in the canary's ledger);
// - 3 descriptors, all changed: both kinds in every request;
// - every request refused: the candidate's limit is 1, so every request is a change to report;
// - token bucket: a changed burst is another counter, decided by the candidate's pipeline (the
//   path of every request the arithmetic path does not cover).
//
// Short rounds, many of them, each without then with the canary: the ratio is the median of the
// rounds' ratios, which a shared machine's changing load moves far less than either time.
// BENCH_CANARY_DECISIONS (default 50000) per round, BENCH_CANARY_ROUNDS (default 21),
// BENCH_CANARY_ROWS (row names, comma-separated). Numbers are for comparison on one machine.
import { createDecisionChannel } from "../src/limiter/decision-channel.js";
import { create } from "@bufbuild/protobuf";
import { pino } from "pino";
import { MemoryCounterBackend } from "../src/backends/memory/memory-counter-backend.js";
import { createCanary } from "../src/canary/canary.js";
import { OffendersTracker } from "../src/offenders/offenders-tracker.js";
import { loadConfig } from "../src/config/load-config.js";
import { createDecider } from "../src/limiter/decide.js";
import { RateLimitPipeline } from "../src/limiter/pipeline.js";
import { RateLimitRequestSchema, type RateLimitRequest } from "../src/proto.js";
import { createRateLimitService } from "../src/service/rate-limit-service.js";
import { createStatsManager } from "../src/stats/stats-manager.js";
import { systemClock } from "../src/util/clock.js";

const decisions = Number(process.env["BENCH_CANARY_DECISIONS"] ?? "50000");
const rounds = Number(process.env["BENCH_CANARY_ROUNDS"] ?? "21");
const batch = 64;
const values = 1000;

const rule = (key: string, rpu: number): string =>
  `  - key: ${key}\n    rate_limit: { unit: minute, requests_per_unit: ${rpu} }\n`;
const domain = (rules: string): string =>
  `domain: bench\ndescriptors:\n${rules}`;

interface Row {
  readonly name: string;
  /** The live rules. */
  readonly live: string;
  /** The candidate's rules. */
  readonly candidate: string;
  /** Descriptor keys of each request (values vary). */
  readonly keys: readonly string[];
  /** Distinct values per key the requests cycle through. @defaultValue 1000 */
  readonly values?: number;
  /**
   * Top offenders (K=20, as on by default) subscribed beside the canary in the "with" run
   * (the "without" run has neither: `TOP_OFFENDERS_K=0`, as bench/run.ts's kv-day2 target).
   */
  readonly offenders?: boolean;
}

const live = domain(rule("user", 1_000_000) + rule("tenant", 1_000_000));
const bucket = (burst: number): string =>
  "  - key: user\n    rate_limit: { unit: second, requests_per_unit: 1000000, " +
  `algorithm: token_bucket, burst: ${burst} }\n`;
const rows: Row[] = [
  { name: "unchanged domain", live, candidate: live, keys: ["user"] },
  {
    name: "changed limit (shared counter)",
    live,
    candidate: domain(rule("user", 500_000) + rule("tenant", 1_000_000)),
    keys: ["user"],
  },
  {
    name: "new rule (candidate-only counter)",
    live,
    candidate: domain(
      rule("user", 1_000_000) + rule("tenant", 1_000_000) + rule("path", 1e6),
    ),
    keys: ["user", "path"],
  },
  {
    name: "3 descriptors, all changed",
    live,
    candidate: domain(
      rule("user", 500_000) + rule("tenant", 500_000) + rule("path", 1e6),
    ),
    keys: ["user", "tenant", "path"],
  },
  {
    name: "changed limit, every request refused (all reported)",
    live,
    candidate: domain(rule("user", 1) + rule("tenant", 1_000_000)),
    keys: ["user"],
  },
  {
    // bench/run.ts's kv-day2 target in process: one key, its limit changed in the candidate,
    // top offenders and the canary against nothing subscribed.
    name: "one key: changed limit and top offenders",
    live,
    candidate: domain(rule("user", 500_000) + rule("tenant", 1_000_000)),
    keys: ["user"],
    values: 1,
    offenders: true,
  },
  {
    name: "token bucket burst changed (candidate's pipeline)",
    live: domain(bucket(1_000_000)),
    candidate: domain(bucket(500_000)),
    keys: ["user"],
  },
];

/** The in-process service as create-app builds it on the memory backend, with a canary. */
function setup(row: Row, withCanary: boolean) {
  const clock = systemClock;
  const statsManager = createStatsManager();
  const pipeline = new RateLimitPipeline({
    backend: new MemoryCounterBackend({
      clock,
      statsStore: statsManager.store,
    }),
    decider: createDecider({ clock }),
    statsStore: statsManager.store,
  });
  const logger = pino({ level: "silent" });
  const decisions = createDecisionChannel();
  const canary = createCanary({
    decisions,
    readConfigDir: () => Promise.resolve([]),
    clock,
    logger,
  });
  if (withCanary && row.offenders === true) {
    const tracker = new OffendersTracker({ k: 20, clock });
    decisions.subscribe((decision) => {
      tracker.observe(decision);
    });
  }
  const service = createRateLimitService({
    cache: pipeline,
    statsManager,
    clock,
    logger,
    decisions,
  });
  service.applyConfigUpdate({
    ok: true,
    config: loadConfig([{ name: "bench.yaml", text: row.live }], {
      statsManager,
    }),
  });
  const requests: RateLimitRequest[] = [];
  for (let v = 0; v < (row.values ?? values); v++)
    requests.push(
      create(RateLimitRequestSchema, {
        domain: "bench",
        descriptors: row.keys.map((key) => ({
          entries: [{ key, value: `${key}-${v}` }],
        })),
      }),
    );
  return { service, canary, pipeline, requests };
}

/**
 * CPU µs per decision of one round (evaluations included), with the row's canary started or
 * not.
 */
async function round(row: Row, withCanary: boolean): Promise<number> {
  const { service, canary, pipeline, requests } = setup(row, withCanary);
  const count = requests.length;
  if (withCanary)
    await canary.start({
      files: [{ name: "bench.yaml", text: row.candidate }],
    });
  const turn = (): Promise<void> =>
    new Promise((resolve) => {
      setImmediate(resolve);
    });
  // Warm-up: the JIT, and the counters of every value.
  for (let i = 0; i < 5_000; i += batch) {
    const pending: Promise<unknown>[] = [];
    for (let j = 0; j < batch; j++)
      pending.push(service.shouldRateLimit(requests[(i + j) % count]!));
    await Promise.all(pending);
    await turn();
  }
  await canary.report();
  const before = process.cpuUsage();
  for (let i = 0; i < decisions; i += batch) {
    const pending: Promise<unknown>[] = [];
    for (let j = 0; j < batch; j++)
      pending.push(service.shouldRateLimit(requests[(i + j) % count]!));
    await Promise.all(pending);
    await turn();
  }
  const report = await canary.report();
  const used = process.cpuUsage(before);
  if (withCanary && report.unevaluatedRequests > 0n)
    throw new Error(`${row.name}: ${report.unevaluatedRequests} unevaluated`);
  await canary.close();
  await pipeline.close();
  return (used.user + used.system) / decisions;
}

// BENCH_CANARY_ROWS: a comma-separated list of row names to run.
const only = process.env["BENCH_CANARY_ROWS"]?.split(",");
const selected = rows.filter((row) => only?.includes(row.name) !== false);
const median = (values: readonly number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
};
// Each round measures a row without, then with its canary, one after the other, so that a
// change of load on the machine falls on both alike; the ratio is the median of the rounds'.
const results: {
  name: string;
  without: number;
  with: number;
  ratio: number;
}[] = [];
for (const row of selected) {
  const without: number[] = [];
  const withCanary: number[] = [];
  for (let r = 0; r < rounds; r++) {
    without.push(await round(row, false));
    withCanary.push(await round(row, true));
  }
  results.push({
    name: row.name,
    without: median(without),
    with: median(withCanary),
    ratio: median(withCanary.map((us, r) => us / without[r]!)),
  });
}
console.log(
  `config canary: CPU µs per decision, in-process ShouldRateLimit on the memory backend ` +
    `(${decisions} decisions per round, median of ${rounds} rounds, batches of ${batch})`,
);
console.log("");
console.log("| row | without a canary | with the canary | × |");
console.log("|---|---:|---:|---:|");
for (const r of results)
  console.log(
    `| ${r.name} | ${r.without.toFixed(2)} | ${r.with.toFixed(2)} | ${r.ratio.toFixed(2)} |`,
  );
