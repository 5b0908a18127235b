// Exact counting on memcached (issue 33 item 1): a burst of 400 concurrent calls on one key,
// through 3 service replicas (separate processes, dist/) sharing one memcached, admits exactly
// the limit, with default settings and with 2 workers per replica. Each replica decides from
// the value its increment returns, so the 400 increments are ordered by memcached and exactly
// the first 100 fit (the reference, reading then incrementing in the background, admitted
// 146-172 of 400 here).

import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "memjs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RateLimitResponse_Code as Code } from "../../src/proto.js";
import { GrpcJsRateLimitClient } from "../helpers/grpc-js-client.js";
import {
  startMemcached,
  type MemcachedServer,
} from "../helpers/memcached-server.js";
import { request } from "../helpers/requests.js";
import {
  replicaStat,
  startReplica,
  type Replica,
} from "../helpers/spawn-service.js";
import { minuteWithRoom } from "../helpers/windows.js";

const config = `
domain: exact
descriptors:
  - key: fixed
    rate_limit: { unit: minute, requests_per_unit: 100 }
  - key: sliding
    rate_limit: { unit: minute, requests_per_unit: 50, algorithm: sliding_window }
`;

/** One replica: its own process, gRPC port and statistics. */

// Default settings (one worker per replica), then 2 workers per replica: 6 processes counting.
describe.each([
  { label: "default settings", value: "hot", extra: {}, wholeStats: true },
  // The debug port's /stats is worker 0's alone (docs/operations.md): the ground truth here
  // is the admitted count and memcached's counter.
  {
    label: "WORKERS=2",
    value: "hot2",
    extra: { WORKERS: "2" },
    wholeStats: false,
  },
])(
  "mc: exact counting through 3 replicas sharing one memcached ($label)",
  ({ value, extra, wholeStats }) => {
    let store: MemcachedServer | undefined;
    let root: string | undefined;
    let replicas: Replica[] = [];
    let clients: GrpcJsRateLimitClient[] = [];

    beforeAll(async () => {
      const node = await startMemcached();
      store = node;
      const dir = await mkdtemp(join(tmpdir(), "rls-mc-exact-"));
      root = dir;
      await mkdir(join(dir, "config"));
      await writeFile(join(dir, "config", "exact.yaml"), config);
      replicas = await Promise.all(
        [1, 2, 3].map(() =>
          startReplica(dir, {
            BACKEND_TYPE: "mc",
            MC_HOST_PORT: node.address,
            ...extra,
          }),
        ),
      );
      // 4 HTTP/2 connections per replica (grpc-js keeps one per client).
      clients = replicas.flatMap((r) =>
        [1, 2, 3, 4].map(() => new GrpcJsRateLimitClient(r.grpc)),
      );
      // Each connection is up before the burst (a call on a warm-up key). With WORKERS=2 a
      // replica's /healthcheck may answer before both workers serve gRPC: each warm-up call has
      // a deadline and is retried, and a replica that never answers fails with its output.
      await Promise.all(
        clients.map(async (c, i) => {
          const replica = replicas[Math.floor(i / 4)]!;
          const giveUpAt = Date.now() + 30_000;
          for (;;) {
            try {
              await c.shouldRateLimit(request("exact", [["other", "x"]]), 5000);
              return;
            } catch (err) {
              if (Date.now() > giveUpAt)
                throw new Error(
                  `warm-up call to ${replica.grpc} failed: ${String(err)}; replica output: ${replica.spawned.output()}`,
                  { cause: err },
                );
              await new Promise((r) => setTimeout(r, 200));
            }
          }
        }),
      );
    }, 90_000);

    afterAll(async () => {
      for (const c of clients) c.close();
      await Promise.all(
        replicas.map(async (r) => {
          r.spawned.child.kill("SIGTERM");
          await r.spawned.exited;
        }),
      );
      await store?.stop();
      if (root !== undefined) await rm(root, { recursive: true, force: true });
    });

    /** 400 calls at once on `entry`, spread over every connection; the codes answered. */
    async function burst(entry: [string, string]): Promise<Code[]> {
      const calls = Array.from({ length: 400 }, (_, i) =>
        clients[i % clients.length]!.shouldRateLimit(request("exact", [entry])),
      );
      return (await Promise.all(calls)).map((r) => r.overallCode);
    }

    /** The counter memcached holds at `key`, read by an independent client. */
    async function stored(key: string): Promise<string | undefined> {
      const raw = Client.create(store!.address, {
        logger: { log: () => undefined },
      });
      try {
        return (await raw.get(key)).value?.toString();
      } finally {
        raw.close();
      }
    }

    it("fixed window, limit 100: exactly 100 of 400 admitted, the counter holds 400", async () => {
      const windowStart = await minuteWithRoom(20);
      const codes = await burst(["fixed", value]);
      expect(codes.filter((c) => c === Code.OK).length).toBe(100);
      expect(codes.filter((c) => c === Code.OVER_LIMIT).length).toBe(300);
      // Every hit is counted (the reference's stored value for 400 hits); no increment failed
      // open (a failed one would answer as a counter of 0).
      expect(await stored(`exact_fixed_${value}_${windowStart}`)).toBe("400");
      for (const r of replicas)
        expect(
          await replicaStat(r, "ratelimit.mc.increment.__code=error"),
        ).toBe(0);
      if (!wholeStats) return;
      const perReplica = await Promise.all(
        replicas.map((r) =>
          replicaStat(r, "ratelimit.mc.increment.__code=success"),
        ),
      );
      // One increment per call (the warm-up key has no limit, so it costs none).
      expect(perReplica.reduce((a, b) => a + b, 0)).toBe(400);
    }, 60_000);

    it("sliding window, limit 50: exactly 50 of 400 admitted", async () => {
      const windowStart = await minuteWithRoom(20);
      const codes = await burst(["sliding", value]);
      expect(codes.filter((c) => c === Code.OK).length).toBe(50);
      expect(await stored(`exact_sliding_${value}_${windowStart}_s60`)).toBe(
        "400",
      );
    }, 60_000);
  },
);
