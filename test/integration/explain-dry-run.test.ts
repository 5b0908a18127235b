// Explain's dry run (RateLimitPipeline.dryRun over a ReadOnlyCounterBackend) on the remote
// stores: it answers what the real charge then answers, in every charge mode, and writes
// nothing (a second dry run answers the same). Real redis-server and memcached.
import { create } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KvCounterBackend } from "../../src/backends/kv/kv-counter-backend.js";
import { McCounterBackend } from "../../src/backends/mc/mc-counter-backend.js";
import type { RateLimit } from "../../src/config/rate-limit-config.js";
import { resolveGcraParams } from "../../src/config/token-bucket.js";
import type { CounterBackend } from "../../src/limiter/counter-backend.js";
import { createDecider } from "../../src/limiter/decide.js";
import { limitRequest } from "../helpers/limit-request.js";
import { RateLimitPipeline } from "../../src/limiter/pipeline.js";
import {
  RateLimitDescriptorSchema,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../../src/proto.js";
import { createStatsManager } from "../../src/stats/stats-manager.js";
import { FakeClock } from "../helpers/fake-clock.js";
import {
  startMemcached,
  type MemcachedServer,
} from "../helpers/memcached-server.js";
import { startRedisServer, type RedisServer } from "../helpers/redis-server.js";
import {
  testRateLimit,
  tokenBucket,
  windowedRateLimit,
} from "../helpers/rate-limit.js";
import { silentLogger } from "../helpers/silent-logger.js";

let redis: RedisServer;
let memcached: MemcachedServer;
beforeAll(async () => {
  [redis, memcached] = await Promise.all([
    startRedisServer(),
    startMemcached(),
  ]);
}, 60_000);
afterAll(async () => {
  await Promise.all([redis.stop(), memcached.stop()]);
});

const stats = createStatsManager();
const muted = createStatsManager().rateLimitStats("muted");

function limitsFor(domain: string, allOrNothing: boolean) {
  const all = [
    windowedRateLimit(stats, `${domain}.fixed`, 3, Unit.MINUTE),
    windowedRateLimit(stats, `${domain}.sliding`, 4, Unit.MINUTE, {
      sliding: true,
    }),
    testRateLimit(stats, `${domain}.bucket`, 3, Unit.MINUTE, {
      algorithm: tokenBucket(
        resolveGcraParams({ requestsPerUnit: 3, windowSeconds: 60 }),
      ),
      cacheKeySuffix: "tb",
    }),
  ];
  return all.map((l): RateLimit => ({ ...l, allOrNothing }));
}

const stores: {
  name: string;
  accumulates: boolean;
  open: (clock: FakeClock) => CounterBackend;
}[] = [
  {
    name: "kv",
    accumulates: true,
    open: () =>
      new KvCounterBackend({
        main: { type: "single", socketType: "tcp", url: redis.address },
        logger: silentLogger(),
      }),
  },
  {
    name: "mc",
    accumulates: false,
    open: (clock) =>
      new McCounterBackend({
        clock,
        logger: silentLogger(),
        hostPorts: [memcached.address],
      }),
  },
];

describe("Explain's dry run on remote stores", () => {
  for (const store of stores)
    for (const mode of ["usual", "stop-increment", "all-or-nothing"] as const) {
      if (store.name === "mc" && mode === "stop-increment") continue; // mc ignores it
      it(`answers as the charge that follows, writing nothing (${store.name}, ${mode})`, async () => {
        const clock = new FakeClock(1_800_000_000);
        const backend = store.open(clock);
        await backend.start?.();
        const pipeline = new RateLimitPipeline({
          backend,
          decider: createDecider({ clock, random: () => 0.5 }),
          stopCacheKeyIncrementWhenOverlimit: mode === "stop-increment",
        });
        const domain = `dry_${store.name}_${mode.replace(/-/g, "_")}`;
        const [fixed, sliding, bucket] = limitsFor(
          domain,
          mode === "all-or-nothing",
        );
        const values = ["a", "a", "b"];
        const request = () =>
          limitRequest(
            domain,
            [...values, ...values, ...values].map((v) =>
              create(RateLimitDescriptorSchema, {
                entries: [{ key: "k", value: v }],
              }),
            ),
            [
              ...values.map(() => fixed!),
              ...values.map(() => sliding!),
              ...values.map(() => bucket!),
            ],
            [1, 2, 1, 1, 2, 1, 1, 2, 1],
          );
        const options = {
          stats: muted,
          incrementAccumulates: store.accumulates,
        };
        try {
          for (let step = 0; step < 5; step++) {
            const dry = await pipeline.dryRun(request(), options);
            const again = await pipeline.dryRun(request(), options);
            expect(again.statuses).toEqual(dry.statuses);
            const real = await pipeline.doLimit(request());
            await pipeline.flush();
            expect(dry.statuses).toEqual(real);
            clock.seconds += 7;
          }
        } finally {
          await pipeline.close();
        }
      });
    }
});
