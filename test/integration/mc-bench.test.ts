import { create } from "@bufbuild/protobuf";
import { silentLogger } from "../helpers/silent-logger.js";
import { describe, expect, it } from "vitest";
import { createDecider } from "../../src/limiter/decide.js";
import { RateLimitDescriptorSchema } from "../../src/proto.js";
import { createStatsManager } from "../../src/stats/stats-manager.js";
import { systemClock } from "../../src/util/clock.js";
import { startMemcached } from "../helpers/memcached-server.js";
import { testRateLimit } from "../helpers/rate-limit.js";
import { mcLimiter } from "../helpers/limiters.js";
import { limitRequest } from "../helpers/limit-request.js";

/**
 * Backend-alone throughput: `doLimit` in a loop against a real memcached, 64 calls in flight,
 * one descriptor per call over 1 000 keys. Opt-in (`RLS_BENCH=1`), prints decisions per second
 * and CPU microseconds per decision; `RLS_BENCH_CONNS` sets the connections per node
 * (default 1), `RLS_BENCH_NODES` the nodes (default 1), `RLS_BENCH_CALLS` the calls (default
 * 200 000), `RLS_BENCH_AON=1` charges all-or-nothing (increments awaited, with their values).
 * Checks that every hit reached the store.
 */
describe.runIf(process.env["RLS_BENCH"] === "1")(
  "mc backend throughput",
  () => {
    it("decides in a loop", async () => {
      const nodeCount = Number(process.env["RLS_BENCH_NODES"] ?? "1");
      const conns = Number(process.env["RLS_BENCH_CONNS"] ?? "1");
      const calls = Number(process.env["RLS_BENCH_CALLS"] ?? "200000");
      const allOrNothing = process.env["RLS_BENCH_AON"] === "1";
      const nodes = await Promise.all(
        Array.from({ length: nodeCount }, () => startMemcached()),
      );
      const stats = createStatsManager();
      const cache = mcLimiter({
        decider: createDecider({ clock: systemClock }),
        clock: systemClock,
        logger: silentLogger(),
        hostPorts: nodes.map((node) => node.address),
        maxIdleConns: conns,
      });
      try {
        await cache.start();
        const limit = testRateLimit(
          stats,
          "bench.k",
          1_000_000_000,
          undefined,
          {
            allOrNothing,
          },
        );
        const descriptors = Array.from({ length: 1000 }, (_, i) =>
          create(RateLimitDescriptorSchema, {
            entries: [{ key: "k", value: `v${i}` }],
          }),
        );
        let next = 0;
        const worker = async (): Promise<void> => {
          while (next < calls) {
            const d = descriptors[next++ % descriptors.length]!;
            await cache.doLimit(limitRequest("bench", [d], [limit], [1]));
          }
        };
        const cpu = process.cpuUsage();
        const start = performance.now();
        await Promise.all(Array.from({ length: 64 }, worker));
        const seconds = (performance.now() - start) / 1000;
        const used = process.cpuUsage(cpu);
        await cache.flush();
        console.log(
          `mc bench ${nodeCount} node(s) x ${conns} conn(s)${allOrNothing ? ", all-or-nothing" : ""}: ${Math.round(calls / seconds)} decisions/s, ` +
            `${((used.user + used.system) / calls).toFixed(1)} CPU µs/decision`,
        );
        expect(limit.stats.totalHits.value()).toBe(calls);
        expect(cache.backend.stats.incrementSuccess.value()).toBe(calls);
      } finally {
        await cache.close();
        await Promise.all(nodes.map((node) => node.stop()));
      }
    }, 300_000);
  },
);
