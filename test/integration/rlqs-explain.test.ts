// Explain for RLQS buckets against real services: FakeEnvoy streams (real gRPC) on one replica
// (memory ledger) and on two replicas behind one redis-server (kv ledger), then ExplainBucket
// and ListBuckets over real clients; the split explained must be the one the streams were
// pushed, and both replicas must explain the same split. The kv ledger's peek() is checked on
// its own against the store (stale fields, an outage).

import { createClient, type Client } from "@connectrpc/connect";
import {
  createConnectTransport,
  createGrpcTransport,
} from "@connectrpc/connect-node";
import { Redis } from "ioredis";
import { silentLogger } from "../helpers/silent-logger.js";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { runClient } from "../../src/cli/client.js";
import {
  BucketPolicy,
  BucketPolicyReason,
  ExplainService,
  type BucketStream,
  type ExplainBucketResponse,
} from "../../src/proto.js";
import {
  KvQuotaLedgerCommands,
  kvLedgerKey,
} from "../../src/backends/kv/kv-quota-ledger-commands.js";
import { KvQuotaLedger } from "../../src/rlqs/kv-quota-ledger.js";
import { FakeClock } from "../helpers/fake-clock.js";
import {
  startRedisServer,
  stopAllRedisServers,
  type RedisServer,
} from "../helpers/redis-server.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";
import { FakeEnvoy } from "../helpers/rlqs-stream.js";
import { waitFor } from "../helpers/wait-for.js";

const config = `
domain: rlqs
descriptors:
  - key: tenant
    value: gold
    rate_limit: { unit: second, requests_per_unit: 100 }
`;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Explain on the debug port (Connect over HTTP/1.1, as the console's origin serves it). */
function debugExplain(t: TestApp): Client<typeof ExplainService> {
  return createClient(
    ExplainService,
    createConnectTransport({
      baseUrl: `http://${t.addresses.debug}`,
      httpVersion: "1.1",
    }),
  );
}

/** The token-bucket rate a stream is assigned: tokens_per_fill / fill_interval seconds. */
function tokenRate(s: BucketStream): number | undefined {
  const strategy = s.assignment?.strategy;
  if (strategy?.case !== "tokenBucket") return undefined;
  return (
    (strategy.value.tokensPerFill ?? 0) /
    Number(strategy.value.fillInterval?.seconds ?? 0n)
  );
}

/**
 * The streams of a two-replica answer ordered as a1, a2 (replica A's, by their number), then
 * b1 (replica B's).
 */
function holders(r: ExplainBucketResponse, replicaA: string): BucketStream[] {
  const number = (s: BucketStream) => Number(s.streamId.split(".")[1]);
  const onA = r.streams
    .filter((s) => s.replica === replicaA)
    .sort((x, y) => number(x) - number(y));
  return [...onA, ...r.streams.filter((s) => s.replica !== replicaA)];
}

/** A stream's split as every replica must compute it (without which replica answered). */
function split(s: BucketStream) {
  return {
    streamId: s.streamId,
    replica: s.replica,
    demand: s.demandPerSecond,
    share: s.sharePerSecond,
    assignment: s.assignment,
    lastReport: s.lastReportTime,
  };
}

describe("ExplainBucket on one replica (memory ledger)", () => {
  let t: TestApp;

  beforeAll(async () => {
    t = await startTestApp(
      { "rlqs.yaml": config },
      {
        EXPLAIN_ENABLED: "true",
        RLQS_REPORT_INTERVAL: "1s",
        RLQS_ASSIGNMENT_TTL: "3s",
      },
    );
  });
  afterAll(async () => {
    await t.stop();
  });

  it("explains the split the streams were pushed, on the gRPC and debug ports alike", async () => {
    const grpc = createClient(
      ExplainService,
      createGrpcTransport({ baseUrl: `http://${t.addresses.grpc}` }),
    );
    const debug = debugExplain(t);
    const bucket = { domain: "rlqs", bucket: { tenant: "gold" } };
    // Nobody holds the bucket yet: its rule and L, no stream.
    const empty = await grpc.explainBucket(bucket);
    expect(empty.policy).toBe(BucketPolicy.SHARED_LIMIT);
    expect(empty.reason).toBe(BucketPolicyReason.LIMIT);
    expect(empty.limitPerSecond).toBe(100);
    expect(empty.streams).toEqual([]);

    // One after the other, so that a's stream id is the smaller.
    const a = new FakeEnvoy(t);
    a.report("gold");
    await waitFor(() => a.rate("gold") === 100, "A alone holds all of L");
    const b = new FakeEnvoy(t);
    b.report("gold");
    await waitFor(
      () => a.rate("gold") === 50 && b.rate("gold") === 50,
      "a 50/50 split on subscription",
    );
    const fresh = await grpc.explainBucket(bucket);
    expect(fresh.streams.map((s) => s.demandPerSecond)).toEqual([
      undefined,
      undefined,
    ]);
    expect(fresh.streams.map(tokenRate)).toEqual([50, 50]);

    await sleep(2_000);
    a.report("gold", 120, 120); // about 120/s
    b.report("gold", 40, 0); // about 20/s
    await waitFor(() => {
      const ra = a.rate("gold");
      const rb = b.rate("gold");
      // Only the final split (about 81/19) passes; the one before B's report (65.5/34.5) does not.
      return ra !== undefined && rb !== undefined && rb < 25 && ra > 75;
    }, "the split by measured demand");

    const r = await grpc.explainBucket(bucket);
    const streams = [...r.streams].sort(
      (x, y) => Number(x.streamId) - Number(y.streamId),
    );
    expect(streams).toHaveLength(2);
    // What each stream was pushed last is what Explain says it is assigned.
    expect(streams.map(tokenRate)).toEqual([a.rate("gold"), b.rate("gold")]);
    expect(streams.map((s) => s.assignedPerSecond)).toEqual([
      a.rate("gold"),
      b.rate("gold"),
    ]);
    const [sa, sb] = streams as [BucketStream, BucketStream];
    expect(sb.demandPerSecond).toBeGreaterThan(15);
    expect(sb.demandPerSecond).toBeLessThan(22);
    expect(sa.demandPerSecond).toBeGreaterThan(100);
    // Max-min: B's demand is met (its share is its demand: nothing is left over), A gets the rest.
    expect(sb.sharePerSecond).toBeCloseTo(sb.demandPerSecond!, 9);
    expect(sa.sharePerSecond).toBeCloseTo(100 - sb.demandPerSecond!, 9);
    expect(r.shareSumPerSecond).toBeCloseTo(100, 9);
    expect(r.assignedSumPerSecond).toBeLessThanOrEqual(100);
    expect(streams.every((s) => s.local && s.replica === "")).toBe(true);
    expect(streams.every((s) => s.lastReportTime !== undefined)).toBe(true);
    expect(r.ledger).toBe("memory");
    expect(r.rule?.fullKey).toBe("rlqs.tenant_gold");
    expect(r.rule?.source?.name).toBe("rlqs.yaml");

    // The debug port answers the same, and lists the bucket.
    const viaDebug = await debug.explainBucket(bucket);
    expect(viaDebug.streams.map(split)).toEqual(r.streams.map(split));
    const list = await debug.listBuckets({});
    expect(list.buckets.map((x) => x.entries.map((e) => e.value))).toEqual([
      ["gold"],
    ]);
    expect(list.buckets[0]!.streams.map(split)).toEqual(r.streams.map(split));

    // ratelimit-client -explain-bucket prints the same split.
    const out: string[] = [];
    const err: string[] = [];
    const code = await runClient(
      [
        "-dial_string",
        t.addresses.grpc,
        "-domain",
        "rlqs",
        "-explain-bucket",
        "tenant=gold",
      ],
      (line) => out.push(line),
      (line) => err.push(line),
    );
    expect(err).toEqual([]);
    expect(code).toBe(0);
    const printed = out.join("\n");
    expect(printed).toContain("policy: SHARED_LIMIT (limit)");
    expect(printed).toContain("L: 100/s");
    for (const s of streams)
      expect(printed).toContain(
        `stream ${s.streamId}: demand ${Math.round(s.demandPerSecond! * 1000) / 1000}/s, share ${Math.round(s.sharePerSecond * 1000) / 1000}/s → token bucket`,
      );

    a.end();
    b.end();
    expect(await a.done).toBeUndefined();
    expect(await b.done).toBeUndefined();
    // Closed streams leave the bucket.
    await waitFor(
      async () => (await debug.listBuckets({})).buckets.length === 0,
      "the bucket left",
    );
  });
});

describe("ExplainBucket on two replicas sharing the kv store", () => {
  let store: RedisServer;
  let replicaA: TestApp;
  let replicaB: TestApp;

  beforeAll(async () => {
    store = await startRedisServer();
    const env = {
      BACKEND_TYPE: "kv",
      KV_SOCKET_TYPE: "tcp",
      KV_URL: store.address,
      KV_TIMEOUT: "1s",
      CACHE_KEY_PREFIX: "explain_",
      RLQS_REPORT_INTERVAL: "5s",
      RLQS_ASSIGNMENT_TTL: "15s",
    };
    [replicaA, replicaB] = await Promise.all([
      startTestApp({ "rlqs.yaml": config }, env),
      startTestApp({ "rlqs.yaml": config }, env),
    ]);
  });
  afterAll(async () => {
    await replicaA.stop();
    await replicaB.stop();
    await store.stop();
  });

  it("explains the same split on both replicas, the one each stream was pushed", async () => {
    const a1 = new FakeEnvoy(replicaA);
    a1.report("gold");
    await waitFor(() => a1.rate("gold") === 100, "a1 alone");
    const a2 = new FakeEnvoy(replicaA);
    a2.report("gold");
    await waitFor(() => a2.rate("gold") === 50, "a1 and a2 share L");
    const b1 = new FakeEnvoy(replicaB);
    b1.report("gold");
    await waitFor(
      () =>
        [a1, a2, b1].every((s) => {
          const rate = s.rate("gold");
          return rate !== undefined && rate > 33 && rate < 34;
        }),
      "a third each, across the replicas",
    );
    await sleep(2_000);
    a1.report("gold", 100, 100); // about 100/s
    a2.report("gold", 20, 0); // about 10/s
    b1.report("gold", 60, 0); // about 30/s

    const bucket = { domain: "rlqs", bucket: { tenant: "gold" } };
    const explainA = debugExplain(replicaA);
    const explainB = debugExplain(replicaB);
    // The replicas re-split as the change channel tells them: wait until every demand is
    // measured, then both answers must agree with each other and with every stream's push.
    const [ra, rb] = await waitFor(async () => {
      const both = await Promise.all([
        explainA.explainBucket(bucket),
        explainB.explainBucket(bucket),
      ]);
      const measured = both.every(
        (r) =>
          r.streams.length === 3 &&
          r.streams.every((s) => s.demandPerSecond !== undefined),
      );
      const pushed = [a1, a2, b1].map((s) => s.rate("gold"));
      const rates = (r: ExplainBucketResponse) =>
        holders(r, both[0].replica).map((s) => tokenRate(s));
      return measured &&
        JSON.stringify(rates(both[0])) === JSON.stringify(pushed)
        ? both
        : undefined;
    }, "both replicas explaining the split every stream holds");

    expect(ra.ledger).toBe("kv");
    expect(rb.ledger).toBe("kv");
    expect(ra.replica).not.toBe(rb.replica);
    expect(ra.ledgerError).toBe("");
    // The same split, read from the ledger by each replica.
    expect(rb.streams.map(split)).toEqual(ra.streams.map(split));
    expect(rb.shareSumPerSecond).toBe(ra.shareSumPerSecond);
    expect(rb.assignedSumPerSecond).toBe(ra.assignedSumPerSecond);
    // Which replica holds each stream, as each replica sees it.
    const onA = holders(ra, ra.replica);
    expect(onA.map((s) => s.replica)).toEqual([
      ra.replica,
      ra.replica,
      rb.replica,
    ]);
    expect(onA.map((s) => s.local)).toEqual([true, true, false]);
    expect(holders(rb, ra.replica).map((s) => s.local)).toEqual([
      false,
      false,
      true,
    ]);
    // Every stream holds the token bucket Explain shows for it.
    expect(onA.map(tokenRate)).toEqual([a1, a2, b1].map((s) => s.rate("gold")));
    // Max-min over about 100, 10 and 30/s: the light ones met, the heavy one the rest.
    const [d1, d2, d3] = onA.map((s) => s.demandPerSecond!) as [
      number,
      number,
      number,
    ];
    expect(d1).toBeGreaterThan(d3);
    expect(onA[1]!.sharePerSecond).toBeCloseTo(d2, 9);
    expect(onA[2]!.sharePerSecond).toBeCloseTo(d3, 9);
    expect(ra.shareSumPerSecond).toBeCloseTo(100, 9);
    expect(ra.assignedSumPerSecond).toBeLessThanOrEqual(100);
    const listed = await explainB.listBuckets({ domain: "rlqs" });
    expect(listed.buckets.map((x) => x.streams.map(split))).toEqual([
      ra.streams.map(split),
    ]);

    for (const s of [a1, a2, b1]) s.end();
    for (const s of [a1, a2, b1]) expect(await s.done).toBeUndefined();
  });

  it("lists on one replica the buckets only the other replica's streams hold", async () => {
    const a1 = new FakeEnvoy(replicaA);
    a1.report("gold");
    a1.report("no-rule");
    await waitFor(() => a1.rate("gold") === 100, "a1 holds gold");
    const listed = await debugExplain(replicaB).listBuckets({});
    expect(
      listed.buckets.map((b) => [
        b.domain,
        b.entries.map((e) => `${e.key}=${e.value}`).join(","),
        b.streams.map((s) => s.local),
      ]),
    ).toEqual([
      ["rlqs", "tenant=gold", [false]],
      ["rlqs", "tenant=no-rule", [false]],
    ]);
    expect(listed.truncated).toBe(false);
    expect(
      (await debugExplain(replicaB).listBuckets({ domain: "other" })).buckets,
    ).toEqual([]);
    a1.end();
    expect(await a1.done).toBeUndefined();
    // A closed stream leaves its buckets: neither replica lists them any more.
    await waitFor(
      async () =>
        (await debugExplain(replicaB).listBuckets({})).buckets.length === 0,
      "B to list no bucket",
    );
  });
});

describe("KvQuotaLedger.peek", () => {
  const bucket = "rlqs\u0000tenant=gold";
  const prefix = "peek_";
  let server: RedisServer;
  let admin: Redis;
  const ledgers: KvQuotaLedger[] = [];

  function ledger(replicaId: string, clock: FakeClock): KvQuotaLedger {
    const options = { port: server.port, host: "127.0.0.1", lazyConnect: true };
    const client = new Redis({ ...options, maxRetriesPerRequest: 0 });
    const subscriber = new Redis(options);
    // The outage test kills the store: the ledger reports it, the clients stay quiet.
    client.on("error", () => undefined);
    subscriber.on("error", () => undefined);
    const made = new KvQuotaLedger({
      storage: new KvQuotaLedgerCommands({
        client,
        subscriber,
        keyPrefix: prefix,
      }),
      reportIntervalMs: 1_000,
      replicaId,
      clock,
      logger: silentLogger(),
    });
    ledgers.push(made);
    return made;
  }

  beforeAll(async () => {
    server = await startRedisServer();
    admin = server.client();
  });
  afterEach(async () => {
    await Promise.all(ledgers.splice(0).map((l) => l.close()));
    await admin.flushall().catch(() => undefined);
  });
  afterAll(async () => {
    admin.disconnect();
    await stopAllRedisServers();
  });

  it("reads the streams and demands demands() reads, with replicas and report times, writing nothing", async () => {
    const clock = new FakeClock(1_000);
    const a = ledger("aaaa", clock);
    const b = ledger("bbbb", clock);
    await Promise.all([a.start(), b.start()]);
    const none = { allowed: 0, denied: 0 };
    await a.report(bucket, "aaaa.1", none, clock.nowMs());
    await b.report(bucket, "bbbb.1", none, clock.nowMs());
    clock.seconds += 2;
    await b.report(
      bucket,
      "bbbb.1",
      { allowed: 60, denied: 20 },
      clock.nowMs(),
    );
    const key = kvLedgerKey(prefix, bucket);
    expect((await admin.hkeys(key)).sort()).toEqual(["aaaa.1", "bbbb.1"]);
    const seenByA = await a.peek(bucket);
    expect(seenByA).toEqual({
      ledger: "kv",
      replica: "aaaa",
      streams: [
        {
          stream: "aaaa.1",
          demand: undefined,
          reportedMs: 1_000_000,
          replica: "aaaa",
        },
        {
          stream: "bbbb.1",
          demand: 40,
          reportedMs: 1_002_000,
          replica: "bbbb",
        },
      ],
    });
    expect((await b.peek(bucket)).streams).toEqual(seenByA.streams);
    expect(seenByA.streams.map((s) => [s.stream, s.demand])).toEqual([
      ...(await a.demands(bucket)),
    ]);
    // demands() refreshed A's field (a second went by); peek() itself writes nothing.
    const before = await admin.hgetall(key);
    clock.seconds += 2;
    await a.peek(bucket);
    expect(await admin.hgetall(key)).toEqual(before);
  });

  it("skips a dead replica's field without removing it, as the split leaves it out", async () => {
    const clock = new FakeClock(1_000);
    const a = ledger("aaaa", clock);
    await a.start();
    await a.report(bucket, "aaaa.1", { allowed: 0, denied: 0 }, clock.nowMs());
    const key = kvLedgerKey(prefix, bucket);
    // A field last written 10 s ago by a replica that is gone (stale after 3 intervals).
    await admin.hset(
      key,
      "dead.1",
      JSON.stringify({ since: 0, count: 0, demand: 50, seen: 990_000 }),
    );
    expect((await a.peek(bucket)).streams.map((s) => s.stream)).toEqual([
      "aaaa.1",
    ]);
    expect(await admin.hexists(key, "dead.1")).toBe(1);
    expect([...(await a.demands(bucket)).keys()]).toEqual(["aaaa.1"]);
  });

  it("says when the store cannot be read, and shows the demands the split goes on with", async () => {
    const clock = new FakeClock(1_000);
    const a = ledger("aaaa", clock);
    const b = ledger("bbbb", clock);
    await Promise.all([a.start(), b.start()]);
    const none = { allowed: 0, denied: 0 };
    await a.report(bucket, "aaaa.1", none, clock.nowMs());
    await b.report(bucket, "bbbb.1", none, clock.nowMs());
    clock.seconds += 2;
    await b.report(bucket, "bbbb.1", { allowed: 40, denied: 0 }, clock.nowMs());
    // A reads B's demand once (the split does, at each push): the last known.
    expect([...(await a.demands(bucket))]).toEqual([
      ["aaaa.1", undefined],
      ["bbbb.1", 20],
    ]);
    await server.kill();
    const reading = await a.peek(bucket);
    expect(reading.error).toBeTruthy();
    expect(reading.streams.map((s) => [s.stream, s.demand])).toEqual([
      ["aaaa.1", undefined],
      ["bbbb.1", 20],
    ]);
    expect([...(await a.demands(bucket))]).toEqual(
      reading.streams.map((s) => [s.stream, s.demand]),
    );
    await server.restart();
  });
});
