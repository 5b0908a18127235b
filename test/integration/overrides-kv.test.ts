// Run-time overrides on two replicas behind one redis-server (BACKEND_TYPE=kv): two in-process
// services, each with its own kv connections. An override set on one decides on the other
// within 1 s (by the change channel, and by the version sync when the message is missed); an
// expired override stops applying on both and one replica records the expiry; the audit log
// in the store holds each change; a store failure answers UNAVAILABLE.

import { create } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createClient,
  type Client,
} from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import type { Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { Redis as RedisClient } from "ioredis";
import { pino } from "pino";
import {
  KvOverrideStore,
  kvOverrideAuditKey,
  kvOverridesKey,
  versionField,
} from "../../src/overrides/kv-override-store.js";
import { OverrideTable } from "../../src/overrides/override-table.js";
import type { Clock } from "../../src/util/clock.js";
import { FakeClock } from "../helpers/fake-clock.js";
import {
  AdminService,
  OverrideLimitSchema,
  RateLimitRequestSchema,
  RateLimitResponse_Code as RlCode,
  RateLimitResponse_RateLimit_Unit as Unit,
  RateLimitService,
} from "../../src/proto.js";
import {
  startRedisServer,
  stopAllRedisServers,
  track,
  type RedisServer,
} from "../helpers/redis-server.js";
import { windowAlignedClock } from "../helpers/aligned-clock.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";
import { waitFor } from "../helpers/wait-for.js";

const config = `
domain: api
descriptors:
  - key: tenant
    rate_limit: { unit: minute, requests_per_unit: 2 }
`;

const prefix = "replicas_";

interface Replica {
  readonly app: TestApp;
  readonly rls: Client<typeof RateLimitService>;
  readonly admin: Client<typeof AdminService>;
}

let store: RedisServer;
let redis: Redis;
let a: Replica;
let b: Replica;
/**
 * Both replicas' clock, 1 s into a minute at start: the hits a test counts on the 2-per-minute
 * rule (across a wait for B to see an override) stay in one window.
 */
let clock: Clock;

async function replica(): Promise<Replica> {
  const app = await startTestApp(
    { "api.yaml": config },
    {
      BACKEND_TYPE: "kv",
      KV_SOCKET_TYPE: "tcp",
      KV_URL: store.address,
      KV_TIMEOUT: "1s",
      CACHE_KEY_PREFIX: prefix,
      ADMIN_ENABLED: "true",
    },
    undefined,
    { clock },
  );
  const transport = createGrpcTransport({
    baseUrl: `http://${app.addresses.grpc}`,
  });
  return {
    app,
    rls: createClient(RateLimitService, transport),
    admin: createClient(AdminService, transport),
  };
}

function request(value: string) {
  return create(RateLimitRequestSchema, {
    domain: "api",
    descriptors: [{ entries: [{ key: "tenant", value }] }],
  });
}

async function limitOn(r: Replica, value: string): Promise<number | undefined> {
  const answer = await r.rls.shouldRateLimit(request(value));
  return answer.statuses[0]?.currentLimit?.requestsPerUnit;
}

function counter(r: Replica, name: string): number {
  return r.app.app.statsManager.store.counter(name).value();
}

const tenant = (value: string) => [{ key: "tenant", value }];

beforeAll(async () => {
  store = track(await startRedisServer());
  redis = store.client();
  clock = windowAlignedClock(60);
  [a, b] = await Promise.all([replica(), replica()]);
});
afterEach(async () => {
  // Overrides left by a test are deleted through the API, so both tables follow.
  const { overrides } = await a.admin.listOverrides({ domain: "" });
  for (const o of overrides)
    await a.admin.deleteOverride({ domain: o.domain, entries: o.entries });
  await waitFor(
    async () =>
      (await b.admin.listOverrides({ domain: "" })).overrides.length === 0,
    "B's table to empty",
  );
  await redis.flushall();
});
afterAll(async () => {
  await a.app.stop();
  await b.app.stop();
  redis.disconnect();
  await stopAllRedisServers();
});

describe("run-time overrides on two replicas sharing the kv store", () => {
  it("decides on B within 1 s with an override set on A, counting under the rule's stats key", async () => {
    expect(await limitOn(b, "acme")).toBe(2);
    await a.admin.setOverride(
      {
        domain: "api",
        entries: tenant("acme"),
        limit: { requestsPerUnit: 4 },
        reason: "raise",
      },
      { headers: { "x-ratelimit-actor": "alice" } },
    );
    const setAt = Date.now();
    // Each poll is a hit on the counter too.
    let polls = 0;
    await waitFor(
      async () => {
        polls++;
        return (await limitOn(b, "acme")) === 4;
      },
      "B to answer with the override's limit",
      1_000,
    );
    expect(Date.now() - setAt).toBeLessThanOrEqual(1_000);

    // The counter is shared (same cache key as the rule's window): the hits above (one before
    // the override, one per poll) count against the override's 4.
    const counted = 1 + polls;
    const hits = "ratelimit.service.rate_limit.api.tenant.total_hits";
    const before = counter(b, hits);
    const answers = [];
    for (let i = 0; i < 4; i++)
      answers.push((await b.rls.shouldRateLimit(request("acme"))).overallCode);
    expect(answers).toEqual(
      [1, 2, 3, 4].map((n) =>
        counted + n <= 4 ? RlCode.OK : RlCode.OVER_LIMIT,
      ),
    );
    expect(counter(b, hits) - before).toBe(4);
    expect(await limitOn(a, "other")).toBe(2);

    // The store holds it where the docs say, as the API's JSON.
    const stored = await redis.hget(
      kvOverridesKey(prefix, "api"),
      "tenant=acme",
    );
    expect(JSON.parse(stored ?? "{}")).toMatchObject({
      domain: "api",
      limit: { requestsPerUnit: 4, unit: "MINUTE" },
      actor: "alice",
      reason: "raise",
    });
    const listed = await b.admin.listOverrides({ domain: "api" });
    expect(listed.overrides.map((o) => [o.actor, o.rule])).toEqual([
      ["alice", "api.tenant"],
    ]);
  });

  it("reaches a replica that missed the announcement within 1 s (version sync)", async () => {
    // A change written to the store as a replica would, but never announced.
    await a.admin.setOverride({
      domain: "api",
      entries: tenant("seed"),
      limit: { requestsPerUnit: 3 },
    });
    await waitFor(async () => (await limitOn(b, "seed")) === 3, "seed on B");
    const json = await redis.hget(kvOverridesKey(prefix, "api"), "tenant=seed");
    const silent = json!.replace('"requestsPerUnit":3', '"requestsPerUnit":7');
    await redis.hset(kvOverridesKey(prefix, "api"), "tenant=seed", silent);
    await redis.hincrby(kvOverridesKey(prefix, "api"), versionField, 1);
    const writtenAt = Date.now();
    await waitFor(
      async () =>
        (await limitOn(b, "seed")) === 7 && (await limitOn(a, "seed")) === 7,
      "both replicas to read the unannounced change",
      1_000,
    );
    expect(Date.now() - writtenAt).toBeLessThanOrEqual(1_000);
  });

  it("stops applying an expired override on both replicas, and one replica records the expiry", async () => {
    await b.admin.setOverride(
      {
        domain: "api",
        entries: tenant("brief"),
        limit: { requestsPerUnit: 50 },
        ttl: { seconds: 1n },
        reason: "one second",
      },
      { headers: { "x-ratelimit-actor": "bob" } },
    );
    await waitFor(async () => (await limitOn(a, "brief")) === 50, "brief on A");
    await waitFor(
      async () =>
        (await limitOn(a, "brief")) === 2 && (await limitOn(b, "brief")) === 2,
      "the override to stop applying on both",
      2_000,
    );
    // Deleted from the store by one replica's compare-and-delete; its record written once.
    await waitFor(
      async () =>
        (await redis.hget(kvOverridesKey(prefix, "api"), "tenant=brief")) ===
        null,
      "the expired override deleted from the store",
      2_000,
    );
    await new Promise((r) => setTimeout(r, 1_200)); // both replicas sweep again
    const { records } = await a.admin.getAuditLog({ domain: "api" });
    expect(records.map((r) => [r.action, r.actor])).toEqual([
      ["expire", "ratelimit"],
      ["set", "bob"],
    ]);
    expect(records[0]?.before?.reason).toBe("one second");
    expect(await redis.llen(kvOverrideAuditKey(prefix))).toBe(2);
  });

  it("keeps each change in the store's audit log, newest first, read from either replica", async () => {
    const set = (r: Replica, rpu: number, actor: string) =>
      r.admin.setOverride(
        {
          domain: "api",
          entries: tenant("x"),
          limit: { requestsPerUnit: rpu },
          reason: `to ${String(rpu)}`,
        },
        { headers: { "x-ratelimit-actor": actor } },
      );
    await set(a, 10, "alice");
    await set(b, 20, "bob");
    await a.admin.deleteOverride(
      { domain: "api", entries: tenant("x"), reason: "back to the rule" },
      { headers: { "x-ratelimit-actor": "carol" } },
    );
    const notFound = await b.admin
      .deleteOverride({ domain: "api", entries: tenant("x") })
      .catch((err: unknown) => ConnectError.from(err));
    expect(notFound).toBeInstanceOf(ConnectError);
    expect((notFound as ConnectError).code).toBe(Code.NotFound);
    const { records } = await b.admin.getAuditLog({ domain: "" });
    expect(
      records.map((r) => [
        r.action,
        r.actor,
        r.reason,
        r.before?.limit?.requestsPerUnit ?? 0,
        r.after?.limit?.requestsPerUnit ?? 0,
      ]),
    ).toEqual([
      ["delete", "carol", "back to the rule", 20, 0],
      ["set", "bob", "to 20", 10, 20],
      ["set", "alice", "to 10", 0, 10],
    ]);
    await waitFor(
      async () => (await limitOn(b, "x")) === 2,
      "x back to the rule on B",
    );
  });

  it("answers UNAVAILABLE while the store is down, and ShouldRateLimit keeps the overrides it has", async () => {
    await a.admin.setOverride({
      domain: "api",
      entries: tenant("kept"),
      limit: { unlimited: true },
    });
    await waitFor(
      async () =>
        (await b.rls.shouldRateLimit(request("kept"))).statuses[0]
          ?.limitRemaining === 4294967295,
      "kept on B",
    );
    store.pause(true);
    try {
      const refused = await a.admin
        .setOverride(
          {
            domain: "api",
            entries: tenant("late"),
            limit: { requestsPerUnit: 1 },
          },
          { timeoutMs: 5_000 },
        )
        .catch((err: unknown) => ConnectError.from(err));
      expect(refused).toBeInstanceOf(ConnectError);
      expect((refused as ConnectError).code).toBe(Code.Unavailable);
      expect((refused as ConnectError).rawMessage).toMatch(
        /^override store unavailable: the override was not set: /,
      );
      // An unlimited override needs no counter: answered from the table with the store down.
      const answer = await b.rls.shouldRateLimit(request("kept"));
      expect(answer.statuses[0]?.limitRemaining).toBe(4294967295);
    } finally {
      store.pause(false);
    }
    await waitFor(async () => {
      await a.admin.setOverride({
        domain: "api",
        entries: tenant("late"),
        limit: { requestsPerUnit: 1 },
      });
      return true;
    }, "the store to answer again");
  });
});

describe("KvOverrideStore expiry", () => {
  it("records an expiry once when both replicas sweep at the same moment", async () => {
    const clock = new FakeClock(1_800_000_000);
    const stores = [0, 1].map(
      () =>
        new KvOverrideStore({
          table: new OverrideTable({ clock }),
          client: new RedisClient(store.port, "127.0.0.1", {
            lazyConnect: true,
          }),
          subscriber: new RedisClient(store.port, "127.0.0.1", {
            lazyConnect: true,
          }),
          keyPrefix: "race_",
          auditLogMax: 10,
          // Only the test's own sync() calls run.
          syncIntervalMs: 60_000,
          clock,
          logger: pino({ level: "silent" }),
        }),
    );
    const [s1, s2] = stores as [KvOverrideStore, KvOverrideStore];
    try {
      await Promise.all(stores.map((s) => s.start()));
      await s1.set({
        domain: "api",
        entries: [{ key: "tenant", value: "race" }],
        limit: create(OverrideLimitSchema, {
          requestsPerUnit: 9,
          unit: Unit.MINUTE,
          unitMultiplier: 1,
          algorithm: "fixed_window",
        }),
        expireMs: clock.nowMs() + 1_000,
        reason: "",
        actor: "test",
        updateMs: clock.nowMs(),
      });
      await s2.sync();
      expect(s2.table.size).toBe(1);
      clock.seconds += 1;
      // Both sweep before either hears of the other's delete.
      await Promise.all([s1.sweepExpired(), s2.sweepExpired()]);
      const records = await s2.auditLog(undefined, 10);
      expect(records.map((r) => r.action)).toEqual(["expire", "set"]);
      expect(s1.table.size + s2.table.size).toBe(0);
    } finally {
      await Promise.all(stores.map((s) => s.close()));
    }
  });
});
