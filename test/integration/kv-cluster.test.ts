import { Cluster } from "ioredis";
import { silentLogger } from "../helpers/silent-logger.js";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { keySlot } from "../../src/backends/kv/kv-key-slot.js";
import type { KvInstanceOptions } from "../../src/backends/kv/kv-options.js";
import { createDecider } from "../../src/limiter/decide.js";
import { createStatsManager } from "../../src/stats/stats-manager.js";
import { FakeClock } from "../helpers/fake-clock.js";
import { testRateLimit } from "../helpers/rate-limit.js";
import {
  commandCalls,
  startRedisCluster,
  stopAllRedisServers,
  track,
  type RedisCluster,
} from "../helpers/redis-server.js";
import { kvLimiter } from "../helpers/limiters.js";
import type { KvCounterBackend } from "../../src/backends/kv/kv-counter-backend.js";
import type { RateLimitPipeline } from "../../src/limiter/pipeline.js";
import { limitRequest } from "../helpers/limit-request.js";
import { descriptor } from "../helpers/requests.js";

const nowSeconds = 1_700_000_200;
const windowStart = nowSeconds - (nowSeconds % 60);
const stats = createStatsManager();
const limit = testRateLimit(stats, "d.k", 1000);

let cluster: RedisCluster;
let admin: Cluster;
const caches: RateLimitPipeline<KvCounterBackend>[] = [];

beforeAll(async () => {
  cluster = track(await startRedisCluster(3));
  admin = new Cluster([{ host: "127.0.0.1", port: cluster.nodes[0]!.port }]);
}, 30_000);
afterEach(async () => {
  await Promise.all(caches.splice(0).map((c) => c.close()));
});
afterAll(async () => {
  admin.disconnect();
  await stopAllRedisServers();
});

async function startCache(extra: Partial<KvInstanceOptions> = {}) {
  const cache = kvLimiter({
    main: { type: "cluster", url: cluster.url, ...extra },
    decider: createDecider({ clock: new FakeClock(nowSeconds) }),
    logger: silentLogger(),
  });
  caches.push(cache);
  await cache.start();
  return cache;
}

/** The port of the node serving a slot, from `CLUSTER SLOTS`. */
async function ownerPort(slot: number): Promise<number> {
  const client = cluster.nodes[0]!.client();
  try {
    const ranges = await client.cluster("SLOTS");
    const range = ranges.find(([lo, hi]) => slot >= lo && slot <= hi);
    const owner = range?.[2];
    if (owner === undefined) throw new Error(`no owner for slot ${slot}`);
    return owner[1];
  } finally {
    client.disconnect();
  }
}

describe("KvCounterBackend with KV_TYPE=cluster", () => {
  it("computes the same slots as the cluster", async () => {
    const client = cluster.nodes[0]!.client();
    for (const cacheKey of [
      "d_k_a_1",
      "pre:{tag}x",
      "ünïcode_1",
      "{}_x",
      "a{b}c",
    ]) {
      expect(keySlot(cacheKey)).toBe(await client.cluster("KEYSLOT", cacheKey));
    }
    client.disconnect();
  });

  it.each([0, 2])(
    "counts a request whose keys span all nodes (pipeline window %s ms)",
    async (pipelineWindowMs) => {
      const cache = await startCache({
        pipelineWindowMs,
        clusterPipelineParallelism: 0,
      });
      // Four keys in each third of the slots: `--cluster create` gives each node one third.
      const values: string[] = [];
      const perThird = [0, 0, 0];
      for (let i = 0; values.length < 12; i++) {
        const value = `w${pipelineWindowMs}v${i}`;
        const third = Math.floor(keySlot(`d_k_${value}_${windowStart}`) / 5462);
        if (perThird[third]! < 4) {
          perThird[third]!++;
          values.push(value);
        }
      }
      const descriptors = values.map((v) => descriptor(["k", v]));
      const limits = values.map(() => limit);
      const hits = values.map((_, i) => i + 1);
      const calls = await Promise.all(
        cluster.nodes.map(async (n) => {
          const c = n.client();
          const count = await commandCalls(c, "incrby");
          c.disconnect();
          return count;
        }),
      );
      await Promise.all([
        cache.doLimit(limitRequest("d", descriptors, limits, hits)),
        cache.doLimit(limitRequest("d", descriptors, limits, hits)),
      ]);
      for (let i = 0; i < values.length; i++) {
        expect(await admin.get(`d_k_${values[i]}_${windowStart}`)).toBe(
          String(2 * (i + 1)),
        );
      }
      // Every node got some of the keys.
      for (const [i, n] of cluster.nodes.entries()) {
        const c = n.client();
        expect(await commandCalls(c, "incrby")).toBeGreaterThan(calls[i]!);
        c.disconnect();
      }
    },
  );

  it("follows ASK during a slot migration and MOVED after it, next to keys that need neither", async () => {
    const cache = await startCache();
    const cacheKey = (value: string) => `d_k_${value}_${windowStart}`;
    const slot = keySlot(cacheKey("migrating"));
    const sourcePort = await ownerPort(slot);
    // A key on the same node but another slot: its commands share the pipeline and succeed,
    // so the redirected ones must be retried on their own.
    let companion = "";
    for (let i = 0; companion === ""; i++) {
      const s = keySlot(cacheKey(`c${i}`));
      if (s !== slot && (await ownerPort(s)) === sourcePort)
        companion = `c${i}`;
    }
    const d = [descriptor(["k", "migrating"]), descriptor(["k", companion])];
    const remaining = async () =>
      (await cache.doLimit(limitRequest("d", d, [limit, limit], [1, 1]))).map(
        (s) => s.limitRemaining,
      );
    expect(await remaining()).toEqual([999, 999]);

    const source = cluster.nodes.find((n) => n.port === sourcePort)!.client();
    const sourceId = await source.cluster("MYID");
    const targetNode = cluster.nodes.find((n) => n.port !== sourcePort)!;
    const target = targetNode.client();
    const targetId = await target.cluster("MYID");
    await target.cluster("SETSLOT", slot, "IMPORTING", sourceId);
    await source.cluster("SETSLOT", slot, "MIGRATING", targetId);
    await source.migrate(
      "127.0.0.1",
      targetNode.port,
      cacheKey("migrating"),
      0,
      5000,
    );
    // The key now lives on the target while the source still owns the slot: ASK.
    const askingBefore = await commandCalls(target, "asking");
    expect(await remaining()).toEqual([998, 998]);
    expect(await commandCalls(target, "asking")).toBeGreaterThan(askingBefore);

    for (const n of cluster.nodes) {
      const c = n.client();
      await c.cluster("SETSLOT", slot, "NODE", targetId);
      c.disconnect();
    }
    // The client's slot map still names the source: MOVED.
    expect(await ownerPort(slot)).toBe(targetNode.port);
    expect(await remaining()).toEqual([997, 997]);
    expect(await target.get(cacheKey("migrating"))).toBe("3");
    expect(await source.get(cacheKey(companion))).toBe("3");
    source.disconnect();
    target.disconnect();
  });
});
