import { silentLogger } from "../helpers/silent-logger.js";
import type { Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { KvBackendOptions } from "../../src/backends/kv/kv-options.js";
import { BackendError } from "../../src/limiter/backend-error.js";
import { createDecider } from "../../src/limiter/decide.js";
import { createLocalCache } from "../../src/limiter/local-cache.js";
import {
  RateLimitResponse_Code as Code,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../../src/proto.js";
import { createStatsManager } from "../../src/stats/stats-manager.js";
import { FakeClock } from "../helpers/fake-clock.js";
import { testRateLimit } from "../helpers/rate-limit.js";
import {
  commandCalls,
  startRedisServer,
  stopAllRedisServers,
  track,
  type RedisServer,
} from "../helpers/redis-server.js";
import { waitFor } from "../helpers/wait-for.js";
import { kvLimiter } from "../helpers/limiters.js";
import type { KvCounterBackend } from "../../src/backends/kv/kv-counter-backend.js";
import type { RateLimitPipeline } from "../../src/limiter/pipeline.js";
import { limitRequest } from "../helpers/limit-request.js";
import { descriptor } from "../helpers/requests.js";

// Keys embed the window start, so a fixed clock gives exact key names; TTLs are real.
const nowSeconds = 1_700_000_123;
const silent = silentLogger();

let main: RedisServer;
let perSecond: RedisServer;
let admin: Redis;
let perSecondAdmin: Redis;
const caches: RateLimitPipeline<KvCounterBackend>[] = [];

beforeAll(async () => {
  [main, perSecond] = await Promise.all([
    startRedisServer({ unixSocket: true }).then(track),
    startRedisServer().then(track),
  ]);
  admin = main.client();
  perSecondAdmin = perSecond.client();
});
afterEach(async () => {
  await Promise.all(caches.splice(0).map((c) => c.close()));
  await admin.flushall();
  await perSecondAdmin.flushall();
});
afterAll(async () => {
  admin.disconnect();
  perSecondAdmin.disconnect();
  await stopAllRedisServers();
});

function setup(
  options: Partial<KvBackendOptions> & {
    stopCacheKeyIncrementWhenOverlimit?: boolean;
    jitter?: number;
    prefix?: string;
    localCacheBytes?: number;
  } = {},
) {
  const clock = new FakeClock(nowSeconds);
  const stats = createStatsManager();
  const localCache =
    options.localCacheBytes === undefined
      ? undefined
      : createLocalCache({ maxBytes: options.localCacheBytes, clock });
  const decider = createDecider({
    clock,
    expirationJitterMaxSeconds: options.jitter ?? 300,
    cacheKeyPrefix: options.prefix ?? "",
    ...(localCache !== undefined ? { localCache } : {}),
  });
  const cache = kvLimiter({
    main: { type: "single", socketType: "tcp", url: main.address },
    logger: silent,
    statsStore: stats.store,
    ...options,
    decider,
  });
  caches.push(cache);
  return { cache, stats, clock };
}

describe("KvCounterBackend on a single redis-server", () => {
  it("counts, answers over limit, and stores the reference's keys, values and TTLs", async () => {
    const { cache, stats } = setup();
    await cache.start();
    const limit = testRateLimit(stats, "d.key_value", 3, Unit.MINUTE);
    const nested = testRateLimit(stats, "d.a_b.c_d", 10, Unit.HOUR);
    const d1 = descriptor(["key", "value"]);
    const d2 = descriptor(["a", "b"], ["c", ""]);
    const remaining: number[] = [];
    for (let i = 0; i < 3; i++) {
      const [s1, s2] = await cache.doLimit(
        limitRequest("d", [d1, d2], [limit, nested], [1, 2]),
      );
      expect(s1!.code).toBe(Code.OK);
      expect(s2!.code).toBe(Code.OK);
      remaining.push(s1!.limitRemaining);
    }
    expect(remaining).toEqual([2, 1, 0]);
    const [over] = await cache.doLimit(limitRequest("d", [d1], [limit], [1]));
    expect(over!.code).toBe(Code.OVER_LIMIT);
    expect(over!.limitRemaining).toBe(0);
    expect(stats.rateLimitStats("d.key_value").overLimit.value()).toBe(1);

    const minuteStart = nowSeconds - (nowSeconds % 60);
    const hourStart = nowSeconds - (nowSeconds % 3600);
    expect((await admin.keys("*")).sort()).toEqual(
      [`d_a_b_c__${hourStart}`, `d_key_value_${minuteStart}`].sort(),
    );
    expect(await admin.get(`d_key_value_${minuteStart}`)).toBe("4");
    expect(await admin.get(`d_a_b_c__${hourStart}`)).toBe("6");
    // EXPIRE = unit + jitter in [0, 300), refreshed on every hit.
    const ttl = await admin.ttl(`d_key_value_${minuteStart}`);
    expect(ttl).toBeGreaterThanOrEqual(59);
    expect(ttl).toBeLessThanOrEqual(60 + 299);
    const hourTtl = await admin.ttl(`d_a_b_c__${hourStart}`);
    expect(hourTtl).toBeGreaterThanOrEqual(3599);
    expect(hourTtl).toBeLessThanOrEqual(3600 + 299);
  });

  it("glues CACHE_KEY_PREFIX on and sets TTL = unit without jitter", async () => {
    const { cache, stats } = setup({ jitter: 0, prefix: "pre:" });
    const limit = testRateLimit(stats, "d.k", 5, Unit.MINUTE);
    await cache.doLimit(
      limitRequest("d", [descriptor(["k", "v"])], [limit], [1]),
    );
    const key = `pre:d_k_v_${nowSeconds - (nowSeconds % 60)}`;
    expect(await admin.get(key)).toBe("1");
    expect([59, 60]).toContain(await admin.ttl(key));
  });

  it("still sends INCRBY 0 and EXPIRE for a hits addend of 0", async () => {
    const { cache, stats } = setup();
    const limit = testRateLimit(stats, "d.k", 5);
    const incrBefore = await commandCalls(admin, "incrby");
    const expireBefore = await commandCalls(admin, "expire");
    const [status] = await cache.doLimit(
      limitRequest("d", [descriptor(["k", "v"])], [limit], [0]),
    );
    expect(status!.limitRemaining).toBe(5);
    expect(await commandCalls(admin, "incrby")).toBe(incrBefore + 1);
    expect(await commandCalls(admin, "expire")).toBe(expireBefore + 1);
    const key = `d_k_v_${nowSeconds - (nowSeconds % 60)}`;
    expect(await admin.get(key)).toBe("0");
    expect(await admin.ttl(key)).toBeGreaterThan(0);
  });

  it("answers descriptors without a limit with OK and sends nothing", async () => {
    const { cache } = setup();
    await cache.start();
    const before = await commandCalls(admin, "incrby");
    const [status] = await cache.doLimit(
      limitRequest("d", [descriptor(["k", "v"])], [undefined], [1]),
    );
    expect(status!.code).toBe(Code.OK);
    expect(await commandCalls(admin, "incrby")).toBe(before);
  });

  it("sends SECOND limits to the per-second instance only", async () => {
    const { cache, stats } = setup({
      perSecond: { type: "single", socketType: "tcp", url: perSecond.address },
    });
    await cache.start();
    const second = testRateLimit(stats, "d.s", 2, Unit.SECOND);
    const minute = testRateLimit(stats, "d.m", 2, Unit.MINUTE);
    await cache.doLimit(
      limitRequest(
        "d",
        [descriptor(["s", "1"]), descriptor(["m", "1"])],
        [second, minute],
        [1, 1],
      ),
    );
    expect(await perSecondAdmin.keys("*")).toEqual([`d_s_1_${nowSeconds}`]);
    expect(await admin.keys("*")).toEqual([
      `d_m_1_${nowSeconds - (nowSeconds % 60)}`,
    ]);
  });

  it("with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT increments only the keys that would go over", async () => {
    // The reference's integration expectation (docs/reference-parity.md#stop-increment): key2
    // (20/min) and key3 (10/h) sent together; once key3 goes over, key2 stays at 10 and reports 10
    // remaining.
    const { cache, stats } = setup({
      stopCacheKeyIncrementWhenOverlimit: true,
    });
    const key2 = testRateLimit(stats, "d.key2", 20, Unit.MINUTE);
    const key3 = testRateLimit(stats, "d.key3", 10, Unit.HOUR);
    const descriptors = [descriptor(["key2", "a"]), descriptor(["key3", "b"])];
    for (let i = 0; i < 10; i++) {
      const statuses = await cache.doLimit(
        limitRequest("d", descriptors, [key2, key3], [1, 1]),
      );
      expect(statuses.map((s) => s.code)).toEqual([Code.OK, Code.OK]);
    }
    for (let i = 0; i < 3; i++) {
      const [s2, s3] = await cache.doLimit(
        limitRequest("d", descriptors, [key2, key3], [1, 1]),
      );
      expect(s2!.code).toBe(Code.OK);
      expect(s2!.limitRemaining).toBe(10);
      expect(s3!.code).toBe(Code.OVER_LIMIT);
    }
    expect(await admin.get(`d_key2_a_${nowSeconds - (nowSeconds % 60)}`)).toBe(
      "10",
    );
    expect(
      await admin.get(`d_key3_b_${nowSeconds - (nowSeconds % 3600)}`),
    ).toBe("13");
  });

  it("with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT a local-cache hit freezes the other counters", async () => {
    const { cache, stats } = setup({
      stopCacheKeyIncrementWhenOverlimit: true,
      localCacheBytes: 1 << 20,
    });
    const small = testRateLimit(stats, "d.a", 1, Unit.MINUTE);
    const large = testRateLimit(stats, "d.b", 100, Unit.MINUTE);
    const descriptors = [descriptor(["a", "1"]), descriptor(["b", "1"])];
    await cache.doLimit(limitRequest("d", descriptors, [small, large], [1, 1]));
    await cache.doLimit(limitRequest("d", descriptors, [small, large], [1, 1])); // a over → local cache
    const [a, b] = await cache.doLimit(
      limitRequest("d", descriptors, [small, large], [1, 1]),
    );
    expect(a!.code).toBe(Code.OVER_LIMIT);
    expect(stats.rateLimitStats("d.a").overLimitWithLocalCache.value()).toBe(1);
    expect(b!.code).toBe(Code.OK);
    const window = nowSeconds - (nowSeconds % 60);
    expect(await admin.get(`d_a_1_${window}`)).toBe("2");
    expect(await admin.get(`d_b_1_${window}`)).toBe("1");
  });

  it("answers a key the local cache knows over limit without touching the store", async () => {
    const { cache, stats } = setup({ localCacheBytes: 1 << 20 });
    const limit = testRateLimit(stats, "d.k", 2, Unit.MINUTE);
    const d = [descriptor(["k", "v"])];
    for (let i = 0; i < 3; i++)
      await cache.doLimit(limitRequest("d", d, [limit], [1]));
    const before = await commandCalls(admin, "incrby");
    const [status] = await cache.doLimit(limitRequest("d", d, [limit], [1]));
    expect(status!.code).toBe(Code.OVER_LIMIT);
    expect(await commandCalls(admin, "incrby")).toBe(before);
    expect(await admin.get(`d_k_v_${nowSeconds - (nowSeconds % 60)}`)).toBe(
      "3",
    );
    expect(stats.rateLimitStats("d.k").overLimitWithLocalCache.value()).toBe(1);
    expect(stats.rateLimitStats("d.k").totalHits.value()).toBe(4);
  });

  it("connects over a unix socket", async () => {
    const { cache, stats } = setup({
      main: { type: "single", socketType: "unix", url: main.socketPath! },
    });
    await cache.start();
    const limit = testRateLimit(stats, "d.k", 5);
    const [status] = await cache.doLimit(
      limitRequest("d", [descriptor(["k", "u"])], [limit], [2]),
    );
    expect(status!.limitRemaining).toBe(3);
    expect(await admin.get(`d_k_u_${nowSeconds - (nowSeconds % 60)}`)).toBe(
      "2",
    );
  });

  it("fails a request within KV_TIMEOUT when the store hangs, then recovers", async () => {
    const hung = track(await startRedisServer());
    const { cache, stats } = setup({
      main: {
        type: "single",
        socketType: "tcp",
        url: hung.address,
        timeoutMs: 300,
        poolOnEmptyBehavior: "ERROR",
        poolOnEmptyWaitMs: 100,
      },
    });
    await cache.start();
    const limit = testRateLimit(stats, "d.k", 1000);
    const d = [descriptor(["k", "hang"])];
    await cache.doLimit(limitRequest("d", d, [limit], [1]));
    hung.pause(true);
    try {
      const started = Date.now();
      const err = await cache.doLimit(limitRequest("d", d, [limit], [1])).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(BackendError);
      expect(Date.now() - started).toBeLessThan(800);
    } finally {
      hung.pause(false);
    }
    const [status] = await waitFor(
      () =>
        cache
          .doLimit(limitRequest("d", d, [limit], [1]))
          .catch(() => undefined),
      "a decision after the store resumed",
      5000,
    );
    expect(status!.code).toBe(Code.OK);
  });

  it.each([0.2, 2])(
    "batches concurrent requests within a %s ms pipeline window without losing a hit",
    async (pipelineWindowMs) => {
      const { cache, stats } = setup({
        main: {
          type: "single",
          socketType: "tcp",
          url: main.address,
          pipelineWindowMs,
        },
      });
      await cache.start();
      const limit = testRateLimit(stats, "d.k", 1000);
      const d = [descriptor(["k", "w"])];
      const statuses = await Promise.all(
        Array.from({ length: 50 }, () =>
          cache.doLimit(limitRequest("d", d, [limit], [1])),
        ),
      );
      const remaining = statuses
        .map((s) => s[0]!.limitRemaining)
        .sort((a, b) => a - b);
      expect(remaining).toEqual(Array.from({ length: 50 }, (_, i) => 950 + i));
      expect(await admin.get(`d_k_w_${nowSeconds - (nowSeconds % 60)}`)).toBe(
        "50",
      );
    },
  );
});
