// `make bench-offenders` (`node --expose-gc dist/bench/offenders.js`): what top offenders
// (docs/operations.md#top-offenders) cost.
//
// 1. CPU per decision: the in-process service's shouldRateLimit over the memory backend, with
//    no observer (TOP_OFFENDERS_K=0: nothing is built) and with the tracker at K=20 and K=100,
//    on a seeded Zipf stream of 100,000 values (s = 1.1), for requests of one descriptor and of
//    three, and on one value (one hot key, over its limit after 50). Modes run back to back in each round; printed are each mode's median round and
//    the median of its per-round differences from "off" with their range, since the machine
//    is shared. No network, no gRPC: the difference is the observer's whole cost.
// 2. Bytes per rule (V8 heap and the sketches' array buffers): rules whose two windows are
//    full (m distinct descriptors in each, the most a rule holds) and rules that see one
//    value, with descriptors like `remote_address=10.1.2.3`; each in a fresh process.
//
// Environment: BENCH_OFFENDERS_DECISIONS (per round and mode, default 100000),
// BENCH_OFFENDERS_ROUNDS (default 7), BENCH_OFFENDERS_RULES (default 200).

import { compileAlgorithm } from "../src/config/algorithm.js";
import { createDecisionChannel } from "../src/limiter/decision-channel.js";
import { limitRequest } from "../test/helpers/limit-request.js";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { create } from "@bufbuild/protobuf";
import { pino } from "pino";
import { MemoryCounterBackend } from "../src/backends/memory/memory-counter-backend.js";
import { loadConfig } from "../src/config/load-config.js";
import type { RateLimit } from "../src/config/rate-limit-config.js";
import { unitToSeconds } from "../src/config/units.js";
import { createDecider } from "../src/limiter/decide.js";
import { RateLimitPipeline } from "../src/limiter/pipeline.js";
import { OffendersTracker } from "../src/offenders/offenders-tracker.js";
import {
  RateLimitDescriptorSchema,
  RateLimitRequestSchema,
  RateLimitResponse_Code as Code,
  RateLimitResponse_DescriptorStatusSchema,
  RateLimitResponse_RateLimit_Unit as Unit,
  type RateLimitRequest,
} from "../src/proto.js";
import {
  createRateLimitService,
  type RateLimitService,
} from "../src/service/rate-limit-service.js";
import { createStatsManager } from "../src/stats/stats-manager.js";
import { systemClock, type Clock } from "../src/util/clock.js";

const decisions = Number(process.env["BENCH_OFFENDERS_DECISIONS"] ?? "200000");
const rounds = Number(process.env["BENCH_OFFENDERS_ROUNDS"] ?? "7");
const ruleCount = Number(process.env["BENCH_OFFENDERS_RULES"] ?? "200");
const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) {
  process.stderr.write("run with node --expose-gc\n");
  process.exit(2);
}
const collect = gc;

const yaml = `
domain: bench
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 50 }
  - key: remote_address
    rate_limit: { unit: second, requests_per_unit: 1000 }
  - key: path
    descriptors:
      - key: method
        rate_limit: { unit: hour, requests_per_unit: 100000 }
`;

/** mulberry32, as test/helpers/seeded-random.ts: the same stream every run. */
function seeded(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Ranks 1…items drawn with P(i) ∝ 1 / i^s. */
function zipf(items: number, s: number, seed: number): () => number {
  const random = seeded(seed);
  const cumulative = new Float64Array(items);
  let sum = 0;
  for (let i = 0; i < items; i++) {
    sum += 1 / Math.pow(i + 1, s);
    cumulative[i] = sum;
  }
  return () => {
    const target = random() * sum;
    let lo = 0;
    let hi = items - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cumulative[mid]! < target) lo = mid + 1;
      else hi = mid;
    }
    return lo + 1;
  };
}

/**
 * Pre-built requests (building them is not what is measured): one descriptor or three from the
 * Zipf stream, or one descriptor of one value (`hot`: one key under load, the cheapest case).
 */
function requests(
  shape: "one" | "three" | "hot",
  count: number,
): RateLimitRequest[] {
  if (shape === "hot")
    return Array.from({ length: count }, () =>
      create(RateLimitRequestSchema, {
        domain: "bench",
        descriptors: [{ entries: [{ key: "user", value: "u1" }] }],
      }),
    );
  const next = zipf(100_000, 1.1, shape === "one" ? 1 : 3);
  const out: RateLimitRequest[] = [];
  for (let i = 0; i < count; i++) {
    const rank = next();
    const user = { entries: [{ key: "user", value: `u${rank}` }] };
    out.push(
      create(RateLimitRequestSchema, {
        domain: "bench",
        descriptors:
          shape === "one"
            ? [user]
            : [
                user,
                {
                  entries: [
                    {
                      key: "remote_address",
                      value: `10.${(rank >>> 16) & 255}.${(rank >>> 8) & 255}.${rank & 255}`,
                    },
                  ],
                },
                {
                  entries: [
                    { key: "path", value: `/api/v1/items/${rank % 50}` },
                    { key: "method", value: "GET" },
                  ],
                },
              ],
      }),
    );
  }
  return out;
}

function service(k: number): {
  service: RateLimitService;
  tracker: OffendersTracker | undefined;
  close(): Promise<void>;
} {
  const clock: Clock = systemClock;
  const statsManager = createStatsManager();
  const tracker = k > 0 ? new OffendersTracker({ k, clock }) : undefined;
  const cache = new RateLimitPipeline({
    backend: new MemoryCounterBackend({
      clock,
      statsStore: statsManager.store,
    }),
    decider: createDecider({ clock }),
    statsStore: statsManager.store,
  });
  // Subscribed only with a tracker: without one the service publishes to no one.
  const decisions = createDecisionChannel();
  if (tracker !== undefined)
    decisions.subscribe((decision) => {
      tracker.observe(decision);
    });
  const rls = createRateLimitService({
    cache,
    statsManager,
    clock,
    logger: pino({ level: "silent" }),
    decisions,
  });
  rls.applyConfigUpdate({
    ok: true,
    config: loadConfig([{ name: "bench.yaml", text: yaml }], {
      statsManager,
    }),
  });
  return { service: rls, tracker, close: () => cache.close() };
}

/** CPU microseconds (user + system) per decision over `stream`. */
async function cpuPerDecision(
  rls: RateLimitService,
  stream: readonly RateLimitRequest[],
): Promise<number> {
  const start = process.cpuUsage();
  for (const request of stream) await rls.shouldRateLimit(request);
  const used = process.cpuUsage(start);
  return (used.user + used.system) / stream.length;
}

const signed = (value: number, digits = 2): string =>
  (value >= 0 ? "+" : "") + value.toFixed(digits);

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
};

const modes = [
  { name: "off (TOP_OFFENDERS_K=0)", k: 0 },
  { name: "on, K=20 (m=200)", k: 20 },
  { name: "on, K=100 (m=1000)", k: 100 },
] as const;

// Heap per rule: every rule's two windows full of distinct descriptors.
function limitFor(index: number): RateLimit {
  const unitSeconds = unitToSeconds(Unit.MINUTE);
  return {
    fullKey: `bench.rule_${index}`,
    stats: createStatsManager().rateLimitStats(`bench.rule_${index}`),
    requestsPerUnit: 10,
    unit: Unit.MINUTE,
    unitSeconds,
    unitMultiplier: 1,
    windowSeconds: unitSeconds,
    algorithm: compileAlgorithm(unitSeconds, false, undefined, undefined),
    cacheKeySuffix: "",
    extraLimits: undefined,
    statsKeySuffix: "",
    allOrNothing: false,
    unlimited: false,
    shadowMode: false,
    quotaMode: false,
    name: "",
    replaces: [],
    detailedMetric: false,
    metadata: undefined,
    shareThresholdValues: undefined,
  };
}

/**
 * Bytes per rule with `k`, measured in this process: `ruleCount` rules whose two windows
 * hold `values` distinct descriptors each (`m`: full, the most a rule holds; 1: a rule that
 * sees one value, as a request-supplied limit's rule does).
 */
function bytesPerRule(k: number, full: boolean): number {
  let now = 1_795_824_000;
  const clock: Clock = { nowSeconds: () => now, nowMs: () => now * 1000 };
  const limits = Array.from({ length: ruleCount }, (_, i) => limitFor(i));
  const tracker = new OffendersTracker({ k, clock, maxRules: ruleCount });
  const m = tracker.countersPerWindow;
  const values = full ? m : 1;
  const statuses = [
    create(RateLimitResponse_DescriptorStatusSchema, { code: Code.OK }),
  ];
  const config = loadConfig([{ name: "bench.yaml", text: yaml }], {
    statsManager: createStatsManager(),
  });
  collect();
  collect();
  // The sketches' typed arrays live outside the V8 heap (array buffers): both are counted.
  const used = (): number => {
    const memory = process.memoryUsage();
    return memory.heapUsed + memory.arrayBuffers;
  };
  const before = used();
  for (let window = 0; window < 2; window++) {
    for (let d = 0; d < values; d++) {
      for (let r = 0; r < ruleCount; r++) {
        // A fresh request per rule, as a service decodes one per call: the tracker keeps the
        // value strings it monitors, so their bytes are its cost.
        const i = window * values + d;
        const descriptors = [
          create(RateLimitDescriptorSchema, {
            entries: [
              {
                key: "remote_address",
                value: `10.${(i >>> 16) & 255}.${(i >>> 8) & 255}.${i & 255}`,
              },
            ],
          }),
        ];
        tracker.observe({
          request: limitRequest("bench", descriptors, [limits[r]], [1]),
          config,
          counted: undefined,
          statuses,
          overallCode: Code.OK,
          deciding: -1,
          quota: [false],
        });
      }
    }
    now += 60;
  }
  now -= 60;
  collect();
  collect();
  const after = used();
  const top = tracker.top("", k);
  if (top.length !== ruleCount || top[0]!.totalHits !== 2 * values)
    throw new Error(`expected ${ruleCount} rules of ${2 * values} hits`);
  return (after - before) / ruleCount;
}

// `offenders.js memory <k> full|one`: one memory measurement in a fresh process (what one run
// leaves behind would blur the next), printed as a number.
if (process.argv[2] === "memory") {
  const bytes = bytesPerRule(
    Number(process.argv[3]),
    process.argv[4] === "full",
  );
  process.stdout.write(`${bytes.toFixed(0)}\n`);
  process.exit(0);
}

const lines: string[] = [
  `| memory per rule (${ruleCount} rules, values \`remote_address=10.x.y.z\`) | bytes per rule (V8 heap + array buffers) |`,
  "| --- | --- |",
];
for (const [k, full] of [
  [20, true],
  [100, true],
  [20, false],
] as const) {
  const child = spawnSync(
    process.execPath,
    [
      "--expose-gc",
      fileURLToPath(import.meta.url),
      "memory",
      String(k),
      full ? "full" : "one",
    ],
    { encoding: "utf8", env: process.env },
  );
  if (child.status !== 0) throw new Error(`memory run failed: ${child.stderr}`);
  const bytes = Number(child.stdout.trim());
  lines.push(
    `| K=${k} (m=${10 * k} per window), ${full ? "both windows full" : "one value"} | ${bytes} (${(bytes / 1024).toFixed(1)} KiB) |`,
  );
}
lines.push("");

lines.push(
  `| requests | mode | CPU µs per decision (median of ${rounds} rounds) | vs off, same round (median) |`,
  "| --- | --- | --- | --- |",
);
for (const shape of ["one", "three", "hot"] as const) {
  const stream = requests(shape, decisions);
  const services = modes.map((mode) => service(mode.k));
  // Warm-up: every mode once (JIT, counters created).
  for (const s of services)
    await cpuPerDecision(s.service, stream.slice(0, 50_000));
  const samples = modes.map(() => [] as number[]);
  for (let round = 0; round < rounds; round++) {
    for (let i = 0; i < modes.length; i++) {
      collect();
      samples[i]!.push(await cpuPerDecision(services[i]!.service, stream));
    }
  }
  const off = median(samples[0]!);
  for (let i = 0; i < modes.length; i++) {
    const us = median(samples[i]!);
    // Against the "off" run of the same round (they ran back to back, so a busy moment of
    // the machine weighs on both): the median difference, and the smallest and largest.
    const deltas = samples[i]!.map((v, round) => v - samples[0]![round]!);
    const delta = median(deltas);
    const vsOff =
      i === 0
        ? ""
        : `${signed(delta)} µs (${signed((delta / off) * 100, 0)} %), rounds ${signed(Math.min(...deltas))} to ${signed(Math.max(...deltas))}`;
    lines.push(
      `| ${shape === "one" ? "1 descriptor" : shape === "three" ? "3 descriptors" : "1 descriptor, one value"} | ${modes[i]!.name} | ${us.toFixed(2)} | ${vsOff} |`,
    );
  }
  for (const s of services) {
    await s.close();
    const top = s.tracker?.top("bench", 3);
    if (top !== undefined && shape === "one")
      process.stderr.write(
        `K=${s.tracker!.k}: ${top.map((r) => `${r.rule} top ${r.offenders.map((o) => `${o.descriptor}:${o.hits}±${o.error}`).join(" ")}`).join("; ")}\n`,
      );
  }
}
lines.push("");

process.stdout.write(lines.join("\n"));
