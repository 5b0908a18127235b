// `node --expose-gc dist/bench/memory-store.js [keys]`: heap cost of the memory backend's
// counters. Fills `keys` distinct cache keys (default 1,000,000) through the pipeline over the memory backend,
// prints bytes of heap per live key, then moves the clock past the window, lets the sweep free
// them and prints heapUsed/RSS against the values before the fill. One process, no network.
import { compileAlgorithm } from "../src/config/algorithm.js";
import { create } from "@bufbuild/protobuf";
import { MemoryCounterBackend } from "../src/backends/memory/memory-counter-backend.js";
import { unitToSeconds } from "../src/config/units.js";
import type { RateLimit } from "../src/config/rate-limit-config.js";
import { createDecider } from "../src/limiter/decide.js";
import { RateLimitPipeline } from "../src/limiter/pipeline.js";
import {
  RateLimitDescriptorSchema,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../src/proto.js";
import { createStatsManager } from "../src/stats/stats-manager.js";
import { limitRequest } from "../test/helpers/limit-request.js";

const keys = Number(process.argv[2] ?? "1000000");
const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) {
  process.stderr.write("run with node --expose-gc\n");
  process.exit(2);
}
const collect = gc;
const mib = (bytes: number): string => (bytes / 1048576).toFixed(1);

let now = 1_764_000_000;
const clock = { nowSeconds: () => now, nowMs: () => now * 1000 };
const stats = createStatsManager();
const cache = new RateLimitPipeline({
  backend: new MemoryCounterBackend({
    clock,
    sweepIntervalMs: 50,
    maxKeys: Math.max(keys, 1),
  }),
  decider: createDecider({ clock }),
});
const limit: RateLimit = {
  fullKey: "bench.remote_address",
  stats: stats.rateLimitStats("bench.remote_address"),
  requestsPerUnit: 1000,
  unit: Unit.MINUTE,
  unitSeconds: unitToSeconds(Unit.MINUTE),
  unitMultiplier: 1,
  windowSeconds: unitToSeconds(Unit.MINUTE),
  algorithm: compileAlgorithm(
    unitToSeconds(Unit.MINUTE),
    false,
    undefined,
    undefined,
  ),
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

collect();
const before = process.memoryUsage();
const perCall = 1000;
const limits = new Array(perCall).fill(limit);
const hits = new Array<number>(perCall).fill(1);
for (let done = 0; done < keys; done += perCall) {
  const n = Math.min(perCall, keys - done);
  const descriptors = Array.from({ length: n }, (_, i) =>
    create(RateLimitDescriptorSchema, {
      // Like an IPv4 client address: 7 to 15 characters.
      entries: [
        {
          key: "remote_address",
          value: `10.${(done + i) >>> 16}.${((done + i) >>> 8) & 255}.${(done + i) & 255}`,
        },
      ],
    }),
  );
  await cache.doLimit(
    limitRequest("bench", descriptors, limits.slice(0, n), hits.slice(0, n)),
  );
}
collect();
const full = process.memoryUsage();
const live = cache.backend.size;
now += 120; // past the minute window
const start = Date.now();
while (cache.backend.size > 0) await new Promise((r) => setTimeout(r, 20));
const freedMs = Date.now() - start;
collect();
await new Promise((r) => setTimeout(r, 100));
collect();
const after = process.memoryUsage();
await cache.close();

process.stdout.write(
  [
    `| memory backend, ${live} live keys | value |`,
    "| --- | --- |",
    `| heap bytes per live key | ${((full.heapUsed - before.heapUsed) / live).toFixed(0)} |`,
    `| heapUsed before / full / after expiry (MiB) | ${mib(before.heapUsed)} / ${mib(full.heapUsed)} / ${mib(after.heapUsed)} |`,
    `| heapUsed after expiry vs before | ${(((after.heapUsed - before.heapUsed) / before.heapUsed) * 100).toFixed(1)} % |`,
    `| RSS before / full / after expiry (MiB) | ${mib(before.rss)} / ${mib(full.rss)} / ${mib(after.rss)} |`,
    `| time from window end to size 0 (ms) | ${freedMs} |`,
    "",
  ].join("\n"),
);
