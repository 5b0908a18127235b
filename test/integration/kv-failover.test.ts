// Failover behind one name (issue 33 item 4), with default settings: two real redis-server
// processes, A the primary and B its replica, behind a loopback forwarder that stands for the
// store's DNS name (test/helpers/tcp-forwarder.ts). The failover makes B the primary and A a
// replica of B, and moves the forwarder to B: the service's open connection stays on A, which
// answers READONLY to every write, as after a managed store's DNS failover. The service must
// close that connection, reconnect through the name (to B), and count in B. The same for the
// per-second instance (the service spawned from dist/) and for the run-time override store.

import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import type { Redis } from "ioredis";
import { afterAll, describe, expect, it } from "vitest";
import { kvOverridesKey } from "../../src/backends/kv/kv-override-commands.js";
import { resolveKvInstanceOptions } from "../../src/backends/kv/kv-options.js";
import {
  connectKvQuotaLedgerCommands,
  kvLedgerKey,
} from "../../src/backends/kv/kv-quota-ledger-commands.js";
import { KvQuotaLedger } from "../../src/rlqs/kv-quota-ledger.js";
import {
  AdminService,
  RateLimitResponse_Code as RlCode,
  RateLimitService,
} from "../../src/proto.js";
import { pause, runLoad, type LoadResult } from "../helpers/load.js";
import {
  commandCalls,
  startRedisServer,
  stopAllRedisServers,
  type RedisServer,
} from "../helpers/redis-server.js";
import { request } from "../helpers/requests.js";
import { startTestApp } from "../helpers/rls-app.js";
import { silentLogger } from "../helpers/silent-logger.js";
import { memoryServiceEnv, spawnNode } from "../helpers/spawn-service.js";
import {
  startTcpForwarder,
  type TcpForwarder,
} from "../helpers/tcp-forwarder.js";
import { waitFor } from "../helpers/wait-for.js";

const config = `
domain: failover
descriptors:
  - key: client
    rate_limit: { unit: hour, requests_per_unit: 1000000 }
  - key: burst
    rate_limit: { unit: second, requests_per_unit: 1000000 }
`;
const prefix = "fo_";
const reports: string[] = [];
const forwarders: TcpForwarder[] = [];
const admins: Redis[] = [];

afterAll(async () => {
  for (const admin of admins) admin.disconnect();
  await Promise.all(forwarders.map((f) => f.close()));
  await stopAllRedisServers();
  if (reports.length > 0)
    process.stdout.write(
      `\n=== failover behind one name, default settings ===\n${reports.join("\n\n")}\n`,
    );
});

/** A primary, its replica (in sync), and a forwarder pointing at the primary. */
interface Pair {
  readonly a: RedisServer;
  readonly b: RedisServer;
  readonly name: TcpForwarder;
  readonly adminA: Redis;
  readonly adminB: Redis;
}

async function startPair(): Promise<Pair> {
  const a = await startRedisServer();
  const b = await startRedisServer({
    args: ["--replicaof", "127.0.0.1", String(a.port)],
  });
  const adminA = a.client();
  const adminB = b.client();
  admins.push(adminA, adminB);
  await waitFor(
    async () =>
      (await adminB.info("replication")).includes("master_link_status:up"),
    "B to replicate A",
  );
  const name = await startTcpForwarder(a.port);
  forwarders.push(name);
  return { a, b, name, adminA, adminB };
}

/**
 * The failover a managed store runs: A's writes paused and B caught up (nothing A
 * acknowledged is lost), B promoted, A made B's replica, the name moved to B, A's writes
 * resumed (the paused ones then run on a replica: READONLY).
 */
async function failOver(pair: Pair): Promise<void> {
  await pair.adminA.call("CLIENT", "PAUSE", "10000", "WRITE");
  await pair.adminA.call("WAIT", "1", "2000");
  await pair.adminB.call("REPLICAOF", "NO", "ONE");
  await pair.adminA.call("REPLICAOF", "127.0.0.1", String(pair.b.port));
  pair.name.moveTo(pair.b.port);
  await pair.adminA.call("CLIENT", "UNPAUSE");
}

/** The service from dist/, on the kv backend through the forwarders, every other setting default. */
interface Service {
  readonly grpc: string;
  output(): string;
  stop(): Promise<void>;
}

async function startService(env: Record<string, string>): Promise<Service> {
  const root = await mkdtemp(join(tmpdir(), "rls-failover-"));
  await mkdir(join(root, "config"));
  await writeFile(join(root, "config", "failover.yaml"), config);
  const { env: serviceEnv, grpcPort } = await memoryServiceEnv(
    "builtin",
    root,
    {
      BACKEND_TYPE: "kv",
      KV_SOCKET_TYPE: "tcp",
      CACHE_KEY_PREFIX: prefix,
      ...env,
    },
  );
  const http = serviceEnv["PORT"]!;
  const spawned = spawnNode("dist/src/main.js", [], serviceEnv);
  await waitFor(
    async () => {
      try {
        const res = await fetch(`http://127.0.0.1:${http}/healthcheck`);
        return res.status === 200;
      } catch {
        return undefined;
      }
    },
    `the service's /healthcheck (output: ${spawned.output()})`,
    20_000,
  );
  return {
    grpc: `127.0.0.1:${grpcPort}`,
    output: () => spawned.output(),
    async stop() {
      spawned.child.kill("SIGTERM");
      await spawned.exited;
      await rm(root, { recursive: true, force: true });
    },
  };
}

/** Sum of the counters (every window) of one descriptor `key=value` on `admin`'s node. */
async function counted(
  admin: Redis,
  key: string,
  value: string,
): Promise<number> {
  const keys = await admin.keys(`${prefix}failover_${key}_${value}_*`);
  let sum = 0;
  for (const k of keys) sum += Number((await admin.get(k)) ?? 0);
  return sum;
}

/**
 * 20 calls/s on one descriptor: 1.5 s before, the failover, then until the calls are OK
 * again (at most 15 s: the run's bound, not an assertion) and 1 s more.
 */
async function failOverUnderLoad(
  service: Service,
  pair: Pair,
  key: string,
): Promise<{ load: LoadResult; movedAtMs: number }> {
  let movedAtMs = 0;
  const began = performance.now();
  const client = createClient(
    RateLimitService,
    createGrpcTransport({ baseUrl: `http://${service.grpc}` }),
  );
  const load = await runLoad({
    address: service.grpc,
    domain: "failover",
    entries: [{ key, value: "c1" }],
    ratePerSecond: 20,
    scenario: async (phase) => {
      await pause(1500);
      await failOver(pair);
      movedAtMs = performance.now() - began;
      phase("after");
      await waitFor(
        async () => {
          try {
            const answer = await client.shouldRateLimit(
              request("failover", [[key, "probe"]]),
            );
            return answer.overallCode === RlCode.OK;
          } catch {
            return false;
          }
        },
        "an OK answer after the failover",
        15_000,
      ).catch(() => undefined);
      await pause(1000);
    },
  });
  return { load, movedAtMs };
}

function report(
  title: string,
  load: LoadResult,
  movedAtMs: number,
  extra: string,
): void {
  const after = load.inPhase("after");
  const firstOk = after.find((c) => c.answer === "OK");
  const recovery =
    firstOk === undefined
      ? "never"
      : `${(firstOk.answeredAtMs - movedAtMs).toFixed(0)} ms`;
  const counts = load.count(after);
  reports.push(
    `${title}: after the failover ${after.length} calls, ${JSON.stringify(counts)}; first OK ${recovery} after the move; ${extra}\n${load.timeline()}`,
  );
}

describe("failover behind one name, default settings", () => {
  it("main instance: reconnects through the name to the new primary and counts there", async () => {
    const pair = await startPair();
    const service = await startService({ KV_URL: pair.name.address });
    try {
      const { load, movedAtMs } = await failOverUnderLoad(
        service,
        pair,
        "client",
      );
      const onB = await counted(pair.adminB, "client", "c1");
      const ok = load.calls.filter((c) => c.answer === "OK").length;
      const failed = load.calls.length - ok;
      report(
        "main",
        load,
        movedAtMs,
        `B holds ${onB} for ${ok} OK (+ ${failed} failed); connections through the name: ${JSON.stringify([...pair.name.accepted()])}`,
      );
      const after = load.inPhase("after");
      // Decisions come back: the calls of the last second are all answered by the store.
      const last = after.filter(
        (c) => c.sentAtMs >= load.calls.at(-1)!.sentAtMs - 800,
      );
      expect(last.length).toBeGreaterThan(0);
      expect(last.filter((c) => c.answer !== "OK")).toEqual([]);
      // Every admitted call counts in the new primary (those A took before the failover came
      // with the replication); a failed call counts at most once (its INCRBY ran, its EXPIRE
      // did not).
      expect(onB).toBeGreaterThanOrEqual(ok);
      expect(onB).toBeLessThanOrEqual(ok + failed);
      // A new connection went through the name to B.
      expect(pair.name.accepted().get(pair.b.port) ?? 0).toBeGreaterThan(0);

      // And from now on each decision is one count in B, exactly.
      const client = createClient(
        RateLimitService,
        createGrpcTransport({ baseUrl: `http://${service.grpc}` }),
      );
      const before = await counted(pair.adminB, "client", "c1");
      for (let i = 0; i < 5; i++)
        expect(
          (
            await client.shouldRateLimit(
              request("failover", [["client", "c1"]]),
            )
          ).overallCode,
        ).toBe(RlCode.OK);
      expect(await counted(pair.adminB, "client", "c1")).toBe(before + 5);
      expect(service.output()).toContain("failed over?");
    } finally {
      await service.stop();
    }
  });

  it("per-second instance: the same on its own name", async () => {
    const main = await startRedisServer();
    const pair = await startPair();
    const service = await startService({
      KV_URL: main.address,
      KV_PERSECOND: "true",
      KV_PERSECOND_SOCKET_TYPE: "tcp",
      KV_PERSECOND_URL: pair.name.address,
    });
    try {
      const { load, movedAtMs } = await failOverUnderLoad(
        service,
        pair,
        "burst",
      );
      report(
        "per-second",
        load,
        movedAtMs,
        `connections through the name: ${JSON.stringify([...pair.name.accepted()])}`,
      );
      const after = load.inPhase("after");
      const last = after.filter(
        (c) => c.sentAtMs >= load.calls.at(-1)!.sentAtMs - 800,
      );
      expect(last.length).toBeGreaterThan(0);
      expect(last.filter((c) => c.answer !== "OK")).toEqual([]);
      // B is a primary now (it replicates from no one): every INCRBY it runs is a client's.
      const client = createClient(
        RateLimitService,
        createGrpcTransport({ baseUrl: `http://${service.grpc}` }),
      );
      const before = await commandCalls(pair.adminB, "incrby");
      for (let i = 0; i < 5; i++)
        expect(
          (await client.shouldRateLimit(request("failover", [["burst", "c2"]])))
            .overallCode,
        ).toBe(RlCode.OK);
      expect((await commandCalls(pair.adminB, "incrby")) - before).toBe(5);
      // The per-second counters never went to the main instance.
      const adminMain = main.client();
      expect(await counted(adminMain, "burst", "c1")).toBe(0);
      adminMain.disconnect();
    } finally {
      await service.stop();
    }
  });

  it("override store: a change after the failover is written to the new primary", async () => {
    const pair = await startPair();
    const app = await startTestApp(
      { "failover.yaml": config },
      {
        BACKEND_TYPE: "kv",
        KV_SOCKET_TYPE: "tcp",
        KV_URL: pair.name.address,
        CACHE_KEY_PREFIX: prefix,
        ADMIN_ENABLED: "true",
      },
    );
    try {
      const admin = createClient(
        AdminService,
        createGrpcTransport({ baseUrl: `http://${app.addresses.grpc}` }),
      );
      const set = (value: string, requestsPerUnit: number) =>
        admin.setOverride({
          domain: "failover",
          entries: [{ key: "client", value }],
          limit: { requestsPerUnit },
        });
      await set("before", 5);
      await failOver(pair);
      // Every attempt until one succeeds: the first ones may fail (READONLY on the old
      // primary, then the reconnect).
      let attempts = 0;
      await waitFor(
        async () => {
          attempts++;
          await set("after", 7);
          return true;
        },
        "an override set after the failover",
        15_000,
      );
      reports.push(
        `override store: set after the failover on attempt ${attempts} (one every 50 ms)`,
      );
      const stored = await pair.adminB.hget(
        kvOverridesKey(prefix, "failover"),
        "client=after",
      );
      expect(JSON.parse(stored ?? "{}")).toMatchObject({
        limit: { requestsPerUnit: 7 },
      });
      // The one from before came with the replication.
      expect(
        await pair.adminB.hget(
          kvOverridesKey(prefix, "failover"),
          "client=before",
        ),
      ).not.toBeNull();
    } finally {
      await app.stop();
    }
  });

  it("RLQS ledger: a report after the failover is written to the new primary", async () => {
    const pair = await startPair();
    const ledger = new KvQuotaLedger({
      storage: connectKvQuotaLedgerCommands(
        resolveKvInstanceOptions({
          url: pair.name.address,
          socketType: "tcp",
        }),
        undefined,
        prefix,
      ),
      reportIntervalMs: 1_000,
      replicaId: "r1",
      logger: silentLogger(),
    });
    const bucket = "rlqs\u0000tenant=gold";
    const key = kvLedgerKey(prefix, bucket);
    const usage = { allowed: 0, denied: 0 };
    try {
      await ledger.start();
      // Until it reaches B: the commands' connection may still be connecting (start() waits
      // for the change channel only), and every report writes its stream.
      await waitFor(async () => {
        await ledger.report(bucket, "r1.0", usage, Date.now());
        return (await pair.adminB.hexists(key, "r1.0")) === 1;
      }, "a first report replicated to B");
      await failOver(pair);
      // A new stream per attempt (its first report is always written); a failed write is
      // counted by the ledger, not thrown.
      let attempt = 0;
      await waitFor(
        async () => {
          const stream = `r1.${++attempt}`;
          await ledger.report(bucket, stream, usage, Date.now());
          return (await pair.adminB.hexists(key, stream)) === 1;
        },
        "a report written to B after the failover",
        15_000,
      );
      reports.push(
        `RLQS ledger: a report reached B after the failover on attempt ${attempt} (one every 50 ms)`,
      );
    } finally {
      await ledger.close();
    }
  });
});
