// The day-2 features with WORKERS=2 on the mc backend (real memcached): run-time overrides set
// through one worker apply in both, also in a worker restarted after the change; TopOffenders
// and the canary's report count the traffic of both workers. Each call goes on a fresh
// connection, so the calls spread over the workers (node:cluster hands connections round-robin).

import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  AdminService,
  RateLimitResponse_RateLimit_Unit as Unit,
  RateLimitService,
} from "../../src/proto.js";
import {
  startMemcached,
  type MemcachedServer,
} from "../helpers/memcached-server.js";
import { freePort, spawnNode, type Spawned } from "../helpers/spawn-service.js";
import { waitFor } from "../helpers/wait-for.js";

const config = `
domain: api
descriptors:
  - key: tenant
    rate_limit: { unit: hour, requests_per_unit: 1000 }
`;
const candidate = `
domain: api
descriptors:
  - key: tenant
    rate_limit: { unit: hour, requests_per_unit: 1 }
`;

/** Runs `call` with clients on a new HTTP/2 connection (a new worker, round-robin). */
async function fresh<T>(
  grpc: number,
  call: (clients: {
    rls: Client<typeof RateLimitService>;
    admin: Client<typeof AdminService>;
  }) => Promise<T>,
): Promise<T> {
  const transport = createGrpcTransport({
    baseUrl: `http://127.0.0.1:${grpc}`,
  });
  return call({
    rls: createClient(RateLimitService, transport),
    admin: createClient(AdminService, transport),
  });
}

describe("WORKERS=2: overrides, top offenders and the canary cover both workers", () => {
  let memcached: MemcachedServer;
  let service: Spawned;
  let grpc: number;
  let debug: number;
  const dir = mkdtempSync(join(tmpdir(), "rls-workers-day2-"));

  /** The limit every one of `n` fresh connections reports for `tenant`. */
  async function limits(tenant: string, n = 6): Promise<number[]> {
    const out: number[] = [];
    for (let i = 0; i < n; i++)
      out.push(
        await fresh(grpc, async ({ rls }) => {
          const answer = await rls.shouldRateLimit({
            domain: "api",
            descriptors: [{ entries: [{ key: "tenant", value: tenant }] }],
          });
          return answer.statuses[0]?.currentLimit?.requestsPerUnit ?? -1;
        }),
      );
    return out;
  }

  async function debugAdmin(method: string, body: unknown): Promise<unknown> {
    const res = await fetch(
      `http://127.0.0.1:${debug}/ratelimit.admin.v1.AdminService/${method}`,
      {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      },
    );
    expect(res.status).toBe(200);
    return res.json();
  }

  function workerPids(): number[] {
    return execFileSync(
      "ps",
      ["-o", "pid=", "--ppid", String(service.child.pid)],
      { encoding: "utf8" },
    )
      .trim()
      .split("\n")
      .filter((line) => line.trim() !== "")
      .map(Number);
  }

  beforeAll(async () => {
    memcached = await startMemcached();
    mkdirSync(join(dir, "config"));
    writeFileSync(join(dir, "config", "api.yaml"), config);
    grpc = await freePort();
    debug = await freePort();
    service = spawnNode("dist/src/main.js", [], {
      BACKEND_TYPE: "mc",
      MC_HOST_PORT: memcached.address,
      WORKERS: "2",
      ADMIN_ENABLED: "true",
      HOST: "127.0.0.1",
      PORT: String(await freePort()),
      GRPC_HOST: "127.0.0.1",
      GRPC_PORT: String(grpc),
      DEBUG_HOST: "127.0.0.1",
      DEBUG_PORT: String(debug),
      RUNTIME_ROOT: dir,
      RUNTIME_WATCH_ROOT: "false",
      USE_PUSHSTATS: "false",
      DISABLE_STATS: "true",
      LOG_LEVEL: "info",
    });
    await waitFor(
      () => service.output().split("ratelimit started").length - 1 === 2,
      "both workers to listen",
      30_000,
    );
  });

  afterAll(async () => {
    if (service.child.exitCode === null) service.child.kill("SIGKILL");
    await memcached.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("applies an override set through one worker in every worker, and its deletion", async () => {
    expect(await limits("acme")).toEqual([1000, 1000, 1000, 1000, 1000, 1000]);
    const set = await fresh(grpc, ({ admin }) =>
      admin.setOverride(
        {
          domain: "api",
          entries: [{ key: "tenant", value: "acme" }],
          limit: { requestsPerUnit: 7, unit: Unit.HOUR },
          reason: "workers test",
        },
        { headers: { "x-ratelimit-actor": "alice" } },
      ),
    );
    expect(set.override?.actor).toBe("alice");
    // The answer comes once the worker asked has applied it; the other applies it from the
    // same message of the primary, within moments.
    await waitFor(
      async () => (await limits("acme")).every((l) => l === 7),
      "every worker to apply the override",
    );
    const listed = await Promise.all(
      [0, 1, 2, 3].map(() =>
        fresh(grpc, async ({ admin }) =>
          (await admin.listOverrides({ domain: "api" })).overrides.map(
            (o) =>
              `${o.entries[0]?.value ?? ""}:${String(o.limit?.requestsPerUnit)}`,
          ),
        ),
      ),
    );
    expect(listed).toEqual([["acme:7"], ["acme:7"], ["acme:7"], ["acme:7"]]);

    await fresh(grpc, ({ admin }) =>
      admin.deleteOverride(
        { domain: "api", entries: [{ key: "tenant", value: "acme" }] },
        { headers: { "x-ratelimit-actor": "bob" } },
      ),
    );
    await waitFor(
      async () => (await limits("acme")).every((l) => l === 1000),
      "every worker to drop the override",
    );
    // Every worker's audit log holds both changes, newest first, with one time each.
    const logs = await Promise.all(
      [0, 1, 2, 3].map(() =>
        fresh(grpc, async ({ admin }) =>
          (await admin.getAuditLog({ domain: "api" })).records.map(
            (r) =>
              `${r.action} by ${r.actor} at ${String(r.time?.seconds)}.${String(r.time?.nanos)}`,
          ),
        ),
      ),
    );
    expect(logs[0]).toHaveLength(2);
    expect(logs[0]?.[0]).toMatch(/^delete by bob/);
    expect(logs[0]?.[1]).toMatch(/^set by alice/);
    for (const log of logs) expect(log).toEqual(logs[0]);
  });

  it("gives a restarted worker the overrides set before it started", async () => {
    await fresh(grpc, ({ admin }) =>
      admin.setOverride({
        domain: "api",
        entries: [{ key: "tenant", value: "initech" }],
        limit: { requestsPerUnit: 3, unit: Unit.HOUR },
      }),
    );
    await waitFor(
      async () => (await limits("initech")).every((l) => l === 3),
      "every worker to apply the override",
    );
    const before = workerPids();
    expect(before).toHaveLength(2);
    process.kill(before[1] ?? 0, "SIGKILL");
    await waitFor(
      () => service.output().split("ratelimit started").length - 1 === 3,
      "the primary to restart the worker",
      30_000,
    );
    expect(workerPids()).not.toContain(before[1]);
    expect(await limits("initech", 8)).toEqual([3, 3, 3, 3, 3, 3, 3, 3]);
  });

  it("answers TopOffenders with the hits of both workers", async () => {
    const sent = 10;
    for (let i = 0; i < sent; i++)
      await fresh(grpc, ({ rls }) =>
        rls.shouldRateLimit({
          domain: "api",
          descriptors: [{ entries: [{ key: "tenant", value: "hooli" }] }],
        }),
      );
    for (const ask of [
      async () => debugAdmin("TopOffenders", { domain: "api" }),
      async () =>
        fresh(
          grpc,
          async ({ admin }) =>
            JSON.parse(
              JSON.stringify(
                await admin.topOffenders({ domain: "api" }),
                (_, v: unknown) => (typeof v === "bigint" ? v.toString() : v),
              ),
            ) as unknown,
        ),
    ]) {
      const answer = (await ask()) as {
        rules: { offenders: { descriptor: string; hits: string }[] }[];
      };
      const hooli = answer.rules[0]?.offenders.find(
        (o) => o.descriptor === "tenant=hooli",
      );
      expect(hooli?.hits).toBe(String(sent));
    }
  });

  it("runs a canary in every worker and reports the requests of both", async () => {
    await fresh(grpc, ({ admin }) =>
      admin.startCanary({ files: [{ name: "api.yaml", content: candidate }] }),
    );
    for (let i = 0; i < 6; i++)
      await fresh(grpc, ({ rls }) =>
        rls.shouldRateLimit({
          domain: "api",
          descriptors: [{ entries: [{ key: "tenant", value: "umbrella" }] }],
        }),
      );
    const report = (await debugAdmin("GetCanaryReport", {})) as {
      active: boolean;
      requests: string;
      changedRequests: string;
    };
    expect(report.active).toBe(true);
    expect(report.requests).toBe("6");
    // The candidate admits 1 per hour: each worker refuses its share past the first.
    expect(Number(report.changedRequests)).toBeGreaterThanOrEqual(4);
    const stopped = await fresh(grpc, ({ admin }) => admin.stopCanary({}));
    expect(stopped.report?.requests).toBe(6n);
    const after = (await debugAdmin("GetCanaryReport", {})) as {
      active?: boolean;
    };
    expect(after.active ?? false).toBe(false);
  });
});
