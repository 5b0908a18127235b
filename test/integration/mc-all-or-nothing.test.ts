import { Client } from "memjs";
import { connect } from "node:net";
import { silentLogger } from "../helpers/silent-logger.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { nodeIndexForKey } from "../../src/backends/mc/mc-client.js";
import { McConnection } from "../../src/backends/mc/mc-connection.js";
import type { RateLimit } from "../../src/config/rate-limit-config.js";
import { createDecider } from "../../src/limiter/decide.js";
import {
  RateLimitResponse_Code as Code,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../../src/proto.js";
import { createStatsManager } from "../../src/stats/stats-manager.js";
import { StatsStore } from "../../src/stats/stats-store.js";
import { FakeClock } from "../helpers/fake-clock.js";
import {
  startMemcached,
  type MemcachedServer,
} from "../helpers/memcached-server.js";
import { windowedRateLimit } from "../helpers/rate-limit.js";
import { mcLimiter } from "../helpers/limiters.js";
import type { McCounterBackend } from "../../src/backends/mc/mc-counter-backend.js";
import type { RateLimitPipeline } from "../../src/limiter/pipeline.js";
import { limitRequest } from "../helpers/limit-request.js";
import { descriptor } from "../helpers/requests.js";

// All-or-nothing charging on the memcached backend (check-then-increment with compensation),
// on real memcached: the race between the check and the increment is forced by two requests
// of one instance whose reads both reach memcached before either increment (one connection,
// answered in order), so the outcome is exact.

const silent = silentLogger();
const compensatedStat = "ratelimit.all_or_nothing.compensated";

/** A plain memjs client on one node, to read and write what the backend stores. */
function rawClient(server: MemcachedServer): Client {
  return Client.create(server.address, {
    retries: 1,
    logger: { log: () => undefined },
  });
}

/** A counter as stored (memcached may pad a decremented value with spaces), or null. */
async function rawCounter(client: Client, key: string): Promise<string | null> {
  const { value } = await client.get(key);
  return value === null ? null : value.toString().trimEnd();
}

/**
 * The remaining time to live of `key` in seconds, read with memcached's meta get (`mg <key>
 * t`): -1 for no expiration, undefined when the key is missing.
 */
function remainingTtl(
  server: MemcachedServer,
  key: string,
): Promise<number | undefined> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: server.host, port: server.port });
    let text = "";
    socket.on("data", (chunk: Buffer) => {
      text += chunk.toString();
      if (!text.endsWith("\r\n")) return;
      socket.destroy();
      const ttl = /^HD t(-?\d+)\r\n$/.exec(text);
      if (ttl !== null) resolve(Number(ttl[1]));
      else if (text === "EN\r\n") resolve(undefined);
      else reject(new Error(`unexpected meta reply ${JSON.stringify(text)}`));
    });
    socket.on("error", reject);
    socket.write(`mg ${key} t\r\n`);
  });
}

describe("all-or-nothing charging on memcached", () => {
  let nodeA: MemcachedServer;
  let nodeB: MemcachedServer;
  let rawA: Client;
  let rawB: Client;
  // Close to real time: expirations over 30 days are absolute times on memcached's clock.
  const clock = new FakeClock(Math.floor(Date.now() / 1000));
  const minuteStart = clock.seconds - (clock.seconds % 60);
  const closers: (() => Promise<void>)[] = [];

  beforeAll(async () => {
    [nodeA, nodeB] = await Promise.all([startMemcached(), startMemcached()]);
    rawA = rawClient(nodeA);
    rawB = rawClient(nodeB);
  });

  afterAll(async () => {
    await Promise.all(closers.splice(0).map((close) => close()));
    rawA.close();
    rawB.close();
    await Promise.all([nodeA.stop(), nodeB.stop()]);
  });

  async function newCache(
    nodes: readonly MemcachedServer[],
    statsStore = new StatsStore(),
  ): Promise<RateLimitPipeline<McCounterBackend>> {
    const cache = mcLimiter({
      decider: createDecider({
        clock,
        expirationJitterMaxSeconds: 0,
      }),
      clock,
      logger: silent,
      statsStore,
      hostPorts: nodes.map((node) => node.address),
    });
    await cache.start();
    closers.push(() => cache.close());
    return cache;
  }

  /** A value whose cache key under `domain`/`key` lives on node `node` of two. */
  function valueOnNode(domain: string, key: string, node: number): string {
    for (let i = 0; ; i++) {
      const value = `v${i}`;
      if (
        nodeIndexForKey(`${domain}_${key}_${value}_${minuteStart}`, 2) === node
      )
        return value;
    }
  }

  it("undoes the increments of a request that lost the race, refuses it and counts it", async () => {
    const statsStore = new StatsStore();
    const cache = await newCache([nodeA, nodeB], statsStore);
    const stats = createStatsManager();
    const limits: RateLimit[] = [
      windowedRateLimit(stats, "race.a", 3, Unit.MINUTE, {
        allOrNothing: true,
      }),
      windowedRateLimit(stats, "race.b", 100, Unit.MINUTE, {
        allOrNothing: true,
      }),
    ];
    // The two counters live on different nodes: the undo reaches both.
    const a = valueOnNode("race", "a", 0);
    const b = valueOnNode("race", "b", 1);
    const descriptors = [descriptor(["a", a]), descriptor(["b", b])];
    const keyA = `race_a_${a}_${minuteStart}`;
    const keyB = `race_b_${b}_${minuteStart}`;
    for (let i = 0; i < 2; i++) {
      const statuses = await cache.doLimit(
        limitRequest("race", descriptors, limits, [1, 1]),
      );
      expect(statuses.map((s) => s.code)).toEqual([Code.OK, Code.OK]);
    }
    expect(await rawCounter(rawA, keyA)).toBe("2");
    expect(await rawCounter(rawB, keyB)).toBe("2");

    // Both read a = 2 (one left: both pass the check); the increments answer 3, then 4.
    const [first, second] = await Promise.all([
      cache.doLimit(limitRequest("race", descriptors, limits, [1, 1])),
      cache.doLimit(limitRequest("race", descriptors, limits, [1, 1])),
    ]);
    expect(first.map((s) => s.code)).toEqual([Code.OK, Code.OK]);
    expect(first.map((s) => s.limitRemaining)).toEqual([0, 97]);
    expect(second.map((s) => s.code)).toEqual([Code.OVER_LIMIT, Code.OK]);
    // b answered 4 to the refused request's increment; it reports b without its own hit.
    expect(second.map((s) => s.limitRemaining)).toEqual([0, 97]);
    expect(statsStore.counter(compensatedStat).value()).toBe(1);
    expect(limits[0]!.stats.overLimit.value()).toBe(1);
    // Compensated: the counters hold the admitted requests' hits only.
    expect(await rawCounter(rawA, keyA)).toBe("3");
    expect(await rawCounter(rawB, keyB)).toBe("3");

    // The next request is refused by the check alone: nothing written, nothing compensated.
    const third = await cache.doLimit(
      limitRequest("race", descriptors, limits, [1, 1]),
    );
    expect(third.map((s) => s.code)).toEqual([Code.OVER_LIMIT, Code.OK]);
    expect(statsStore.counter(compensatedStat).value()).toBe(1);
    expect(await rawCounter(rawA, keyA)).toBe("3");
    expect(await rawCounter(rawB, keyB)).toBe("3");
  });

  it("many concurrent requests on one instance: never more than the limit, counters equal the admitted hits", async () => {
    const statsStore = new StatsStore();
    const cache = await newCache([nodeA], statsStore);
    const stats = createStatsManager();
    const limits = [
      windowedRateLimit(stats, "burst.a", 7, Unit.MINUTE, {
        allOrNothing: true,
      }),
      windowedRateLimit(stats, "burst.b", 1000, Unit.MINUTE, {
        allOrNothing: true,
      }),
    ];
    const descriptors = [descriptor(["a", "x"]), descriptor(["b", "x"])];
    const answers = await Promise.all(
      Array.from({ length: 50 }, () =>
        cache.doLimit(limitRequest("burst", descriptors, limits, [1, 1])),
      ),
    );
    const admitted = answers.filter((s) =>
      s.every((x) => x.code === Code.OK),
    ).length;
    // Every read reached memcached before any increment: all 50 passed the check, the 7
    // first increments fit and the 43 others were undone.
    expect(admitted).toBe(7);
    expect(statsStore.counter(compensatedStat).value()).toBe(43);
    expect(await rawCounter(rawA, `burst_a_x_${minuteStart}`)).toBe("7");
    expect(await rawCounter(rawA, `burst_b_x_${minuteStart}`)).toBe("7");
  });

  it("stores the counters as the default mode does: decimal value, expiration of the window", async () => {
    const cache = await newCache([nodeA]);
    const stats = createStatsManager();
    const each = windowedRateLimit(stats, "store.each", 5, Unit.MINUTE);
    const aon = windowedRateLimit(stats, "store.aon", 5, Unit.MINUTE, {
      allOrNothing: true,
    });
    const month = windowedRateLimit(stats, "store.month", 5, Unit.MONTH, {
      allOrNothing: true,
    });
    await cache.doLimit(
      limitRequest("store", [descriptor(["each", "x"])], [each], [2]),
    );
    await cache.doLimit(
      limitRequest(
        "store",
        [descriptor(["aon", "x"]), descriptor(["month", "x"])],
        [aon, month],
        [2, 3],
      ),
    );
    await cache.flush();
    const eachKey = `store_each_x_${minuteStart}`;
    const aonKey = `store_aon_x_${minuteStart}`;
    const monthKey = `store_month_x_${clock.seconds - (clock.seconds % 2_592_000)}`;
    const stored = await rawA.get(aonKey);
    expect(stored.value?.toString()).toBe("2");
    expect(stored.flags?.readUInt32BE(0) ?? 0).toBe(0);
    expect(await rawCounter(rawA, eachKey)).toBe("2");
    expect(await rawCounter(rawA, monthKey)).toBe("3");
    // Created with an expiration of one unit (no jitter here), as in the default mode.
    for (const key of [eachKey, aonKey]) {
      const ttl = await remainingTtl(nodeA, key);
      expect(ttl, key).toBeGreaterThan(0);
      expect(ttl, key).toBeLessThanOrEqual(60);
    }
    // Over 30 days: sent as an absolute time, so the counter lives for its window.
    expect(await remainingTtl(nodeA, monthKey)).toBeGreaterThan(
      2_592_000 - 120,
    );
  });

  it("decrements never create a counter and floor at 0; increments answer the new values", async () => {
    const connection = new McConnection(
      { address: nodeB.address, host: nodeB.host, port: nodeB.port },
      { timeoutMs: 5000, connectTimeoutMs: 5000, tls: undefined },
    );
    closers.push(() => connection.shutdown(1000));
    const increment = (keys: [string, number][]) =>
      new Promise<[Error | undefined, (number | undefined)[]]>((resolve) => {
        connection.incrementMultiValues(
          keys.map(([key, hits]) => ({ key, hits, expiration: 60 })),
          (err, values) => {
            resolve([err, values]);
          },
        );
      });
    const decrement = (keys: [string, number][]) =>
      new Promise<[Error | undefined, number]>((resolve) => {
        connection.decrementMulti(
          keys.map(([key, hits]) => ({ key, hits })),
          (err, failed) => {
            resolve([err, failed]);
          },
        );
      });
    await rawB.set("dec_junk", "abc", {});
    // A missing counter is created with the hits; an existing one answers its new value.
    expect(await increment([["dec_a", 5]])).toEqual([undefined, [5]]);
    const [junkErr, values] = await increment([
      ["dec_a", 4],
      ["dec_junk", 1],
      ["dec_b", 10],
    ]);
    expect(values).toEqual([9, undefined, 10]);
    expect(junkErr?.message).toMatch(/status 0x6/);

    expect(await decrement([["dec_missing", 1]])).toEqual([undefined, 0]);
    expect(await rawCounter(rawB, "dec_missing")).toBeNull();
    expect(await decrement([["dec_a", 2]])).toEqual([undefined, 0]);
    expect(await rawCounter(rawB, "dec_a")).toBe("7");
    expect(await decrement([["dec_b", 25]])).toEqual([undefined, 0]);
    expect(await rawCounter(rawB, "dec_b")).toBe("0");
    const [err, failed] = await decrement([["dec_junk", 1]]);
    expect(failed).toBe(1);
    expect(err?.message).toMatch(/decrement failed with status 0x6/);
  });
});
