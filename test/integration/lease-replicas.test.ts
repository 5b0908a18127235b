// Hot-key leases (issue 33 item 2) end to end: 3 service replicas (separate processes, dist/,
// default settings) share one redis-server or one memcached; a YAML rule with `lease: true`.
// A burst of 400 calls at once on one key admits at most the limit and at least the limit
// less replicas × lease_max, with far fewer store increments than calls.
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RateLimitResponse_Code as Code } from "../../src/proto.js";
import { GrpcJsRateLimitClient } from "../helpers/grpc-js-client.js";
import {
  startMemcached,
  type MemcachedServer,
} from "../helpers/memcached-server.js";
import {
  commandCalls,
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
`;

describe.each([{ store: "kv" as const }, { store: "mc" as const }])(
  "leases through 3 replicas sharing one store ($store)",
  ({ store }) => {
    let redis: RedisServer | undefined;
    let memcached: MemcachedServer | undefined;
    let root: string | undefined;
    let replicas: Replica[] = [];
    let clients: GrpcJsRateLimitClient[] = [];

    beforeAll(async () => {
      let extra: Record<string, string>;
      if (store === "kv") {
        redis = track(await startRedisServer());
        extra = {
          BACKEND_TYPE: "kv",
          KV_SOCKET_TYPE: "tcp",
          KV_URL: redis.address,
        };
      } else {
        memcached = await startMemcached();
        extra = { BACKEND_TYPE: "mc", MC_HOST_PORT: memcached.address };
      }
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
      await redis?.stop();
      await memcached?.stop();
      if (root !== undefined) await rm(root, { recursive: true, force: true });
    });

    async function increments(): Promise<number | undefined> {
      if (redis === undefined) return undefined;
      const admin = redis.client();
      try {
        return await commandCalls(admin, "incrby");
      } finally {
        admin.disconnect();
      }
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
