import { createHash } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { silentLogger } from "../helpers/silent-logger.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { allOrNothingScript } from "../../src/backends/kv/kv-scripts.js";
import type { KvInstanceOptions } from "../../src/backends/kv/kv-options.js";
import type { RateLimit } from "../../src/config/rate-limit-config.js";
import { createDecider } from "../../src/limiter/decide.js";
import type { RateLimitCache } from "../../src/limiter/rate-limit-cache.js";
import {
  RateLimitDescriptorSchema,
  RateLimitResponse_Code as Code,
  RateLimitResponse_RateLimit_Unit as Unit,
  type RateLimitDescriptor,
} from "../../src/proto.js";
import { createStatsManager } from "../../src/stats/stats-manager.js";
import { StatsStore } from "../../src/stats/stats-store.js";
import { FakeClock } from "../helpers/fake-clock.js";
import {
  startMemcached,
  type MemcachedServer,
} from "../helpers/memcached-server.js";
import { windowedRateLimit } from "../helpers/rate-limit.js";
import {
  startRedisCluster,
  startRedisServer,
  stopAllRedisServers,
  track,
  type RedisCluster,
  type RedisServer,
} from "../helpers/redis-server.js";
import { kvLimiter, mcLimiter, memoryLimiter } from "../helpers/limiters.js";
import type { KvCounterBackend } from "../../src/backends/kv/kv-counter-backend.js";
import type { RateLimitPipeline } from "../../src/limiter/pipeline.js";
import { limitRequest } from "../helpers/limit-request.js";

// Sliding windows, unit_multiplier and all-or-nothing charging on real stores: the same
// request sequences give the same answers on every backend as on the memory backend.

const silent = silentLogger();
const start = 1_700_000_040; // a multiple of 120 s

let single: RedisServer;
let perSecondServer: RedisServer;
let cluster: RedisCluster;
let memcached: MemcachedServer;
const closers: (() => Promise<void>)[] = [];

beforeAll(async () => {
  [single, perSecondServer, cluster, memcached] = await Promise.all([
    startRedisServer().then(track),
    startRedisServer().then(track),
    startRedisCluster(3).then(track),
    startMemcached(),
  ]);
}, 60_000);
afterAll(async () => {
  await Promise.all(closers.splice(0).map((close) => close()));
  await stopAllRedisServers();
  await memcached.stop();
});

type BackendName = "memory" | "kv" | "kv+per-second" | "kv-cluster" | "mc";
const backendNames: readonly BackendName[] = [
  "memory",
  "kv",
  "kv+per-second",
  "kv-cluster",
  "mc",
];

async function backend(
  name: BackendName,
  clock: FakeClock,
  prefix: string,
  statsStore = new StatsStore(),
): Promise<RateLimitCache> {
  const decider = createDecider({
    clock,
    cacheKeyPrefix: prefix,
    expirationJitterMaxSeconds: 0,
  });
  let cache: RateLimitCache;
  const kv = (
    main: KvInstanceOptions,
    perSecond?: KvInstanceOptions,
  ): RateLimitPipeline<KvCounterBackend> =>
    kvLimiter({
      main,
      ...(perSecond !== undefined ? { perSecond } : {}),
      decider,
      logger: silent,
      statsStore,
    });
  switch (name) {
    case "memory":
      cache = memoryLimiter({ decider, clock });
      break;
    case "kv":
      cache = kv({ type: "single", socketType: "tcp", url: single.address });
      break;
    case "kv+per-second":
      cache = kv(
        { type: "single", socketType: "tcp", url: single.address },
        { type: "single", socketType: "tcp", url: perSecondServer.address },
      );
      break;
    case "kv-cluster":
      cache = kv({ type: "cluster", url: cluster.url });
      break;
    case "mc":
      cache = mcLimiter({
        decider,
        clock,
        logger: silent,
        statsStore,
        hostPorts: [memcached.address],
      });
      break;
  }
  await cache.start?.();
  closers.push(() => cache.close());
  return cache;
}

/** A deterministic pseudo-random sequence (LCG), so every backend sees the same requests. */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

interface Step {
  readonly wait: number;
  /** Indexes of the scenario's descriptors in this request. */
  readonly picks: readonly number[];
  readonly hits: number;
}

function steps(seed: number, count: number, descriptors: number): Step[] {
  const next = random(seed);
  const out: Step[] = [];
  for (let i = 0; i < count; i++) {
    const picks: number[] = [];
    for (let d = 0; d < descriptors; d++) if (next() < 0.6) picks.push(d);
    if (picks.length === 0) picks.push(Math.floor(next() * descriptors));
    out.push({
      wait: Math.floor(next() * 5),
      picks,
      hits: 1 + Math.floor(next() * 3),
    });
  }
  return out;
}

interface Scenario {
  readonly name: string;
  readonly limits: (
    stats: ReturnType<typeof createStatsManager>,
  ) => RateLimit[];
}

const scenarios: readonly Scenario[] = [
  {
    name: "sliding window",
    limits: (stats) => [
      windowedRateLimit(stats, "d.a", 10, Unit.MINUTE, { sliding: true }),
      windowedRateLimit(stats, "d.b", 6, Unit.SECOND, {
        sliding: true,
        unitMultiplier: 10,
      }),
    ],
  },
  {
    name: "unit_multiplier",
    limits: (stats) => [
      windowedRateLimit(stats, "d.a", 7, Unit.MINUTE, { unitMultiplier: 2 }),
      windowedRateLimit(stats, "d.b", 5, Unit.SECOND, { unitMultiplier: 15 }),
    ],
  },
  {
    name: "all-or-nothing",
    limits: (stats) => [
      windowedRateLimit(stats, "d.a", 12, Unit.MINUTE, { allOrNothing: true }),
      windowedRateLimit(stats, "d.b", 9, Unit.MINUTE, {
        allOrNothing: true,
        sliding: true,
      }),
      windowedRateLimit(stats, "d.c", 4, Unit.SECOND, {
        allOrNothing: true,
        unitMultiplier: 10,
      }),
    ],
  },
];

/** One answer per descriptor: code, remaining and reset, as text for a readable diff. */
async function run(
  cache: RateLimitCache,
  clock: FakeClock,
  limits: readonly RateLimit[],
  sequence: readonly Step[],
): Promise<string[]> {
  const descriptors: RateLimitDescriptor[] = limits.map((_, i) =>
    create(RateLimitDescriptorSchema, {
      entries: [{ key: "k", value: `v${i}` }],
    }),
  );
  clock.seconds = start;
  const answers: string[] = [];
  for (const step of sequence) {
    clock.seconds += step.wait;
    const statuses = await cache.doLimit(
      limitRequest(
        "d",
        step.picks.map((i) => descriptors[i]!),
        step.picks.map((i) => limits[i]),
        step.picks.map(() => step.hits),
      ),
    );
    // mc increments in the background: let them land before the next request.
    await cache.flush();
    answers.push(
      `t+${clock.seconds - start} ` +
        statuses
          .map(
            (s, j) =>
              `${step.picks[j]}:${Code[s.code]}/${s.limitRemaining}/${s.durationUntilReset?.seconds ?? "-"}`,
          )
          .join(" "),
    );
  }
  return answers;
}

describe("window extensions on every backend", () => {
  let prefixCounter = 0;
  for (const scenario of scenarios) {
    it(`${scenario.name}: every backend answers as the memory backend`, async () => {
      const stats = createStatsManager();
      const limits = scenario.limits(stats);
      const sequence = steps(17 + prefixCounter, 160, limits.length);
      const results = new Map<BackendName, string[]>();
      for (const name of backendNames) {
        const clock = new FakeClock(start);
        const cache = await backend(name, clock, `w${prefixCounter++}:`);
        results.set(name, await run(cache, clock, limits, sequence));
      }
      const expected = results.get("memory")!;
      // The sequence must exercise both answers.
      expect(expected.some((a) => a.includes("OVER_LIMIT"))).toBe(true);
      expect(expected.some((a) => a.includes(":OK/"))).toBe(true);
      for (const name of backendNames) {
        expect(results.get(name), name).toEqual(expected);
      }
    }, 60_000);
  }
});

describe("all-or-nothing with one counter twice in a request", () => {
  // Two descriptors on the same counter are charged together: each fits alone (3 ≤ 5), both
  // do not (6 > 5), so the request is refused and the counter stays untouched.
  for (const name of backendNames) {
    it(`${name}: refuses what only fits descriptor by descriptor`, async () => {
      const stats = createStatsManager();
      const limit = windowedRateLimit(stats, "d.a", 5, Unit.MINUTE, {
        allOrNothing: true,
      });
      const clock = new FakeClock(start);
      const cache = await backend(name, clock, `twice-${name}:`);
      const descriptor = create(RateLimitDescriptorSchema, {
        entries: [{ key: "k", value: "same" }],
      });
      const twice = await cache.doLimit(
        limitRequest("d", [descriptor, descriptor], [limit, limit], [3, 3]),
      );
      await cache.flush();
      expect(twice.some((s) => s.code === Code.OVER_LIMIT)).toBe(true);
      // Nothing was charged: the whole budget is still there.
      const once = await cache.doLimit(
        limitRequest("d", [descriptor], [limit], [5]),
      );
      await cache.flush();
      expect(once[0]!.code).toBe(Code.OK);
      expect(once[0]!.limitRemaining).toBe(0);
    });
  }
});

describe("concurrency: many clients, one key", () => {
  const clients = 6;
  const requests = 240;

  async function concurrent(
    name: "kv" | "kv-cluster" | "mc",
    limits: readonly RateLimit[],
    prefix: string,
  ): Promise<{ admitted: number; peek: number[]; compensated: number }> {
    const clock = new FakeClock(start);
    const statsStore = new StatsStore();
    const caches = await Promise.all(
      Array.from({ length: clients }, () =>
        backend(name, clock, prefix, statsStore),
      ),
    );
    const descriptors = limits.map((_, i) =>
      create(RateLimitDescriptorSchema, {
        entries: [{ key: "k", value: `v${i}` }],
      }),
    );
    const answers = await Promise.all(
      Array.from({ length: requests }, (_, r) =>
        caches[r % clients]!.doLimit(
          limitRequest(
            "d",
            descriptors,
            limits,
            limits.map(() => 1),
          ),
        ),
      ),
    );
    const admitted = answers.filter((statuses) =>
      statuses.every((s) => s.code === Code.OK),
    ).length;
    // What the counters hold now, read with 0 hits.
    const peek = (
      await caches[0]!.doLimit(
        limitRequest(
          "d",
          descriptors,
          limits.map((l) => ({ ...l, requestsPerUnit: 1_000_000 })),
          limits.map(() => 0),
        ),
      )
    ).map((s) => 1_000_000 - s.limitRemaining);
    const compensated = statsStore
      .counter("ratelimit.all_or_nothing.compensated")
      .value();
    return { admitted, peek, compensated };
  }

  it("fixed window on one instance: never more than the limit", async () => {
    const stats = createStatsManager();
    const limit = windowedRateLimit(stats, "d.a", 50, Unit.MINUTE);
    const { admitted, peek } = await concurrent("kv", [limit], "c1:");
    expect(admitted).toBe(50);
    expect(peek).toEqual([requests]);
  }, 60_000);

  it("all-or-nothing on one instance (script): never more than the limit, nothing charged for rejected requests", async () => {
    const stats = createStatsManager();
    const limits = [
      windowedRateLimit(stats, "d.a", 40, Unit.MINUTE, { allOrNothing: true }),
      windowedRateLimit(stats, "d.b", 1000, Unit.MINUTE, {
        allOrNothing: true,
      }),
    ];
    const { admitted, peek, compensated } = await concurrent(
      "kv",
      limits,
      "c2:",
    );
    expect(admitted).toBe(40);
    expect(peek).toEqual([40, 40]);
    expect(compensated).toBe(0);
  }, 60_000);

  it("all-or-nothing on a cluster (check-then-increment): compensates races, never more than the limit", async () => {
    const stats = createStatsManager();
    const limits = [
      windowedRateLimit(stats, "d.a", 40, Unit.MINUTE, { allOrNothing: true }),
      windowedRateLimit(stats, "d.b", 1000, Unit.MINUTE, {
        allOrNothing: true,
      }),
    ];
    const { admitted, peek } = await concurrent("kv-cluster", limits, "c3:");
    expect(admitted).toBeLessThanOrEqual(40);
    expect(admitted).toBeGreaterThan(0);
    // Compensation leaves exactly the admitted requests' hits in both counters.
    expect(peek).toEqual([admitted, admitted]);
  }, 60_000);

  it("all-or-nothing on memcached (check-then-increment): compensates races, never more than the limit", async () => {
    const stats = createStatsManager();
    const limits = [
      windowedRateLimit(stats, "d.a", 40, Unit.MINUTE, { allOrNothing: true }),
      windowedRateLimit(stats, "d.b", 1000, Unit.MINUTE, {
        allOrNothing: true,
      }),
    ];
    const { admitted, peek, compensated } = await concurrent(
      "mc",
      limits,
      "c4:",
    );
    expect(admitted).toBeLessThanOrEqual(40);
    expect(admitted).toBeGreaterThan(0);
    // Compensation leaves exactly the admitted requests' hits in both counters.
    expect(peek).toEqual([admitted, admitted]);
    // Each refused request was refused by the check or compensated, never both.
    expect(compensated).toBeLessThanOrEqual(requests - admitted);
  }, 60_000);
});

describe("all-or-nothing script on a single instance", () => {
  it("is loaded at start and loaded again after NOSCRIPT (SCRIPT FLUSH)", async () => {
    const admin = single.client();
    try {
      await admin.script("FLUSH");
      const clock = new FakeClock(start);
      const cache = await backend("kv", clock, "ns:");
      const sha = createHash("sha1").update(allOrNothingScript).digest("hex");
      expect(await admin.script("EXISTS", sha)).toEqual([1]);
      const stats = createStatsManager();
      const limits = [
        windowedRateLimit(stats, "d.a", 2, Unit.MINUTE, { allOrNothing: true }),
      ];
      const d = [
        create(RateLimitDescriptorSchema, {
          entries: [{ key: "k", value: "v" }],
        }),
      ];
      expect(
        (await cache.doLimit(limitRequest("d", d, limits, [1])))[0]!
          .limitRemaining,
      ).toBe(1);
      await admin.script("FLUSH");
      expect(await admin.script("EXISTS", sha)).toEqual([0]);
      expect(
        (await cache.doLimit(limitRequest("d", d, limits, [1])))[0]!
          .limitRemaining,
      ).toBe(0);
      expect(await admin.script("EXISTS", sha)).toEqual([1]);
      expect(
        (await cache.doLimit(limitRequest("d", d, limits, [1])))[0]!.code,
      ).toBe(Code.OVER_LIMIT);
    } finally {
      admin.disconnect();
    }
  });
});
