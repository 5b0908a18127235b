// RLQS end to end (issue 24): one global limit L shared by three real Envoy 1.40 processes
// running examples/envoy/rlqs.yaml as is, against our service (spawned from dist/, memory
// backend, a rule of L = 100/s on the `tenant` bucket). Fixed-rate load of 120/s, 60/s and
// 20/s into the three Envoys for 20 s, then the third goes to 150/s for 15 s. Asserted: after a
// 6 s warm-up every sliding 2-second mean of the total let through stays within L ± 5 %; no
// Envoy is starved (each gets at least 0.8 × min(its demand, L/3) every second of a settled
// phase); after the shift the split follows within 10 s (two of Envoy 1.40's fixed 5 s
// reports). A split proportional to demand alone starves the light Envoy; max-min passes.
// The same scenario then runs on two replicas of the service behind one redis-server
// (BACKEND_TYPE=kv): the first two Envoys on replica A, the third on replica B, so the limit
// is shared through the kv ledger and its change channel (docs/rlqs.md, "Several replicas").
//
// RLQS_E2E_SERVER=fake runs the same harness against a max-min stand-in
// (test/helpers/rlqs-fair-fake.ts) to check the harness itself.

import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startUpstream, type Upstream } from "../helpers/envoy.js";
import { runHttpLoad, type HttpLoadResult } from "../helpers/http-load.js";
import { startFairRlqsFake } from "../helpers/rlqs-fair-fake.js";
import {
  startRedisServer,
  stopAllRedisServers,
} from "../helpers/redis-server.js";
import { startRlqsEnvoy, type RlqsEnvoy } from "../helpers/rlqs-envoy.js";
import { memoryServiceEnv, spawnNode } from "../helpers/spawn-service.js";
import { waitFor } from "../helpers/wait-for.js";

/** The shared limit, requests per second. */
const L = 100;
const warmUpSeconds = 6;
const shiftAtSecond = 20;
/** Two of Envoy 1.40's fixed 5 s reports. */
const followSeconds = 10;
const totalSeconds = 35;
const schedules = [
  [{ seconds: totalSeconds, rate: 120 }],
  [{ seconds: totalSeconds, rate: 60 }],
  [
    { seconds: shiftAtSecond, rate: 20 },
    { seconds: totalSeconds - shiftAtSecond, rate: 150 },
  ],
] as const;

const config = `
domain: rlqs
descriptors:
  - key: tenant
    rate_limit: { unit: second, requests_per_unit: ${L} }
`;

const useFake = process.env["RLQS_E2E_SERVER"] === "fake";

let upstream: Upstream;
let envoys: RlqsEnvoy[] = [];
let stopServer: () => Promise<void> = () => Promise.resolve();
let root: string | undefined;

beforeAll(async () => {
  upstream = await startUpstream();
  let port: number;
  if (useFake) {
    const fake = await startFairRlqsFake({ limitPerSecond: L });
    port = fake.port;
    stopServer = () => fake.stop();
  } else {
    root = mkdtempSync(join(tmpdir(), "rls-rlqs-e2e-"));
    mkdirSync(join(root, "config"));
    writeFileSync(join(root, "config", "rlqs.yaml"), config);
    const spawnEnv = await memoryServiceEnv("builtin", root);
    port = spawnEnv.grpcPort;
    const spawned = spawnNode("dist/src/main.js", [], spawnEnv.env);
    await waitFor(
      () => spawned.output().includes("listening for gRPC"),
      "the service to listen",
      20_000,
    );
    stopServer = async () => {
      spawned.child.kill("SIGTERM");
      await spawned.exited;
    };
  }
  envoys = await Promise.all(
    schedules.map(() =>
      startRlqsEnvoy(
        { host: "127.0.0.1", port },
        { host: "127.0.0.1", port: upstream.port },
      ),
    ),
  );
}, 90_000);

/** Stops the Envoys and the service(s) of the scenario that ran last. */
async function stopFirst(): Promise<void> {
  await Promise.all(envoys.map((e) => e.stop()));
  envoys = [];
  await stopServer();
  stopServer = () => Promise.resolve();
  if (root !== undefined) rmSync(root, { recursive: true, force: true });
  root = undefined;
}

afterAll(async () => {
  await stopFirst();
  await upstream.stop();
});

/** One line per second: each Envoy's 200/429, the total let through. */
function table(results: readonly HttpLoadResult[]): string {
  const lines = [
    "  t   envoy1 (200/429)  envoy2 (200/429)  envoy3 (200/429)  total 200",
  ];
  for (let t = 0; t < totalSeconds; t++) {
    const cells = results.map((r) => {
      const s = r.seconds[t]!;
      return `${s.ok}/${s.limited}${s.other > 0 ? ` !${s.other}` : ""}`.padStart(
        16,
      );
    });
    const total = results.reduce((sum, r) => sum + r.seconds[t]!.ok, 0);
    lines.push(
      `${String(t).padStart(3)}s ${cells.join("  ")}  ${String(total).padStart(9)}`,
    );
  }
  return lines.join("\n");
}

/**
 * Runs the load schedules through the three Envoys and asserts the shared limit: the sliding
 * 2-second means after the warm-up within L ± 5 %, no Envoy starved in a settled phase.
 */
async function shareAndAssert(label: string): Promise<void> {
  const results = await Promise.all(
    envoys.map((envoy, i) =>
      runHttpLoad({
        url: `${envoy.url}/`,
        headers: { "x-tenant": "a" },
        schedule: schedules[i]!,
      }),
    ),
  );
  process.stdout.write(
    `rlqs e2e per-second totals (${label}):\n${table(results)}\n`,
  );
  for (const r of results) {
    expect(r.firstError).toBeUndefined();
    for (const s of r.seconds) expect(s.other).toBe(0);
  }
  const total = (t: number): number =>
    results.reduce((sum, r) => sum + r.seconds[t]!.ok, 0);

  // The total: every sliding 2-second mean after the warm-up within L ± 5 %.
  const means: string[] = [];
  for (let t = warmUpSeconds; t + 1 < totalSeconds; t++) {
    const mean = (total(t) + total(t + 1)) / 2;
    if (mean < L * 0.95 || mean > L * 1.05)
      means.push(`${t}-${t + 1}s: ${mean}`);
  }
  expect(means, "2-second means outside L ± 5 %").toEqual([]);

  // No Envoy starved, in each settled phase (before the shift; from 10 s after it).
  const starved: string[] = [];
  const settled = [
    { from: warmUpSeconds, to: shiftAtSecond, rates: [120, 60, 20] },
    {
      from: shiftAtSecond + followSeconds,
      to: totalSeconds,
      rates: [120, 60, 150],
    },
  ];
  for (const phase of settled)
    for (let t = phase.from; t < phase.to; t++)
      results.forEach((r, i) => {
        const floor = 0.8 * Math.min(phase.rates[i]!, L / 3);
        const ok = r.seconds[t]!.ok;
        if (ok < floor)
          starved.push(`envoy${i + 1} at ${t}s: ${ok} < ${floor.toFixed(1)}`);
      });
  expect(
    starved,
    "seconds an Envoy got less than 0.8 × min(demand, L/3)",
  ).toEqual([]);
}

describe(`RLQS through three Envoy 1.40 (${useFake ? "max-min stand-in" : "our service, memory backend"})`, () => {
  it(`shares L = ${L}/s among Envoys loaded 120/60/20 per second, then 120/60/150`, async () => {
    await shareAndAssert(useFake ? "fake" : "service");
  }, 120_000);
});

describe.skipIf(useFake)(
  "RLQS through three Envoy 1.40 on two replicas behind one redis-server",
  () => {
    beforeAll(async () => {
      await stopFirst();
      const store = await startRedisServer();
      root = mkdtempSync(join(tmpdir(), "rls-rlqs-e2e-"));
      mkdirSync(join(root, "config"));
      writeFileSync(join(root, "config", "rlqs.yaml"), config);
      const replicas = await Promise.all(
        ["a", "b"].map(async () => {
          const spawnEnv = await memoryServiceEnv("builtin", root!, {
            BACKEND_TYPE: "kv",
            KV_SOCKET_TYPE: "tcp",
            KV_URL: store.address,
            CACHE_KEY_PREFIX: "e2e_",
          });
          const spawned = spawnNode("dist/src/main.js", [], spawnEnv.env);
          await waitFor(
            () => spawned.output().includes("listening for gRPC"),
            "a replica to listen",
            20_000,
          );
          return { port: spawnEnv.grpcPort, spawned };
        }),
      );
      stopServer = async () => {
        for (const { spawned } of replicas) spawned.child.kill("SIGTERM");
        await Promise.all(replicas.map(({ spawned }) => spawned.exited));
        await stopAllRedisServers();
      };
      // Envoys 1 and 2 on replica A, envoy 3 on replica B.
      envoys = await Promise.all(
        [0, 0, 1].map((replica) =>
          startRlqsEnvoy(
            { host: "127.0.0.1", port: replicas[replica]!.port },
            { host: "127.0.0.1", port: upstream.port },
          ),
        ),
      );
    }, 90_000);

    it(`shares L = ${L}/s among Envoys loaded 120/60/20 per second, then 120/60/150, across the replicas`, async () => {
      await shareAndAssert("two replicas, kv");
    }, 120_000);
  },
);
