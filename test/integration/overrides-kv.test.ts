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
import { silentLogger } from "../helpers/silent-logger.js";
import {
  KvOverrideCommands,
  kvOverrideAuditKey,
  kvOverrideDomainsKey,
  kvOverridesKey,
  versionField,
} from "../../src/backends/kv/kv-override-commands.js";
import { KvOverrideStore } from "../../src/overrides/kv-override-store.js";
import { overrideToJson } from "../../src/overrides/override-message.js";
import { OverrideTable } from "../../src/overrides/override-table.js";
import type { Clock } from "../../src/util/clock.js";
import { FakeClock } from "../helpers/fake-clock.js";
import {
  AdminService,
  OverrideLimitSchema,
  RateLimitResponse_Code as RlCode,
  RateLimitResponse_RateLimit_Unit as Unit,
  RateLimitService,
} from "../../src/proto.js";
import {
  commandCalls,
  freePort,
  startRedisServer,
  stopAllRedisServers,
  track,
  type RedisServer,
} from "../helpers/redis-server.js";
import { windowAlignedClock } from "../helpers/aligned-clock.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";
import { waitFor } from "../helpers/wait-for.js";
import { request } from "../helpers/requests.js";

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

async function limitOn(r: Replica, value: string): Promise<number | undefined> {
  const answer = await r.rls.shouldRateLimit(
    request("api", [["tenant", value]]),
  );
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
      answers.push(
        (await b.rls.shouldRateLimit(request("api", [["tenant", "acme"]])))
          .overallCode,
      );
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
        (await b.rls.shouldRateLimit(request("api", [["tenant", "kept"]])))
          .statuses[0]?.limitRemaining === 4294967295,
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
      const answer = await b.rls.shouldRateLimit(
        request("api", [["tenant", "kept"]]),
      );
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
          storage: new KvOverrideCommands({
            client: new RedisClient(store.port, "127.0.0.1", {
              lazyConnect: true,
            }),
            subscriber: new RedisClient(store.port, "127.0.0.1", {
              lazyConnect: true,
            }),
            keyPrefix: "race_",
          }),
          auditLogMax: 10,
          // Only the test's own sync() calls run.
          syncIntervalMs: 60_000,
          clock,
          logger: silentLogger(),
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

describe("KvOverrideStore with many overrides in a domain", () => {
  const bigPrefix = "big_";
  const key = kvOverridesKey(bigPrefix, "api");
  const updateMs = 1_800_000_000_000;
  const minute = (requestsPerUnit: number) =>
    create(OverrideLimitSchema, {
      requestsPerUnit,
      unit: Unit.MINUTE,
      unitMultiplier: 1,
      algorithm: "fixed_window",
    });
  const stored = (value: string, requestsPerUnit: number) =>
    overrideToJson({
      domain: "api",
      entries: tenant(value),
      limit: minute(requestsPerUnit),
      expireMs: undefined,
      reason: "bulk",
      actor: "import",
      updateMs,
    });

  /** Writes `count` overrides `tenant=t<i>` straight into the store, as a bulk import would. */
  async function preload(count: number): Promise<void> {
    for (let from = 0; from < count; from += 1000) {
      const fields: string[] = [];
      for (let i = from; i < Math.min(count, from + 1000); i++)
        fields.push(`tenant=t${String(i)}`, stored(`t${String(i)}`, i));
      await redis.hset(key, ...fields);
    }
    await redis.hset(key, versionField, "1");
    await redis.sadd(kvOverrideDomainsKey(bigPrefix), "api");
  }

  function kvStore(
    options: {
      client?: Redis;
      deafSubscriber?: number;
      logLines?: string[];
    } = {},
  ): KvOverrideStore {
    const clock = new FakeClock(1_800_000_000);
    const subscriber = new RedisClient(
      options.deafSubscriber ?? store.port,
      "127.0.0.1",
      { lazyConnect: true, retryStrategy: () => null },
    );
    subscriber.on("error", () => undefined);
    const lines = options.logLines;
    return new KvOverrideStore({
      table: new OverrideTable({ clock }),
      storage: new KvOverrideCommands({
        client:
          options.client ??
          new RedisClient(store.port, "127.0.0.1", { lazyConnect: true }),
        subscriber,
        keyPrefix: bigPrefix,
      }),
      auditLogMax: 10,
      syncIntervalMs: 60_000,
      clock,
      logger: pino(
        { level: "warn" },
        { write: (line: string) => lines?.push(line) },
      ),
    });
  }

  const limitOf = (s: KvOverrideStore, value: string) =>
    s.table.get("api", tenant(value))?.limit.requestsPerUnit;

  it("reads only the fields #changes lists when a replica missed the announcements, and the whole hash when they do not cover the gap", async () => {
    await preload(3000);
    const lines: string[] = [];
    // A replica whose subscriber never connects: it learns of changes by the version sync.
    const deaf = kvStore({ deafSubscriber: await freePort(), logLines: lines });
    const other = kvStore();
    try {
      await deaf.start();
      expect(deaf.table.size).toBe(3000);
      expect(limitOf(deaf, "t2999")).toBe(2999);
      await other.start();
      const record = (value: string, requestsPerUnit: number) => ({
        domain: "api",
        entries: tenant(value),
        limit: minute(requestsPerUnit),
        expireMs: undefined,
        reason: "change",
        actor: "alice",
        updateMs: updateMs + 1,
      });
      await other.set(record("t1", 77));
      await other.set(record("fresh", 5));
      await other.delete("api", tenant("t2"), "alice", "gone");
      const scans = await commandCalls(redis, "hscan");
      await deaf.sync();
      expect(await commandCalls(redis, "hscan")).toBe(scans);
      expect(deaf.table.size).toBe(3000);
      expect(limitOf(deaf, "t1")).toBe(77);
      expect(limitOf(deaf, "fresh")).toBe(5);
      expect(limitOf(deaf, "t2")).toBeUndefined();
      expect(deaf.table.get("api", tenant("t1"))?.actor).toBe("alice");

      // Written by hand (no #changes entry), with a value that does not parse: read whole.
      await redis.hset(key, "tenant=t3", stored("t3", 33));
      await redis.hset(key, "tenant=broken", "{not json");
      await redis.hincrby(key, versionField, 2);
      await deaf.sync();
      expect(await commandCalls(redis, "hscan")).toBeGreaterThan(scans);
      expect(limitOf(deaf, "t3")).toBe(33);
      expect(limitOf(deaf, "t1")).toBe(77);
      expect(deaf.table.size).toBe(3000);
      expect(
        lines.some(
          (line) =>
            line.includes("stored override skipped: not readable") &&
            line.includes('"field":"tenant=broken"'),
        ),
      ).toBe(true);
    } finally {
      await Promise.all([deaf.close(), other.close()]);
      await redis.del(key, kvOverrideDomainsKey(bigPrefix));
    }
  });

  it("waits at the start for a load that goes on answering past timeoutMs", async () => {
    await preload(5000);
    const client = new RedisClient(store.port, "127.0.0.1", {
      lazyConnect: true,
    });
    // Each HSCAN chunk answers 60 ms late: the whole load takes longer than the timeout,
    // but no gap between answers does.
    const slow = new Proxy(client, {
      get(target, property, receiver): unknown {
        const value: unknown = Reflect.get(target, property, receiver);
        if (typeof value !== "function") return value;
        const method = value as (...args: unknown[]) => unknown;
        if (property === "hscan")
          return async (...args: unknown[]): Promise<unknown> => {
            await new Promise((resolve) => setTimeout(resolve, 60));
            return method.apply(target, args);
          };
        return (...args: unknown[]): unknown => method.apply(target, args);
      },
    });
    const s = kvStore({ client: slow });
    try {
      const began = Date.now();
      await s.start(200);
      expect(Date.now() - began).toBeGreaterThan(200);
      expect(s.table.size).toBe(5000);
    } finally {
      await s.close();
      await redis.del(key, kvOverrideDomainsKey(bigPrefix));
    }
  });
});
