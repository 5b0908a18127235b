// RLQS on two replicas behind one redis-server (BACKEND_TYPE=kv): two in-process services,
// each with its own kv ledger and connections (two replicas as far as the store can tell),
// and Connect bidi streams from the test standing in for Envoys: two on replica A, one on
// replica B, one bucket with a rule of L = 100/s. The token buckets pushed across both
// replicas split L max-min fairly and sum to at most L, and a demand change on B reaches A's
// streams through the change channel within 1 s (the report interval is 5 s, so no tick helps).

import { afterAll, beforeAll, describe, expect, it } from "vitest";
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

describe("RLQS on two replicas sharing the kv store", () => {
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
      CACHE_KEY_PREFIX: "replicas_",
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
    await stopAllRedisServers();
  });

  it("splits L max-min fairly across both replicas' streams, and follows a shift on B within 1 s", async () => {
    const a1 = new FakeEnvoy(replicaA);
    const a2 = new FakeEnvoy(replicaA);
    const b1 = new FakeEnvoy(replicaB);
    const total = () =>
      (a1.rate("gold") ?? 0) + (a2.rate("gold") ?? 0) + (b1.rate("gold") ?? 0);
    a1.report("gold");
    a2.report("gold");
    await waitFor(
      () => a1.rate("gold") === 50 && a2.rate("gold") === 50,
      "A's two streams share L",
    );
    // B's newcomer gets a fair third, and A's streams shrink as B announces it.
    b1.report("gold");
    await waitFor(
      () =>
        [a1, a2, b1].every((s) => {
          const rate = s.rate("gold");
          return rate !== undefined && rate > 33 && rate < 34;
        }),
      "a third each, across the replicas",
      2_000,
    );
    expect(total()).toBeLessThanOrEqual(100);

    // Two seconds of load: a1 100/s (half denied), a2 10/s, b1 30/s.
    await sleep(2_000);
    a1.report("gold", 100, 100);
    a2.report("gold", 20, 0);
    b1.report("gold", 60, 0);
    await waitFor(
      () => {
        const [r1, r2, r3] = [a1, a2, b1].map((s) => s.rate("gold") ?? 0);
        return r2! < 15 && r3! < 35 && r1! > 50;
      },
      "the split by measured demand",
      2_000,
    );
    const [r1, r2, r3] = [a1, a2, b1].map((s) => s.rate("gold") ?? 0) as [
      number,
      number,
      number,
    ];
    // Max-min: the light demands (about 10 and 30/s) are met, the heavy one gets the rest.
    expect(r2).toBeGreaterThanOrEqual(8);
    expect(r3).toBeGreaterThanOrEqual(26);
    expect(r3).toBeLessThanOrEqual(34);
    expect(r1).toBeGreaterThanOrEqual(100 - r2 - r3 - 1);
    expect(r1 + r2 + r3).toBeLessThanOrEqual(100);

    // B's stream now asks for 200/s (smoothed to about 115): a1 and b1 share what a2 leaves.
    await sleep(2_000);
    const before = a1.rate("gold") ?? 0;
    b1.report("gold", 200, 200);
    const shiftedAt = Date.now();
    await waitFor(
      () => (a1.rate("gold") ?? 0) < before - 5,
      "A's stream shrinks as B's demand grows",
      1_000,
    );
    expect(Date.now() - shiftedAt).toBeLessThanOrEqual(1_000);
    await waitFor(() => (b1.rate("gold") ?? 0) > 40, "B's stream grows", 1_000);
    const after = [a1, a2, b1].map((s) => s.rate("gold") ?? 0) as [
      number,
      number,
      number,
    ];
    expect(after[0]).toBeGreaterThan(40);
    expect(after[0]).toBeLessThan(50);
    expect(Math.abs(after[0] - after[2])).toBeLessThanOrEqual(2);
    expect(after[0] + after[1] + after[2]).toBeLessThanOrEqual(100);

    for (const s of [a1, a2, b1]) s.end();
    for (const s of [a1, a2, b1]) expect(await s.done).toBeUndefined();
  });
});
