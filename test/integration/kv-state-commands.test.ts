// The kv commands of the run-time overrides and the RLQS ledger (backends/kv/
// kv-override-commands.ts, kv-quota-ledger-commands.ts) against real redis-servers: the change
// scripts survive a SCRIPT FLUSH (EVALSHA, then EVAL after NOSCRIPT), and on a cluster every
// command, script and announcement reaches the node of its key's slot.

import { Cluster } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { keySlot } from "../../src/backends/kv/kv-key-slot.js";
import {
  connectKvOverrideCommands,
  KvOverrideCommands,
  kvOverridesKey,
} from "../../src/backends/kv/kv-override-commands.js";
import { connectKvQuotaLedgerCommands } from "../../src/backends/kv/kv-quota-ledger-commands.js";
import { resolveKvInstanceOptions } from "../../src/backends/kv/kv-options.js";
import {
  commandCalls,
  startRedisCluster,
  startRedisServer,
  stopAllRedisServers,
  track,
  type RedisCluster,
  type RedisServer,
} from "../helpers/redis-server.js";
import { waitFor } from "../helpers/wait-for.js";

afterAll(async () => {
  await stopAllRedisServers();
});

describe("KvOverrideCommands on one instance", () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await startRedisServer();
  });

  it("runs the change scripts by EVALSHA and sends the whole script again after NOSCRIPT", async () => {
    const admin = server.client();
    const commands = new KvOverrideCommands({
      client: server.client(),
      subscriber: server.client(),
      keyPrefix: "noscript_",
    });
    try {
      const first = await commands.putOverride("api", "tenant=a", "{}");
      expect(first).toEqual({ previous: null, version: 1 });
      const evals = await commandCalls(admin, "eval");
      await commands.putOverride("api", "tenant=a", '{"x":1}');
      // Cached now: the second call is one EVALSHA, no EVAL.
      expect(await commandCalls(admin, "eval")).toBe(evals);
      await admin.script("FLUSH");
      const again = await commands.removeOverride("api", "tenant=a");
      expect(again).toEqual({ previous: '{"x":1}', version: 3 });
      expect(await commandCalls(admin, "eval")).toBe(evals + 1);
      expect(await commands.changesSince("api", 1)).toEqual({
        version: 3,
        fields: ["tenant=a"],
      });
    } finally {
      await commands.close();
      admin.disconnect();
    }
  });
});

describe("kv commands on a cluster", () => {
  let cluster: RedisCluster;
  let admin: Cluster;
  const instance = () =>
    resolveKvInstanceOptions({ type: "cluster", url: cluster.url });

  beforeAll(async () => {
    cluster = track(await startRedisCluster(3));
    admin = new Cluster([{ host: "127.0.0.1", port: cluster.nodes[0]!.port }]);
  }, 30_000);
  afterAll(() => {
    admin.disconnect();
  });

  it("writes and reads overrides of domains on different nodes, and hears announcements", async () => {
    // Domains whose hashes fall in different thirds of the slot range.
    const domains = ["api", "web", "mobile", "billing", "search"];
    const slots = new Set(
      domains.map((d) => Math.floor(keySlot(kvOverridesKey("c_", d)) / 5462)),
    );
    expect(slots.size).toBeGreaterThan(1);
    const a = connectKvOverrideCommands(instance(), undefined, "c_");
    const b = connectKvOverrideCommands(instance(), undefined, "c_");
    const heard: string[] = [];
    b.onAnnouncement((message) => heard.push(message));
    try {
      a.connect();
      b.connect();
      await waitFor(() => a.ready && b.channelReady, "the connections");
      await b.listen();
      for (const domain of domains) {
        await a.addDomain(domain);
        expect(await a.putOverride(domain, "tenant=x", `"${domain}"`)).toEqual({
          previous: null,
          version: 1,
        });
      }
      expect((await b.domains()).sort()).toEqual([...domains].sort());
      expect(await b.versions(domains)).toEqual(domains.map(() => 1));
      const chunks: string[] = [];
      await b.scanOverrides("web", (chunk) => chunks.push(...chunk));
      expect(chunks).toEqual(["tenant=x", '"web"']);
      expect(await b.removeExpired("api", "tenant=x", "", "")).toBe(0);
      await a.announce("hello");
      await waitFor(() => heard.includes("hello"), "the announcement");
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it("writes, reads and lists the ledger's buckets across the nodes", async () => {
    const ledger = connectKvQuotaLedgerCommands(instance(), undefined, "c_");
    const buckets = ["b1", "b2", "b3", "b4", "b5"];
    try {
      ledger.connect();
      // Commands fail fast until the connection is up (no offline queue).
      await waitFor(() => ledger.ready, "the ledger's connection");
      for (const bucket of buckets)
        await ledger.writeStream(bucket, "r.1", "{}", 60_000);
      expect((await ledger.listBuckets()).sort()).toEqual(buckets);
      expect(await ledger.readStreams("b3")).toEqual({ "r.1": "{}" });
      await ledger.removeStreams("b3", ["r.1"]);
      expect((await ledger.listBuckets()).sort()).toEqual(
        buckets.filter((b) => b !== "b3"),
      );
    } finally {
      await ledger.close();
    }
  });
});
