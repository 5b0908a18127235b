// The RLQS kv ledger against a real redis-server, with two ledgers standing in for two
// replicas: each sees the other's streams in the same order, a dead replica's fields drop out,
// the change channel reaches the other replica, and a store outage fails no call.

import { Redis } from "ioredis";
import { silentLogger } from "../helpers/silent-logger.js";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import {
  KvQuotaLedgerCommands,
  kvLedgerKey,
} from "../../src/backends/kv/kv-quota-ledger-commands.js";
import { KvQuotaLedger } from "../../src/rlqs/kv-quota-ledger.js";
import { statNames } from "../../src/stats/names.js";
import { StatsStore } from "../../src/stats/stats-store.js";
import { FakeClock } from "../helpers/fake-clock.js";
import {
  startRedisServer,
  stopAllRedisServers,
  type RedisServer,
} from "../helpers/redis-server.js";
import { waitFor } from "../helpers/wait-for.js";

const bucket = "rlqs\u0000tenant=gold";
const prefix = "test_";
let server: RedisServer;
let admin: Redis;
const ledgers: KvQuotaLedger[] = [];

function ledger(
  replicaId: string,
  clock: FakeClock,
  stats?: StatsStore,
): KvQuotaLedger {
  const options = { port: server.port, host: "127.0.0.1", lazyConnect: true };
  const client = new Redis({ ...options, maxRetriesPerRequest: 0 });
  const subscriber = new Redis(options);
  // The outage tests stop the store: the ledger counts the failures, the clients stay quiet.
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
    ...(stats !== undefined ? { stats } : {}),
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
  await admin.flushall();
});

afterAll(async () => {
  admin.disconnect();
  await stopAllRedisServers();
});

describe("KvQuotaLedger", () => {
  it("shows every replica's streams to every replica, in the same order", async () => {
    const clock = new FakeClock(1_000);
    const a = ledger("aaaa", clock);
    const b = ledger("bbbb", clock);
    await Promise.all([a.start(), b.start()]);
    expect(
      await a.report(
        bucket,
        "aaaa.1",
        { allowed: 0, denied: 0 },
        clock.nowMs(),
      ),
    ).toBe(true);
    expect(
      await b.report(
        bucket,
        "bbbb.1",
        { allowed: 0, denied: 0 },
        clock.nowMs(),
      ),
    ).toBe(true);
    expect(
      await a.report(
        bucket,
        "aaaa.2",
        { allowed: 0, denied: 0 },
        clock.nowMs(),
      ),
    ).toBe(true);
    clock.seconds += 2;
    expect(
      await b.report(
        bucket,
        "bbbb.1",
        { allowed: 60, denied: 20 },
        clock.nowMs(),
      ),
    ).toBe(false);
    const seenByA = [...(await a.demands(bucket))];
    const seenByB = [...(await b.demands(bucket))];
    expect(seenByA).toEqual([
      ["aaaa.1", undefined],
      ["aaaa.2", undefined],
      ["bbbb.1", 40],
    ]);
    expect(seenByB).toEqual(seenByA);
    // One hash per bucket under the prefix, one field per stream, with an expiry.
    const key = kvLedgerKey(prefix, bucket);
    expect(key).toBe("test_ratelimit_rlqs_rlqs%00tenant%3Dgold");
    expect((await admin.hkeys(key)).sort()).toEqual([
      "aaaa.1",
      "aaaa.2",
      "bbbb.1",
    ]);
    expect(await admin.pttl(key)).toBeGreaterThan(0);
    await a.leave(bucket, "aaaa.2");
    expect([...(await b.demands(bucket)).keys()]).toEqual(["aaaa.1", "bbbb.1"]);
  });

  it("removes the fields of a replica that stopped refreshing them", async () => {
    const clockA = new FakeClock(1_000);
    const clockB = new FakeClock(1_000);
    const a = ledger("aaaa", clockA);
    const b = ledger("bbbb", clockB);
    await a.report(bucket, "aaaa.1", { allowed: 0, denied: 0 }, clockA.nowMs());
    await b.report(bucket, "bbbb.1", { allowed: 0, denied: 0 }, clockB.nowMs());
    // A keeps reading (and so refreshing its own field); B is dead: 3 intervals pass.
    clockA.seconds += 2;
    expect([...(await a.demands(bucket)).keys()]).toEqual(["aaaa.1", "bbbb.1"]);
    clockA.seconds += 2;
    expect([...(await a.demands(bucket)).keys()]).toEqual(["aaaa.1"]);
    expect(await admin.hkeys(kvLedgerKey(prefix, bucket))).toEqual(["aaaa.1"]);
  });

  it("tells the other replica, not itself, of a changed bucket it holds", async () => {
    const clock = new FakeClock(1_000);
    const a = ledger("aaaa", clock);
    const b = ledger("bbbb", clock);
    await Promise.all([a.start(), b.start()]);
    const heardByA: string[] = [];
    const heardByB: string[] = [];
    a.onRemoteChange((changed) => heardByA.push(changed));
    b.onRemoteChange((changed) => heardByB.push(changed));
    await a.report(bucket, "aaaa.1", { allowed: 0, denied: 0 }, clock.nowMs());
    // B holds no stream of the bucket yet: nothing for it to re-split.
    await b.report(bucket, "bbbb.1", { allowed: 0, denied: 0 }, clock.nowMs());
    await waitFor(() => heardByA.length === 1, "A hears of B's subscription");
    clock.seconds += 1;
    await b.report(bucket, "bbbb.1", { allowed: 50, denied: 0 }, clock.nowMs());
    await waitFor(() => heardByA.length === 2, "A hears of B's new demand");
    // A report that completes no measurement changes no demand: no announcement.
    await b.report(bucket, "bbbb.1", { allowed: 5, denied: 0 }, clock.nowMs());
    await a.leave(bucket, "aaaa.1");
    await waitFor(() => heardByB.length === 1, "B hears of A's leave");
    expect(heardByA).toEqual([bucket, bucket]);
    expect(heardByB).toEqual([bucket]);
  });

  it("goes on with the last demands read while the store is down, and counts the failures", async () => {
    const clock = new FakeClock(1_000);
    const stats = new StatsStore();
    const a = ledger("aaaa", clock, stats);
    const b = ledger("bbbb", clock);
    await Promise.all([a.start(), b.start()]);
    await a.report(bucket, "aaaa.1", { allowed: 0, denied: 0 }, clock.nowMs());
    await b.report(bucket, "bbbb.1", { allowed: 0, denied: 0 }, clock.nowMs());
    expect([...(await a.demands(bucket)).keys()]).toEqual(["aaaa.1", "bbbb.1"]);
    await server.kill();
    clock.seconds += 1;
    // Nothing throws: a new local stream subscribes, the other replica's stream is kept.
    expect(
      await a.report(
        bucket,
        "aaaa.2",
        { allowed: 0, denied: 0 },
        clock.nowMs(),
      ),
    ).toBe(true);
    expect([...(await a.demands(bucket)).keys()]).toEqual([
      "aaaa.1",
      "aaaa.2",
      "bbbb.1",
    ]);
    await a.leave(bucket, "aaaa.1");
    expect(stats.counter(statNames.rlqsLedgerErrors).value()).toBeGreaterThan(
      0,
    );
    await server.restart();
    admin.disconnect();
    admin = server.client();
    // Back: A rewrites its streams' fields at its next read.
    await waitFor(async () => {
      clock.seconds += 1;
      await a.demands(bucket);
      return (await admin.hkeys(kvLedgerKey(prefix, bucket))).includes(
        "aaaa.2",
      );
    }, "A's fields written again");
  });
});
