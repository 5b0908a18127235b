// `make bench`, window extensions: the cost of one decision on the key-value backend (a
// redis-server started here) for the reference's fixed one-unit window next to a window of
// several units, a sliding window and all-or-nothing charging. In process (no gRPC), so the
// rows differ only by the backend's work: client CPU per decision, store CPU per decision,
// store commands per decision, decisions per second at a fixed concurrency. Numbers are for
// comparison within one run; the machine is shared.
import { compileAlgorithm } from "../src/config/algorithm.js";
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { createServer } from "node:net";
import { create } from "@bufbuild/protobuf";
import { pino } from "pino";
import { KvCounterBackend } from "../src/backends/kv/kv-counter-backend.js";
import type { RateLimit } from "../src/config/rate-limit-config.js";
import { loadConfig } from "../src/config/load-config.js";
import { unitToSeconds, windowShape } from "../src/config/units.js";
import { createDecider } from "../src/limiter/decide.js";
import { RateLimitPipeline } from "../src/limiter/pipeline.js";
import {
  RateLimitDescriptorSchema,
  RateLimitResponse_RateLimit_Unit as Unit,
  type RateLimitDescriptor,
} from "../src/proto.js";
import { createStatsManager } from "../src/stats/stats-manager.js";
import { systemClock } from "../src/util/clock.js";
import { limitRequest } from "../test/helpers/limit-request.js";

const decisions = Number(process.env["BENCH_WINDOW_CALLS"] ?? "40000");
const concurrency = 64;
const rounds = 3;
const stats = createStatsManager();

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

function limit(
  name: string,
  unit: Unit,
  unitMultiplier: number,
  sliding: boolean,
  allOrNothing: boolean,
): RateLimit {
  const shape = windowShape(unit, unitMultiplier, sliding);
  return {
    fullKey: `bench.${name}`,
    stats: stats.rateLimitStats(`bench.${name}`),
    requestsPerUnit: 1_000_000_000,
    unit,
    unitSeconds: unitToSeconds(unit),
    unitMultiplier,
    windowSeconds: shape.windowSeconds,
    algorithm: compileAlgorithm(
      shape.windowSeconds,
      sliding,
      undefined,
      undefined,
    ),
    cacheKeySuffix: shape.cacheKeySuffix,
    extraLimits: undefined,
    statsKeySuffix: "",
    allOrNothing,
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
 * The limit of descriptor `key` in a one-rule domain loaded by the real config loader (the
 * rule's YAML after `key:`), for the extensions whose fields the loader derives.
 */
function loaded(key: string, rule: string): RateLimit {
  const config = loadConfig(
    [
      {
        name: `${key}.yaml`,
        text: `domain: bench\ndescriptors:\n  - key: ${key}\n${rule}`,
      },
    ],
    { statsManager: stats },
  );
  const limit = config.getLimit(
    "bench",
    create(RateLimitDescriptorSchema, { entries: [{ key, value: "x" }] }),
  );
  if (limit === undefined) throw new Error(`no limit for ${key}`);
  return limit;
}

interface Case {
  readonly name: string;
  readonly limits: readonly RateLimit[];
  /** Hits per descriptor. @defaultValue 1 */
  readonly hits?: number;
}

const cases: readonly Case[] = [
  {
    name: "fixed window, 1 minute (the reference's)",
    limits: [limit("a", Unit.MINUTE, 1, false, false)],
  },
  {
    name: "fixed window, 5 minutes (unit_multiplier: 5)",
    limits: [limit("b", Unit.MINUTE, 5, false, false)],
  },
  {
    name: "sliding window, 1 minute",
    limits: [limit("c", Unit.MINUTE, 1, true, false)],
  },
  {
    name: "2 descriptors, fixed, charge: each",
    limits: [
      limit("d", Unit.MINUTE, 1, false, false),
      limit("e", Unit.HOUR, 1, false, false),
    ],
  },
  {
    name: "token bucket (algorithm: token_bucket, EVALSHA)",
    limits: [
      loaded(
        "k0",
        "    rate_limit: { unit: second, requests_per_unit: 1000000, algorithm: token_bucket }\n",
      ),
    ],
  },
  {
    name: "2 limits per descriptor (rate_limits: second + hour)",
    limits: [
      loaded(
        "k0",
        "    rate_limits:\n      - { unit: second, requests_per_unit: 1000000 }\n      - { unit: hour, requests_per_unit: 1000000000 }\n",
      ),
    ],
  },
  {
    name: "calendar month (time_zone: Europe/Berlin)",
    limits: [
      loaded(
        "k0",
        "    rate_limit: { unit: month, requests_per_unit: 1000000000, time_zone: Europe/Berlin }\n",
      ),
    ],
  },
  {
    name: "refund (is_negative_hits), fixed window, 1 minute",
    limits: [limit("r", Unit.MINUTE, 1, false, false)],
    hits: -1,
  },
  {
    name: "2 descriptors, fixed, charge: all_or_nothing (EVALSHA)",
    limits: [
      limit("f", Unit.MINUTE, 1, false, true),
      limit("g", Unit.HOUR, 1, false, true),
    ],
  },
];

/** Total CPU seconds of a process from /proc (user + system). */
function cpuSeconds(pid: number): number {
  const fields =
    readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

async function main(): Promise<void> {
  const port = await freePort();
  const redis: ChildProcess = spawn(
    "redis-server",
    ["--port", String(port), "--save", "", "--appendonly", "no"],
    { stdio: "ignore" },
  );
  try {
    const cache = new RateLimitPipeline({
      backend: new KvCounterBackend({
        main: { type: "single", socketType: "tcp", url: `127.0.0.1:${port}` },
        logger: pino({ level: "silent" }),
        startupInitialIntervalMs: 50,
        startupMaxElapsedTimeMs: 10_000,
      }),
      decider: createDecider({ clock: systemClock }),
    });
    await cache.start();
    const admin = await import("ioredis").then(
      (m) => new m.Redis({ port, host: "127.0.0.1" }),
    );
    const commands = async (): Promise<number> => {
      const info = await admin.info("stats");
      return Number(/total_commands_processed:(\d+)/.exec(info)?.[1] ?? 0);
    };
    interface Sample {
      perSecond: number;
      clientUs: number;
      storeUs: number;
      commands: number;
    }
    const samples = new Map<Case, Sample[]>(cases.map((c) => [c, []]));
    const inputs = new Map(
      cases.map((c) => [
        c,
        Array.from({ length: 1000 }, (_, v) =>
          c.limits.map((_, i) =>
            create(RateLimitDescriptorSchema, {
              entries: [{ key: `k${i}`, value: `v${v}` }],
            }),
          ),
        ),
      ]),
    );
    const runCase = async (c: Case, count: number): Promise<void> => {
      const descriptors: RateLimitDescriptor[][] = inputs.get(c)!;
      const hits = c.limits.map(() => c.hits ?? 1);
      let next = 0;
      const worker = async (): Promise<void> => {
        while (next < count) {
          const d = descriptors[next++ % descriptors.length]!;
          await cache.doLimit(limitRequest("bench", d, c.limits, hits));
        }
      };
      await Promise.all(Array.from({ length: concurrency }, worker));
    };
    for (const c of cases) await runCase(c, Math.min(5000, decisions)); // warm-up
    // Rounds interleave the cases, so load from other processes hits them alike; the table
    // shows each case's median round.
    for (let round = 0; round < rounds; round++) {
      for (const c of cases) {
        const commands0 = await commands();
        const redisCpu0 = cpuSeconds(redis.pid!);
        const cpu0 = process.cpuUsage();
        const t0 = performance.now();
        await runCase(c, decisions);
        const ms = performance.now() - t0;
        const cpu = process.cpuUsage(cpu0);
        const redisCpu = cpuSeconds(redis.pid!) - redisCpu0;
        const commandCount = (await commands()) - commands0 - 1;
        samples.get(c)!.push({
          perSecond: decisions / (ms / 1000),
          clientUs: (cpu.user + cpu.system) / decisions,
          storeUs: (redisCpu * 1e6) / decisions,
          commands: commandCount / decisions,
        });
      }
    }
    const median = (values: number[]): number =>
      [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
    const rows = cases.map((c) => {
      const s = samples.get(c)!;
      return `| ${c.name} | ${Math.round(median(s.map((x) => x.perSecond)))} | ${median(
        s.map((x) => x.clientUs),
      ).toFixed(1)} | ${median(s.map((x) => x.storeUs)).toFixed(1)} | ${median(
        s.map((x) => x.commands),
      ).toFixed(2)} |`;
    });
    admin.disconnect();
    await cache.close();
    console.log(
      `\nWindow extensions on the kv backend (in process, ${decisions} decisions × ${rounds} rounds, median; concurrency ${concurrency}, 1000 distinct values)\n`,
    );
    console.log(
      "| case | decisions/s | client CPU µs/decision | redis CPU µs/decision | store commands/decision |",
    );
    console.log("|---|---|---|---|---|");
    for (const row of rows) console.log(row);
  } finally {
    redis.kill("SIGKILL");
  }
}

await main();
