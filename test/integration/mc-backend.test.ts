import { Client } from "memjs";
import { silentLogger } from "../helpers/silent-logger.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { nodeIndexForKey } from "../../src/backends/mc/mc-client.js";
import type { McBackendOptions } from "../../src/backends/mc/mc-options.js";
import { HealthChecker } from "../../src/health/health.js";
import {
  createDecider,
  type DeciderOptions,
} from "../../src/limiter/decide.js";
import { CacheKeyError } from "../../src/limiter/cache-key-error.js";
import { createLocalCache } from "../../src/limiter/local-cache.js";
import {
  RateLimitResponse_Code as Code,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../../src/proto.js";
import { createStatsManager } from "../../src/stats/stats-manager.js";
import { FakeClock } from "../helpers/fake-clock.js";
import {
  startMemcached,
  type MemcachedServer,
} from "../helpers/memcached-server.js";
import { testRateLimit } from "../helpers/rate-limit.js";
import { waitFor } from "../helpers/wait-for.js";
import { mcLimiter } from "../helpers/limiters.js";
import type { McCounterBackend } from "../../src/backends/mc/mc-counter-backend.js";
import type { RateLimitPipeline } from "../../src/limiter/pipeline.js";
import { limitRequest } from "../helpers/limit-request.js";
import { descriptor } from "../helpers/requests.js";

const silent = silentLogger();

/** A plain memjs client on one node, to read what the backend stored. */
function rawClient(server: MemcachedServer): Client {
  return Client.create(server.address, {
    retries: 1,
    logger: { log: () => undefined },
  });
}

async function rawGet(client: Client, key: string): Promise<string | null> {
  const { value } = await client.get(key);
  return value === null ? null : value.toString();
}

describe("McCounterBackend against memcached", () => {
  let nodeA: MemcachedServer;
  let nodeB: MemcachedServer;
  let rawA: Client;
  let rawB: Client;
  // A fixed "now" close to real time (absolute expirations are compared with memcached's clock).
  const clock = new FakeClock(Math.floor(Date.now() / 1000));
  const minuteStart = clock.seconds - (clock.seconds % 60);
  const caches: RateLimitPipeline<McCounterBackend>[] = [];

  function newCache(
    options: Partial<McBackendOptions> = {},
    limiter: Partial<DeciderOptions> = {},
  ): RateLimitPipeline<McCounterBackend> {
    const cache = mcLimiter({
      decider: createDecider({ clock, ...limiter }),
      clock,
      logger: silent,
      hostPorts: [nodeA.address],
      ...options,
    });
    caches.push(cache);
    return cache;
  }

  beforeAll(async () => {
    [nodeA, nodeB] = await Promise.all([startMemcached(), startMemcached()]);
    rawA = rawClient(nodeA);
    rawB = rawClient(nodeB);
  });

  afterAll(async () => {
    await Promise.all(caches.map((cache) => cache.close()));
    rawA.close();
    rawB.close();
    await Promise.all([nodeA.stop(), nodeB.stop()]);
  });

  it("counts hits under the reference's cache keys and goes over the limit", async () => {
    const stats = createStatsManager();
    const cache = newCache({}, { cacheKeyPrefix: "pfx:" });
    const limit = testRateLimit(stats, "count.k_v", 3);
    const d = descriptor(["k", "v"]);
    const cacheKey = `pfx:count_k_v_${minuteStart}`;

    const [first] = await cache.doLimit(
      limitRequest("count", [d], [limit], [1]),
    );
    expect(first!.code).toBe(Code.OK);
    expect(first!.limitRemaining).toBe(2);
    await cache.flush();
    expect(await rawGet(rawA, cacheKey)).toBe("1");

    const [second] = await cache.doLimit(
      limitRequest("count", [d], [limit], [2]),
    );
    expect(second!.limitRemaining).toBe(0);
    const [third] = await cache.doLimit(
      limitRequest("count", [d], [limit], [1]),
    );
    expect(third!.code).toBe(Code.OVER_LIMIT);
    await cache.flush();
    expect(await rawGet(rawA, cacheKey)).toBe("4");
    expect(limit.stats.totalHits.value()).toBe(4);
    expect(limit.stats.overLimit.value()).toBe(1);
    expect(cache.backend.stats.incrementSuccess.value()).toBe(3);
  });

  it("counts exactly simultaneous requests one after the other (the increment answers)", async () => {
    const cache = newCache();
    const limit = testRateLimit(createStatsManager(), "async.k", 10);
    const d = descriptor(["k", "same-time"]);
    // The reference reads the same counter for both (9, 9); each increment here returns the
    // counter with the other's hit when it came first.
    const results = await Promise.all([
      cache.doLimit(limitRequest("async", [d], [limit], [1])),
      cache.doLimit(limitRequest("async", [d], [limit], [1])),
    ]);
    expect(results.map(([s]) => s!.limitRemaining).sort()).toEqual([8, 9]);
    expect(await rawGet(rawA, `async_k_same-time_${minuteStart}`)).toBe("2");
    // No multi-get: the decision is the increment.
    expect(cache.backend.stats.multigetSuccess.value()).toBe(0);
  });

  it("answers two slots of one request on one key each with its own hits, as the reference", async () => {
    const cache = newCache();
    const limit = testRateLimit(createStatsManager(), "dup.k", 10);
    const d = descriptor(["k", "twice"]);
    await cache.doLimit(limitRequest("dup", [d], [limit], [3]));
    // The reference reads 3 once and answers 3 + 2 and 3 + 4; the store then holds 9.
    const statuses = await cache.doLimit(
      limitRequest("dup", [d, d], [limit, limit], [2, 4]),
    );
    expect(statuses.map((s) => s.limitRemaining)).toEqual([5, 3]);
    expect(await rawGet(rawA, `dup_k_twice_${minuteStart}`)).toBe("9");
  });

  it("keeps MONTH and YEAR counters alive (expirations over 30 days sent as a time)", async () => {
    const cache = newCache();
    const stats = createStatsManager();
    const month = testRateLimit(stats, "long.m", 5, Unit.MONTH);
    const year = testRateLimit(stats, "long.y", 5, Unit.YEAR);
    const monthKey = `long_m_x_${clock.seconds - (clock.seconds % 2_592_000)}`;
    const yearKey = `long_y_x_${clock.seconds - (clock.seconds % 31_536_000)}`;
    await cache.doLimit(
      limitRequest(
        "long",
        [descriptor(["m", "x"]), descriptor(["y", "x"])],
        [month, year],
        [2, 3],
      ),
    );
    await cache.flush();
    expect(await rawGet(rawA, monthKey)).toBe("2");
    expect(await rawGet(rawA, yearKey)).toBe("3");
  });

  it("reads a non-numeric counter as 0 and counts its failed increment", async () => {
    const cache = newCache();
    const limit = testRateLimit(createStatsManager(), "junk.k", 5);
    await rawA.set(`junk_k_v_${minuteStart}`, "not-a-number", { expires: 60 });
    const [status] = await cache.doLimit(
      limitRequest("junk", [descriptor(["k", "v"])], [limit], [1]),
    );
    expect(status!.limitRemaining).toBe(4);
    await cache.flush();
    expect(cache.backend.stats.incrementError.value()).toBe(1);
  });

  it("places each key on the node the CRC-32 mapping names", async () => {
    const cache = newCache({ hostPorts: [nodeA.address, nodeB.address] });
    const limit = testRateLimit(createStatsManager(), "spread.k", 100);
    const descriptors = Array.from({ length: 24 }, (_, i) =>
      descriptor(["k", `v${i}`]),
    );
    await cache.doLimit(
      limitRequest(
        "spread",
        descriptors,
        descriptors.map(() => limit),
        descriptors.map(() => 1),
      ),
    );
    await cache.flush();
    const perNode = [0, 0];
    for (let i = 0; i < descriptors.length; i++) {
      const cacheKey = `spread_k_v${i}_${minuteStart}`;
      const index = nodeIndexForKey(cacheKey, 2);
      perNode[index]!++;
      const [home, other] = index === 0 ? [rawA, rawB] : [rawB, rawA];
      expect(await rawGet(home, cacheKey)).toBe("1");
      expect(await rawGet(other, cacheKey)).toBeNull();
    }
    expect(perNode[0]).toBeGreaterThan(0);
    expect(perNode[1]).toBeGreaterThan(0);
  });

  it("rejects a descriptor memcached cannot store, naming it, and touches no counter", async () => {
    const cache = newCache();
    const limit = testRateLimit(createStatsManager(), "bad.k", 5);
    const good = descriptor(["k", "fine"]);
    const cases: [string, RegExp][] = [
      [
        "a b",
        /descriptors\[1\]\.entries\[0\]\.value "a b" contains whitespace/,
      ],
      ["tab\there", /descriptors\[1\]\.entries\[0\]\.value "tab\\there"/],
      [
        "x".repeat(260),
        /descriptors\[1\]: its cache key is 2\d\d bytes, over the 250/,
      ],
    ];
    for (const [value, message] of cases) {
      const [rejected, other] = await Promise.allSettled([
        cache.doLimit(
          limitRequest(
            "bad",
            [good, descriptor(["k", value])],
            [limit, limit],
            [1, 1],
          ),
        ),
        cache.doLimit(
          limitRequest("bad", [descriptor(["k", "other"])], [limit], [1]),
        ),
      ]);
      expect(rejected.status).toBe("rejected");
      const reason = (rejected as PromiseRejectedResult).reason as unknown;
      expect(reason).toBeInstanceOf(CacheKeyError);
      expect((reason as CacheKeyError).message).toMatch(message);
      expect((reason as CacheKeyError).descriptorIndex).toBe(1);
      expect(other.status).toBe("fulfilled");
    }
    await cache.flush();
    expect(await rawGet(rawA, `bad_k_fine_${minuteStart}`)).toBeNull();
    expect(await rawGet(rawA, `bad_k_other_${minuteStart}`)).toBe("3");
  });

  it("answers keys over the limit from the local cache without a memcached operation", async () => {
    const localCache = createLocalCache({ maxBytes: 1 << 20, clock });
    const cache = newCache({}, { localCache });
    const limit = testRateLimit(createStatsManager(), "local.k", 1);
    const d = descriptor(["k", "v"]);
    const [over] = await cache.doLimit(
      limitRequest("local", [d], [limit], [2]),
    );
    expect(over!.code).toBe(Code.OVER_LIMIT);
    await cache.flush();
    const sent = () =>
      cache.backend.stats.incrementSuccess.value() +
      cache.backend.stats.incrementError.value() +
      cache.backend.stats.keysRequested.value();
    const before = sent();
    const [cached] = await cache.doLimit(
      limitRequest("local", [d], [limit], [1]),
    );
    expect(cached!.code).toBe(Code.OVER_LIMIT);
    expect(sent()).toBe(before);
    expect(limit.stats.overLimitWithLocalCache.value()).toBe(1);
  });

  it("fails the requests pending on a node killed mid-request at once, not after the reply timeout", async () => {
    const node = await startMemcached();
    try {
      const cache = newCache({
        hostPorts: [node.address],
        // Far beyond the test's timeout: only noticing the dropped connection can end the wait.
        timeoutMs: 600_000,
      });
      const limit = testRateLimit(createStatsManager(), "drop.k", 5);
      const d = descriptor(["k", "v"]);
      const [before] = await cache.doLimit(
        limitRequest("drop", [d], [limit], [1]),
      );
      expect(before!.limitRemaining).toBe(4);
      await cache.flush();
      expect(cache.backend.stats.incrementSuccess.value()).toBe(1);

      await node.pause();
      const pending = cache.doLimit(limitRequest("drop", [d], [limit], [2]));
      // Let the increment leave (writes are flushed on the next tick).
      await new Promise((resolve) => setImmediate(resolve));
      await node.kill();
      // Fail-open: the counter reads as 0, the request succeeds.
      const [during] = await pending;
      expect(during!.code).toBe(Code.OK);
      expect(during!.limitRemaining).toBe(3);
      expect(cache.backend.stats.incrementError.value()).toBe(1);
    } finally {
      await node.stop();
    }
  }, 20_000);

  it("fails open for a killed node, tracks health, and recovers when nodes return", async () => {
    const health = new HealthChecker([]);
    const cache = newCache({
      hostPorts: [nodeA.address, nodeB.address],
      health,
      healthCheckIntervalMs: 100,
    });
    await cache.start();
    expect(health.components()).toEqual({ backend: true });
    const limit = testRateLimit(createStatsManager(), "kill.k", 1);
    // One descriptor whose key lives on each node.
    const onNode = new Map<number, ReturnType<typeof descriptor>>();
    for (let i = 0; onNode.size < 2; i++) {
      const index = nodeIndexForKey(`kill_k_v${i}_${minuteStart}`, 2);
      if (!onNode.has(index)) onNode.set(index, descriptor(["k", `v${i}`]));
    }
    const both = [onNode.get(0)!, onNode.get(1)!];
    const decide = async () => {
      const statuses = await cache.doLimit(
        limitRequest("kill", both, [limit, limit], [1, 1]),
      );
      await cache.flush();
      return statuses.map((s) => s.code);
    };

    expect(await decide()).toEqual([Code.OK, Code.OK]);
    await nodeB.kill();
    // Node A still counts; node B's increment fails and its key reads 0: fail-open.
    expect(await decide()).toEqual([Code.OVER_LIMIT, Code.OK]);
    expect(await decide()).toEqual([Code.OVER_LIMIT, Code.OK]);
    expect(cache.backend.stats.incrementError.value()).toBeGreaterThan(0);
    expect(health.isHealthy()).toBe(true);

    await nodeA.kill();
    await waitFor(() => !health.isHealthy(), "backend unhealthy");
    expect(await decide()).toEqual([Code.OK, Code.OK]);

    await Promise.all([nodeA.restart(), nodeB.restart()]);
    await waitFor(() => health.isHealthy(), "backend healthy again");
    // Restarted nodes are empty: counting starts again on both.
    expect(await decide()).toEqual([Code.OK, Code.OK]);
    expect(await decide()).toEqual([Code.OVER_LIMIT, Code.OVER_LIMIT]);
  });
});
