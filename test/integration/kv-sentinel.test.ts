import { create } from "@bufbuild/protobuf";
import { Redis } from "ioredis";
import { silentLogger } from "../helpers/silent-logger.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createDecider } from "../../src/limiter/decide.js";
import { RateLimitDescriptorSchema } from "../../src/proto.js";
import { createStatsManager } from "../../src/stats/stats-manager.js";
import { FakeClock } from "../helpers/fake-clock.js";
import { testRateLimit } from "../helpers/rate-limit.js";
import {
  startRedisServer,
  stopAllRedisServers,
  track,
  type RedisServer,
} from "../helpers/redis-server.js";
import { waitFor } from "../helpers/wait-for.js";
import { kvLimiter } from "../helpers/limiters.js";
import { limitRequest } from "../helpers/limit-request.js";

// Master and replica require "kvpass" (KV_AUTH); the sentinels require "sentpass"
// (KV_SENTINEL_AUTH) and share it with each other.
const nowSeconds = 1_700_000_100;
const cacheKey = `d_k_v_${nowSeconds - (nowSeconds % 60)}`;

let master: RedisServer;
let replica: RedisServer;
let sentinels: RedisServer[];

function sentinelClient(server: RedisServer): Redis {
  return new Redis({
    port: server.port,
    host: "127.0.0.1",
    password: "sentpass",
    maxRetriesPerRequest: 1,
    retryStrategy: () => null,
  });
}

beforeAll(async () => {
  const auth = [
    "--requirepass",
    "kvpass",
    "--masterauth",
    "kvpass",
    // Full sync at once instead of after the default 5 s diskless delay.
    "--repl-diskless-sync-delay",
    "0",
  ];
  master = track(await startRedisServer({ args: auth, password: "kvpass" }));
  replica = track(
    await startRedisServer({
      args: [...auth, "--replicaof", "127.0.0.1", String(master.port)],
      password: "kvpass",
    }),
  );
  const replicaAdmin = replica.client();
  await waitFor(
    async () =>
      (await replicaAdmin.info("replication")).includes(
        "master_link_status:up",
      ),
    "replica in sync",
  );
  replicaAdmin.disconnect();
  const sentinelConfig = [
    `sentinel monitor mymaster 127.0.0.1 ${master.port} 1`,
    "sentinel down-after-milliseconds mymaster 1000",
    "sentinel failover-timeout mymaster 5000",
    "sentinel auth-pass mymaster kvpass",
    "requirepass sentpass",
  ].join("\n");
  sentinels = await Promise.all(
    [0, 1].map(() =>
      startRedisServer({ sentinelConfig, password: "sentpass" }).then(track),
    ),
  );
  // Each sentinel must know the replica (and the other sentinel) before a failover can work.
  for (const sentinel of sentinels) {
    const client = sentinelClient(sentinel);
    await waitFor(
      async () => {
        const replicas = (await client.call(
          "SENTINEL",
          "REPLICAS",
          "mymaster",
        )) as string[][];
        const others = (await client.call(
          "SENTINEL",
          "SENTINELS",
          "mymaster",
        )) as string[][];
        return replicas.length === 1 && others.length === 1;
      },
      "sentinels to discover the replica and each other",
      10_000,
    );
    client.disconnect();
  }
}, 20_000);
afterAll(async () => {
  await stopAllRedisServers();
});

describe("KvCounterBackend with KV_TYPE=sentinel", () => {
  it("finds the master through authenticated sentinels and follows a failover", async () => {
    const stats = createStatsManager();
    const limit = testRateLimit(stats, "d.k", 100);
    const descriptor = create(RateLimitDescriptorSchema, {
      entries: [{ key: "k", value: "v" }],
    });
    const cache = kvLimiter({
      main: {
        type: "sentinel",
        url: `mymaster,${sentinels.map((s) => s.address).join(",")}`,
        auth: "kvpass",
        sentinelAuth: "sentpass",
        timeoutMs: 1000,
        poolOnEmptyBehavior: "ERROR",
        poolOnEmptyWaitMs: 200,
      },
      decider: createDecider({ clock: new FakeClock(nowSeconds) }),
      logger: silentLogger(),
    });
    try {
      await cache.start();
      const [first] = await cache.doLimit(
        limitRequest("d", [descriptor], [limit], [1]),
      );
      expect(first!.limitRemaining).toBe(99);
      const masterAdmin = master.client();
      expect(await masterAdmin.get(cacheKey)).toBe("1");
      await masterAdmin.call("WAIT", "1", "1000"); // replicated before the crash
      masterAdmin.disconnect();

      await master.kill();
      const [afterFailover] = await waitFor(
        () =>
          cache
            .doLimit(limitRequest("d", [descriptor], [limit], [1]))
            .catch(() => undefined),
        "a decision after the failover",
        20_000,
      );
      expect(afterFailover!.limitRemaining).toBe(98);
      const promoted = replica.client();
      expect(await promoted.info("replication")).toContain("role:master");
      expect(await promoted.get(cacheKey)).toBe("2");
      promoted.disconnect();
    } finally {
      await cache.close();
    }
  }, 30_000);
});
