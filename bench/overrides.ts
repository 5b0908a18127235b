// `make bench-overrides` (`node --expose-gc dist/bench/overrides.js`): what run-time overrides
// (docs/operations.md#overrides) cost on the hot path and in memory.
//
// 1. `resolveRequest` (the tree walk plus the override probe, limiter/decision-rules.ts), ns per
//    call for a request of one descriptor: without an override table; with a table holding no
//    override of the domain; with 1,000 (a table that fits in the CPU caches) and with
//    1,000,000 exact overrides, for a descriptor that has one (a hit) and one that has none (a
//    miss); and with 100 prefix-wildcard overrides more (`tenant=w<i>-*`: two prefix lengths,
//    so two more probes for a miss).
// 2. ShouldRateLimit through the in-process service over the memory backend, CPU µs per
//    decision (user + system), with 0 and with 1,000,000 overrides loaded, on a stream of
//    uniformly drawn tenants none of which has an override, and on one where each has. Each
//    mode runs in its own process (its heap holds only its own table); rounds run inside it
//    and the median is printed (the machine is shared). No network.
// 3. Memory per override: 1,000,000 exact overrides (`tenant=t<i>`, one shared limit, a
//    reason and an actor each), heapUsed after a full GC, before and after, and the bytes of
//    the table's typed arrays (outside the heap); measured first, in a heap holding nothing
//    else.
//
// Environment: BENCH_OVERRIDES (default 1000000), BENCH_OVERRIDES_CALLS (resolveRequest calls
// per measure, default 500000), BENCH_OVERRIDES_DECISIONS (per round and mode, default
// 200000), BENCH_OVERRIDES_ROUNDS (default 5).

import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { create } from "@bufbuild/protobuf";
import { pino } from "pino";
import { MemoryCounterBackend } from "../src/backends/memory/memory-counter-backend.js";
import { loadConfig } from "../src/config/load-config.js";
import type { RateLimitConfig } from "../src/config/rate-limit-config.js";
import { createDecider } from "../src/limiter/decide.js";
import type { OverrideLookup } from "../src/limiter/decision-hooks.js";
import { resolveRequest } from "../src/limiter/limit-request.js";
import { RateLimitPipeline } from "../src/limiter/pipeline.js";
import { OverrideTable } from "../src/overrides/override-table.js";
import {
  OverrideLimitSchema,
  RateLimitDescriptorSchema,
  RateLimitRequestSchema,
  RateLimitResponse_RateLimit_Unit as Unit,
  type RateLimitDescriptor,
  type RateLimitRequest,
} from "../src/proto.js";
import {
  createRateLimitService,
  type RateLimitService,
} from "../src/service/rate-limit-service.js";
import { createStatsManager } from "../src/stats/stats-manager.js";
import { systemClock } from "../src/util/clock.js";

const overrideCount = Number(process.env["BENCH_OVERRIDES"] ?? "1000000");
const calls = Number(process.env["BENCH_OVERRIDES_CALLS"] ?? "500000");
const decisions = Number(process.env["BENCH_OVERRIDES_DECISIONS"] ?? "200000");
const rounds = Number(process.env["BENCH_OVERRIDES_ROUNDS"] ?? "5");
const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) {
  process.stderr.write("run with node --expose-gc\n");
  process.exit(2);
}
const collect = gc;

const yaml = `
domain: bench
descriptors:
  - key: tenant
    rate_limit: { unit: minute, requests_per_unit: 1000000 }
  - key: path
    descriptors:
      - key: method
        rate_limit: { unit: hour, requests_per_unit: 100000 }
`;

const limit = create(OverrideLimitSchema, {
  requestsPerUnit: 2000000,
  unit: Unit.MINUTE,
  unitMultiplier: 1,
  algorithm: "fixed_window",
});

/** Fills a table with `count` exact overrides `tenant=t<i>` (and `wildcards` prefix ones). */
function fill(table: OverrideTable, count: number, wildcards = 0): void {
  const updateMs = systemClock.nowMs();
  for (let i = 0; i < count; i++)
    table.put({
      domain: "bench",
      entries: [{ key: "tenant", value: `t${String(i)}` }],
      limit,
      expireMs: undefined,
      reason: "bulk import",
      actor: "bench",
      updateMs,
    });
  for (let i = 0; i < wildcards; i++)
    table.put({
      domain: "bench",
      entries: [{ key: "tenant", value: `w${String(i)}-*` }],
      limit,
      expireMs: undefined,
      reason: "bulk import",
      actor: "bench",
      updateMs,
    });
}

function descriptor(value: string): RateLimitDescriptor {
  return create(RateLimitDescriptorSchema, {
    entries: [{ key: "tenant", value }],
  });
}

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? NaN;
};

/** ns per resolveRequest call over `descriptors` (cycled), one measure of `calls` calls. */
function resolveNs(
  config: RateLimitConfig,
  descriptors: readonly RateLimitDescriptor[],
  overrides: OverrideLookup | undefined,
): number {
  const one: RateLimitDescriptor[] = [descriptors[0]!];
  const mask = descriptors.length - 1;
  const start = process.hrtime.bigint();
  for (let i = 0; i < calls; i++) {
    one[0] = descriptors[i & mask]!;
    resolveRequest(config, "bench", one, 1, overrides);
  }
  return Number(process.hrtime.bigint() - start) / calls;
}

/** 1. resolveRequest with 0, 1,000 and 1,000,000 overrides. */
function resolvePart(): void {
  const statsManager = createStatsManager();
  const config = loadConfig([{ name: "bench.yaml", text: yaml }], {
    statsManager,
  });
  const empty = new OverrideTable({ clock: systemClock });
  empty.put({
    domain: "other",
    entries: [{ key: "tenant", value: "x" }],
    limit,
    expireMs: undefined,
    reason: "",
    actor: "",
    updateMs: 0,
  });
  const small = new OverrideTable({ clock: systemClock });
  fill(small, 1000);
  const loaded = new OverrideTable({ clock: systemClock });
  fill(loaded, overrideCount);
  const withWildcards = new OverrideTable({ clock: systemClock });
  fill(withWildcards, overrideCount, 100);
  // A power of two, so the loop indexes with a mask.
  const sample = 1024;
  const hitDescriptors = Array.from({ length: sample }, (_, i) =>
    descriptor(`t${String((i * 7919) % overrideCount)}`),
  );
  const smallHitDescriptors = Array.from({ length: sample }, (_, i) =>
    descriptor(`t${String((i * 7919) % 1000)}`),
  );
  const missDescriptors = Array.from({ length: sample }, (_, i) =>
    descriptor(`u${String(i)}`),
  );
  const cases: [
    string,
    readonly RateLimitDescriptor[],
    OverrideLookup | undefined,
  ][] = [
    ["no override table", hitDescriptors, undefined],
    ["table, no override in the domain", hitDescriptors, empty],
    // The same probe on a table that fits in the CPU caches: the difference to the next rows is
    // the memory latency of a large table, not work.
    ["1000 exact overrides, hit", smallHitDescriptors, small],
    ["1000 exact overrides, miss", missDescriptors, small],
    [`${String(overrideCount)} exact overrides, hit`, hitDescriptors, loaded],
    [`${String(overrideCount)} exact overrides, miss`, missDescriptors, loaded],
    [
      `${String(overrideCount)} exact + 100 wildcard (2 shapes), miss`,
      missDescriptors,
      withWildcards,
    ],
  ];
  const resolveSamples = cases.map((): number[] => []);
  for (let round = 0; round < rounds; round++)
    cases.forEach(([, descriptors, overrides], i) => {
      resolveSamples[i]!.push(resolveNs(config, descriptors, overrides));
    });
  console.log(
    `resolveRequest, one descriptor (${String(calls)} calls per measure, median of ${String(rounds)} rounds)`,
  );
  cases.forEach(([name], i) => {
    console.log(
      `  ${name.padEnd(52)} ${median(resolveSamples[i]!).toFixed(1).padStart(7)} ns/call`,
    );
  });
}

function service(overrides: OverrideTable | undefined): {
  rls: RateLimitService;
  close: () => Promise<void>;
} {
  const stats = createStatsManager();
  const cache = new RateLimitPipeline({
    backend: new MemoryCounterBackend({
      clock: systemClock,
      statsStore: stats.store,
    }),
    decider: createDecider({ clock: systemClock }),
    statsStore: stats.store,
  });
  const rls = createRateLimitService({
    cache,
    statsManager: stats,
    clock: systemClock,
    logger: pino({ level: "silent" }),
    ...(overrides !== undefined ? { overrides } : {}),
  });
  rls.applyConfigUpdate({
    ok: true,
    config: loadConfig([{ name: "bench.yaml", text: yaml }], {
      statsManager: stats,
    }),
  });
  return { rls, close: () => cache.close() };
}

/** `decisions` requests of one tenant each, uniformly drawn from 1,000,000 names. */
function stream(prefix: string): RateLimitRequest[] {
  let state = 12345;
  const out: RateLimitRequest[] = [];
  for (let i = 0; i < decisions; i++) {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    out.push(
      create(RateLimitRequestSchema, {
        domain: "bench",
        descriptors: [
          {
            entries: [
              {
                key: "tenant",
                value: `${prefix}${String(state % overrideCount)}`,
              },
            ],
          },
        ],
      }),
    );
  }
  return out;
}

async function cpuPerDecision(
  rls: RateLimitService,
  requests: readonly RateLimitRequest[],
): Promise<number> {
  const start = process.cpuUsage();
  for (const request of requests) await rls.shouldRateLimit(request);
  const used = process.cpuUsage(start);
  return (used.user + used.system) / requests.length;
}

/**
 * 2. One mode of ShouldRateLimit through the in-process service, run in a child process so
 * that each mode has only its own heap (a table of a million overrides makes every major GC of
 * its process longer).
 *
 * @returns CPU µs per decision, median of `rounds`
 */
async function servicePart(mode: ServiceMode): Promise<number> {
  const table = new OverrideTable({ clock: systemClock });
  if (mode !== "none") fill(table, mode === "empty" ? 0 : overrideCount);
  const requests = stream(mode === "hit" ? "t" : "u");
  const samples: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const { rls, close } = service(mode === "none" ? undefined : table);
    // Warm-up on a slice, then the measured stream.
    await cpuPerDecision(rls, requests.slice(0, 20_000));
    samples.push(await cpuPerDecision(rls, requests));
    await close();
  }
  return median(samples);
}

/** 3. Heap bytes per override, in a fresh heap (and typed-array bytes, outside it). */
function heapPart(): void {
  collect();
  const before = process.memoryUsage();
  const measured = new OverrideTable({ clock: systemClock });
  fill(measured, overrideCount);
  collect();
  const after = process.memoryUsage();
  const per = (bytes: number): string => (bytes / measured.size).toFixed(0);
  console.log(
    `heap per override: ${per(after.heapUsed - before.heapUsed)} bytes, plus ${per(after.arrayBuffers - before.arrayBuffers)} in typed arrays (${String(measured.size)} exact overrides, one shared limit; heapUsed ${(before.heapUsed / 1048576).toFixed(1)} -> ${(after.heapUsed / 1048576).toFixed(1)} MiB)`,
  );
}

/** The ShouldRateLimit modes, each in its own process. */
const serviceModes = {
  none: "0 overrides (no table)",
  empty: "0 overrides (empty table)",
  miss: `${String(overrideCount)} overrides, no request overridden`,
  hit: `${String(overrideCount)} overrides, every request overridden`,
} as const;
type ServiceMode = keyof typeof serviceModes;

const childMode = process.argv[2];
if (childMode !== undefined) {
  if (!(childMode in serviceModes)) {
    process.stderr.write(`unknown mode ${childMode}\n`);
    process.exit(2);
  }
  console.log(String(await servicePart(childMode as ServiceMode)));
} else {
  heapPart();
  resolvePart();
  console.log(
    `ShouldRateLimit, in-process service, memory backend (${String(decisions)} decisions per round, median of ${String(rounds)}; one process per mode)`,
  );
  for (const [mode, name] of Object.entries(serviceModes)) {
    const child = spawnSync(
      process.execPath,
      ["--expose-gc", fileURLToPath(import.meta.url), mode],
      { encoding: "utf8", env: process.env },
    );
    const us = Number(child.stdout.trim());
    if (child.status !== 0 || !Number.isFinite(us)) {
      process.stderr.write(child.stderr);
      process.exit(1);
    }
    console.log(
      `  ${name.padEnd(52)} ${us.toFixed(2).padStart(7)} µs CPU/decision`,
    );
  }
}
