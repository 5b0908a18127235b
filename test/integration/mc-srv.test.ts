import { create } from "@bufbuild/protobuf";
import { createServer, Packet, type DnsServer } from "dns2";
import { Client } from "memjs";
import { Resolver } from "node:dns/promises";
import { pino } from "pino";
import { silentLogger } from "../helpers/silent-logger.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { nodeIndexForKey } from "../../src/backends/mc/mc-client.js";
import { BackendError } from "../../src/limiter/backend-error.js";
import { createDecider } from "../../src/limiter/decide.js";
import { RateLimitDescriptorSchema } from "../../src/proto.js";
import { createStatsManager } from "../../src/stats/stats-manager.js";
import { FakeClock } from "../helpers/fake-clock.js";
import {
  startMemcached,
  type MemcachedServer,
} from "../helpers/memcached-server.js";
import { testRateLimit } from "../helpers/rate-limit.js";
import { waitFor } from "../helpers/wait-for.js";
import { mcLimiter } from "../helpers/limiters.js";
import type { McCounterBackend } from "../../src/backends/mc/mc-counter-backend.js";
import type { RateLimitPipeline } from "../../src/limiter/pipeline.js";
import { limitRequest } from "../helpers/limit-request.js";

const srvName = "_memcache._tcp.rls.test";

/** A DNS server on loopback answering SRV queries for {@link srvName} from a mutable list. */
interface TestDns {
  /** Targets answered now; empty answers no record. */
  targets: MemcachedServer[];
  /** Answer SERVFAIL instead. */
  failing: boolean;
  /** Queries answered so far. */
  queries: number;
  readonly server: DnsServer;
  readonly port: number;
}

async function startDns(): Promise<TestDns> {
  const state = {
    targets: [] as MemcachedServer[],
    failing: false,
    queries: 0,
  };
  const server = createServer({
    udp: true,
    handle: (request, send) => {
      state.queries++;
      const response = Packet.createResponseFromRequest(request);
      const [question] = request.questions;
      if (state.failing) {
        response.header.rcode = Packet.RCODE.SERVFAIL;
      } else if (
        question?.name === srvName &&
        question.type === Packet.TYPE.SRV
      ) {
        // Priorities and weights differ on purpose: the node order ignores them. Each target
        // is its own loopback address, written as a name: dns2 would compress repeated target
        // names, which SRV forbids (RFC 2782) and Node's resolver rejects.
        state.targets.forEach((target, i) => {
          response.answers.push(
            Packet.createResourceFromQuestion(question, {
              type: Packet.TYPE.SRV,
              class: Packet.CLASS.IN,
              ttl: 1,
              priority: 10 - i,
              weight: i,
              port: target.port,
              target: target.host,
            }),
          );
        });
      }
      void send(response);
    },
  });
  const addresses = await server.listen({
    udp: { port: 0, address: "127.0.0.1" },
  });
  return Object.assign(state, { server, port: addresses.udp!.port });
}

/** Collects pino lines as objects. */
function memoryLogger() {
  const lines: Record<string, unknown>[] = [];
  const logger = pino(
    { level: "info" },
    {
      write(line: string) {
        lines.push(JSON.parse(line) as Record<string, unknown>);
      },
    },
  );
  return { logger, lines };
}

describe("McCounterBackend with SRV discovery", () => {
  let dns: TestDns;
  let servers: MemcachedServer[];
  let raw: Map<MemcachedServer, Client>;
  const clock = new FakeClock(Math.floor(Date.now() / 1000));
  const minuteStart = clock.seconds - (clock.seconds % 60);

  function resolver(): Resolver {
    const r = new Resolver({ timeout: 500, tries: 1 });
    r.setServers([`127.0.0.1:${dns.port}`]);
    return r;
  }

  const srvAddress = (server: MemcachedServer) =>
    `${server.host}.:${server.port}`;

  beforeAll(async () => {
    [dns, ...servers] = await Promise.all([
      startDns(),
      startMemcached({ host: "127.0.0.1" }),
      startMemcached({ host: "127.0.0.2" }),
      startMemcached({ host: "127.0.0.3" }),
    ]);
    raw = new Map(
      servers.map((s) => [
        s,
        Client.create(s.address, {
          retries: 1,
          logger: { log: () => undefined },
        }),
      ]),
    );
  });

  afterAll(async () => {
    for (const client of raw.values()) client.close();
    await dns.server.close();
    await Promise.all(servers.map((s) => s.stop()));
  });

  /** Counts 16 descriptors and checks each key landed on the node the mapping names. */
  async function checkPlacement(
    cache: RateLimitPipeline<McCounterBackend>,
    round: string,
  ) {
    const limit = testRateLimit(createStatsManager(), "srv.k", 100);
    const descriptors = Array.from({ length: 16 }, (_, i) =>
      create(RateLimitDescriptorSchema, {
        entries: [{ key: "k", value: `${round}${i}` }],
      }),
    );
    await cache.doLimit(
      limitRequest(
        "srv",
        descriptors,
        descriptors.map(() => limit),
        descriptors.map(() => 1),
      ),
    );
    await cache.flush();
    const nodes = cache.backend.nodes;
    for (let i = 0; i < descriptors.length; i++) {
      const cacheKey = `srv_k_${round}${i}_${minuteStart}`;
      const home = nodes[nodeIndexForKey(cacheKey, nodes.length)]!;
      for (const [server, client] of raw) {
        const { value } = await client.get(cacheKey);
        expect(value?.toString() ?? null).toBe(
          home === srvAddress(server) ? "1" : null,
        );
      }
    }
  }

  it("resolves the nodes sorted, follows refreshes that add and remove nodes, and keeps the list when DNS fails", async () => {
    const [s1, s2, s3] = servers as [
      MemcachedServer,
      MemcachedServer,
      MemcachedServer,
    ];
    dns.targets = [s2, s1];
    const { logger, lines } = memoryLogger();
    const cache = mcLimiter({
      decider: createDecider({ clock }),
      clock,
      logger,
      srv: srvName,
      srvRefreshMs: 100,
      srvResolver: resolver(),
    });
    try {
      await cache.start();
      const sorted = (targets: MemcachedServer[]) =>
        targets.map(srvAddress).sort();
      expect(cache.backend.nodes).toEqual([srvAddress(s1), srvAddress(s2)]);
      await checkPlacement(cache, "a");

      dns.targets = [s3, s2];
      await waitFor(
        () => cache.backend.nodes.join() === sorted([s2, s3]).join(),
        "the refreshed node list",
      );
      const change = lines.find(
        (l) => l["msg"] === "memcached node list changed",
      );
      expect(change).toMatchObject({
        added: [srvAddress(s3)],
        removed: [srvAddress(s1)],
        changedNodes: 2,
      });
      await checkPlacement(cache, "b");

      dns.failing = true;
      const seen = dns.queries;
      await waitFor(() => dns.queries >= seen + 2, "two failed refreshes");
      await waitFor(
        () =>
          lines.some((l) =>
            String(l["msg"]).startsWith("failed to refresh memcached nodes"),
          ),
        "the refresh failure log",
      );
      expect(cache.backend.nodes).toEqual(sorted([s2, s3]));
      await checkPlacement(cache, "c");
    } finally {
      dns.failing = false;
      await cache.close();
    }
  });

  it("refuses to start when the SRV record has no targets", async () => {
    dns.targets = [];
    const cache = mcLimiter({
      decider: createDecider({ clock }),
      clock,
      logger: silentLogger(),
      srv: srvName,
      srvResolver: resolver(),
    });
    await expect(cache.start()).rejects.toBeInstanceOf(BackendError);
    await cache.close();
  });
});
