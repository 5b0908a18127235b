// Hot-key leases (issue 33 item 2) on real stores: 3 replicas × 2 workers (six pipelines, each
// with its own connection and lease table) share one redis-server or one memcached, under a
// seeded load of concurrent bursts on one hot key within one window. Admitted never exceeds the
// limit; under-admission stays within replicas × workers × lease_max; the store sees far fewer
// operations than decisions.
import { Client } from "memjs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KvCounterBackend } from "../../src/backends/kv/kv-counter-backend.js";
import { McCounterBackend } from "../../src/backends/mc/mc-counter-backend.js";
import { compileLease } from "../../src/config/lease.js";
import type { RateLimit } from "../../src/config/rate-limit-config.js";
import type { CounterBackend } from "../../src/limiter/counter-backend.js";
import { createDecider } from "../../src/limiter/decide.js";
import { RateLimitPipeline } from "../../src/limiter/pipeline.js";
import {
  RateLimitResponse_Code as Code,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../../src/proto.js";
import { createStatsManager } from "../../src/stats/stats-manager.js";
import type { Clock } from "../../src/util/clock.js";
import { limitRequest } from "../helpers/limit-request.js";
import {
  startMemcached,
  type MemcachedServer,
} from "../helpers/memcached-server.js";
import { slidingWindow, testRateLimit } from "../helpers/rate-limit.js";
import {
  commandCalls,
  startRedisServer,
  stopAllRedisServers,
  track,
  type RedisServer,
} from "../helpers/redis-server.js";
import { descriptor } from "../helpers/requests.js";
import { mulberry32 } from "../helpers/seeded-random.js";
import { silentLogger } from "../helpers/silent-logger.js";

const silent = silentLogger();
const replicas = 3;
const workers = 2;
const limitValue = 300;
const leaseMax = 10;

/** A clock in ms the test moves by hand. */
class MsClock implements Clock {
  ms: number;
  constructor(ms: number) {
    this.ms = ms;
  }
  nowSeconds(): number {
    return Math.floor(this.ms / 1000);
  }
  nowMs(): number {
    return this.ms;
  }
}

let redis: RedisServer;
let memcached: MemcachedServer;

beforeAll(async () => {
  [redis, memcached] = await Promise.all([
    startRedisServer().then(track),
    startMemcached(),
  ]);
});
afterAll(async () => {
  await memcached.stop();
  await stopAllRedisServers();
});

type Store = "kv" | "mc";

function backendOf(store: Store, clock: Clock): CounterBackend {
  return store === "kv"
    ? new KvCounterBackend({
        main: { type: "single", socketType: "tcp", url: redis.address },
        logger: silent,
        clock,
      })
    : new McCounterBackend({
        clock,
        logger: silent,
        hostPorts: [memcached.address],
      });
}

/** Store operations so far: kv's INCRBY calls, mc's increments (`stats` incr hits + misses). */
async function storeOperations(store: Store): Promise<number> {
  if (store === "kv") {
    const admin = redis.client();
    try {
      return await commandCalls(admin, "incrby");
    } finally {
      admin.disconnect();
    }
  }
  const client = Client.create(memcached.address);
  try {
    const stats = await new Promise<Record<string, string>>((resolve) => {
      client.stats((_err, _server, values) => {
        if (values !== null) resolve(values);
      });
    });
    return Number(stats["incr_hits"] ?? 0) + Number(stats["incr_misses"] ?? 0);
  } finally {
    client.close();
  }
}

describe.each([
  { store: "kv" as const, algorithm: "fixed" as const, seed: 11 },
  { store: "kv" as const, algorithm: "sliding" as const, seed: 12 },
  { store: "mc" as const, algorithm: "fixed" as const, seed: 13 },
  { store: "mc" as const, algorithm: "sliding" as const, seed: 14 },
])("leases on $store, $algorithm window", ({ store, algorithm, seed }) => {
  it(`never admits more than the limit and under-admits at most ${String(replicas * workers * leaseMax)} (${String(replicas)} replicas × ${String(workers)} workers × lease_max ${String(leaseMax)})`, async () => {
    // A minute boundary near real time (mc compares long expirations with its own clock).
    const minute = Math.floor(Date.now() / 60_000) * 60_000;
    const clock = new MsClock(minute);
    const stats = createStatsManager();
    const key = `lease_${store}_${algorithm}`;
    const limit: RateLimit = testRateLimit(
      stats,
      `d.${key}`,
      limitValue,
      Unit.MINUTE,
      {
        lease: compileLease(leaseMax, stats, `d.${key}`),
        ...(algorithm === "sliding"
          ? { algorithm: slidingWindow(60), cacheKeySuffix: "_s60" }
          : {}),
      },
    );
    const pipelines = Array.from(
      { length: replicas * workers },
      () =>
        new RateLimitPipeline({
          backend: backendOf(store, clock),
          decider: createDecider({ clock, expirationJitterMaxSeconds: 0 }),
          leaseClock: clock,
        }),
    );
    try {
      await Promise.all(pipelines.map((p) => p.start()));
      const before = await storeOperations(store);
      const random = mulberry32(seed);
      let admitted = 0;
      let decisions = 0;
      // 2,000 calls in bursts of up to 40 concurrent calls over random pipelines, all within
      // the first 50 s of the window (the clock moves 0–49 ms between bursts).
      while (decisions < 2000) {
        clock.ms += Math.floor(random() * 50);
        const burst = Array.from(
          { length: 1 + Math.floor(random() * 40) },
          () =>
            pipelines[Math.floor(random() * pipelines.length)]!.doLimit(
              limitRequest("d", [descriptor([key, "hot"])], [limit], [1]),
            ),
        );
        for (const statuses of await Promise.all(burst)) {
          decisions++;
          if (statuses[0]!.code === Code.OK) admitted++;
        }
      }
      expect(clock.ms - minute).toBeLessThan(60_000);
      const operations = (await storeOperations(store)) - before;
      expect(admitted).toBeLessThanOrEqual(limitValue);
      expect(admitted).toBeGreaterThanOrEqual(
        limitValue - replicas * workers * leaseMax,
      );
      // The store is asked once per lease, not once per decision (refused calls after a
      // clipped lease are answered in process for up to a second).
      expect(operations).toBeLessThan(decisions / 4);
      const prefix = `ratelimit.service.rate_limit.d.${key}.`;
      const taken = stats.store.counter(prefix + "lease_taken").value();
      // Every admitted hit came from a lease; what the leases still hold is the shortfall.
      const unspent = pipelines.reduce(
        (sum, p) =>
          sum +
          p.leases!.unspent(
            `d_${key}_hot_${String(minute / 1000)}${algorithm === "sliding" ? "_s60" : ""}`,
          ),
        0,
      );
      expect(taken).toBe(admitted + unspent);
      expect(taken).toBeLessThanOrEqual(limitValue);
    } finally {
      await Promise.all(pipelines.map((p) => p.close()));
    }
  });
});
