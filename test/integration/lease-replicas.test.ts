// Hot-key leases (issue 33 item 2) end to end: 3 service replicas (separate processes, dist/,
// default settings) share one store: a redis-server, a sentinel-managed master
// (KV_TYPE=sentinel), a 3-node cluster (KV_TYPE=cluster) or a memcached; a YAML rule with
// `lease: true` on a fixed, multi-unit, calendar (month in Europe/Berlin) and sliding window.
// A burst of 400 calls at once on one key admits at most the limit and at least the limit
// less replicas × lease_max, with far fewer store increments than calls.
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RateLimitResponse_Code as Code } from "../../src/proto.js";
import { GrpcJsRateLimitClient } from "../helpers/grpc-js-client.js";
import { startMemcached } from "../helpers/memcached-server.js";
import {
  commandCalls,
  startRedisCluster,
  startRedisServer,
  track,
  type RedisServer,
} from "../helpers/redis-server.js";
import { request } from "../helpers/requests.js";
import {
  replicaStat,
  startReplica,
  type Replica,
} from "../helpers/spawn-service.js";
import { waitFor } from "../helpers/wait-for.js";
import { minuteWithRoom } from "../helpers/windows.js";

const leaseMax = 5;
const replicaCount = 3;

const config = `
domain: lease
descriptors:
  - key: fixed
    rate_limit: { unit: minute, requests_per_unit: 100, lease: true, lease_max: ${String(leaseMax)} }
  - key: sliding
    rate_limit: { unit: minute, requests_per_unit: 50, algorithm: sliding_window, lease: true, lease_max: ${String(leaseMax)} }
  - key: multi
    rate_limit: { unit: minute, unit_multiplier: 2, requests_per_unit: 80, lease: true, lease_max: ${String(leaseMax)} }
  - key: calendar
    rate_limit: { unit: month, time_zone: Europe/Berlin, requests_per_unit: 60, lease: true, lease_max: ${String(leaseMax)} }
`;

/** A store the replicas share: their settings, its INCRBY count (kv), and how to stop it. */
interface SharedStore {
  readonly env: Record<string, string>;
  /** INCRBY calls so far, summed over the store's redis-servers; undefined for mc. */
  increments(): Promise<number | undefined>;
  stop(): Promise<void>;
}

/** INCRBY calls on each server, summed. */
async function incrbyCalls(servers: readonly RedisServer[]): Promise<number> {
  let sum = 0;
  for (const server of servers) {
    const admin = server.client();
    try {
      sum += await commandCalls(admin, "incrby");
    } finally {
      admin.disconnect();
    }
  }
  return sum;
}

const topologies: Record<string, () => Promise<SharedStore>> = {
  async kv() {
    const redis = track(await startRedisServer());
    return {
      env: { BACKEND_TYPE: "kv", KV_SOCKET_TYPE: "tcp", KV_URL: redis.address },
      increments: () => incrbyCalls([redis]),
      stop: () => redis.stop(),
    };
  },
  async "kv sentinel"() {
    const master = track(await startRedisServer());
    const sentinel = track(
      await startRedisServer({
        sentinelConfig: [
          `sentinel monitor mymaster 127.0.0.1 ${String(master.port)} 1`,
          "sentinel down-after-milliseconds mymaster 1000",
        ].join("\n"),
      }),
    );
    const client = sentinel.client();
    await waitFor(
      async () =>
        (
          (await client.call(
            "SENTINEL",
            "GET-MASTER-ADDR-BY-NAME",
            "mymaster",
          )) as string[] | null
        )?.[1] === String(master.port),
      "sentinel to know the master",
    );
    client.disconnect();
    return {
      env: {
        BACKEND_TYPE: "kv",
        KV_TYPE: "sentinel",
        KV_URL: `mymaster,${sentinel.address}`,
      },
      increments: () => incrbyCalls([master]),
      async stop() {
        await sentinel.stop();
        await master.stop();
      },
    };
  },
  async "kv cluster"() {
    const cluster = track(await startRedisCluster(3));
    return {
      env: { BACKEND_TYPE: "kv", KV_TYPE: "cluster", KV_URL: cluster.url },
      increments: () => incrbyCalls(cluster.nodes),
      stop: () => cluster.stop(),
    };
  },
  async mc() {
    const memcached = await startMemcached();
    return {
      env: { BACKEND_TYPE: "mc", MC_HOST_PORT: memcached.address },
      increments: () => Promise.resolve(undefined),
      stop: () => memcached.stop(),
    };
  },
};

describe.each(Object.keys(topologies).map((store) => ({ store })))(
  "leases through 3 replicas sharing one store ($store)",
  ({ store }) => {
    let shared: SharedStore | undefined;
    let root: string | undefined;
    let replicas: Replica[] = [];
    let clients: GrpcJsRateLimitClient[] = [];

    beforeAll(async () => {
      shared = await topologies[store]!();
      const extra = shared.env;
      const dir = await mkdtemp(join(tmpdir(), "rls-lease-"));
      root = dir;
      await mkdir(join(dir, "config"));
      await writeFile(join(dir, "config", "lease.yaml"), config);
      replicas = await Promise.all(
        Array.from({ length: replicaCount }, () => startReplica(dir, extra)),
      );
      clients = replicas.flatMap((r) =>
        [1, 2, 3, 4].map(() => new GrpcJsRateLimitClient(r.grpc)),
      );
      await Promise.all(
        clients.map((c) =>
          c.shouldRateLimit(request("lease", [["other", "x"]])),
        ),
      );
    }, 60_000);

    afterAll(async () => {
      for (const c of clients) c.close();
      await Promise.all(
        replicas.map(async (r) => {
          r.spawned.child.kill("SIGTERM");
          await r.spawned.exited;
        }),
      );
      await shared?.stop();
      if (root !== undefined) await rm(root, { recursive: true, force: true });
    });

    function increments(): Promise<number | undefined> {
      return shared?.increments() ?? Promise.resolve(undefined);
    }

    async function burst(entry: [string, string]): Promise<Code[]> {
      const calls = Array.from({ length: 400 }, (_, i) =>
        clients[i % clients.length]!.shouldRateLimit(request("lease", [entry])),
      );
      return (await Promise.all(calls)).map((r) => r.overallCode);
    }

    it.each([
      { key: "fixed", limit: 100 },
      { key: "sliding", limit: 50 },
      { key: "multi", limit: 80 },
      { key: "calendar", limit: 60 },
    ])(
      "$key window, limit $limit: 400 calls at once admit within the bound",
      async ({ key, limit }) => {
        await minuteWithRoom(20);
        const before = await increments();
        const codes = await burst([key, "hot"]);
        const admitted = codes.filter((c) => c === Code.OK).length;
        expect(admitted).toBeLessThanOrEqual(limit);
        expect(admitted).toBeGreaterThanOrEqual(
          limit - replicaCount * leaseMax,
        );
        const taken = (
          await Promise.all(
            replicas.map((r) =>
              replicaStat(
                r,
                `ratelimit.service.rate_limit.lease.${key}.lease_taken`,
              ),
            ),
          )
        ).reduce((a, b) => a + b, 0);
        // Every admitted hit came from a lease; the store granted no more than the limit.
        expect(taken).toBeGreaterThanOrEqual(admitted);
        expect(taken).toBeLessThanOrEqual(limit);
        const after = await increments();
        if (before !== undefined && after !== undefined)
          expect(after - before).toBeLessThanOrEqual(100);
      },
      60_000,
    );
  },
);
