// The store outage of issue 22 with default settings (KV_TIMEOUT 10 s, threshold 3, probe
// every 500 ms): a real redis-server killed (SIGKILL) at t = 3 s under 20 calls/s and
// restarted empty at t = 9 s. A lost connection is known at once, so no call waits for the
// store; the `local` mode admits at most the limit in the window, and adds what it counted
// during the outage to the restarted store's counter. The per-second timeline is printed.

import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { statNames } from "../../src/stats/names.js";
import { pause, runLoad, type LoadResult } from "../helpers/load.js";
import {
  startRedisServer,
  stopAllRedisServers,
  type RedisServer,
} from "../helpers/redis-server.js";
import {
  freePort,
  memoryServiceEnv,
  spawnNode,
} from "../helpers/spawn-service.js";
import { waitFor } from "../helpers/wait-for.js";
import { minuteWithRoom } from "../helpers/windows.js";
import { jsonRequest } from "../helpers/requests.js";

const config = `
domain: outage
descriptors:
  - key: client
    rate_limit: { unit: minute, requests_per_unit: 100 }
`;
const reports: string[] = [];

/** Per second of the run: calls answered, their longest answer time, OK answers. */
function timeline(load: LoadResult): string {
  const rows = new Map<
    number,
    { answered: number; maxMs: number; ok: number; phases: Set<string> }
  >();
  for (const c of load.calls) {
    const second = Math.floor(c.sentAtMs / 1000);
    let row = rows.get(second);
    if (row === undefined)
      rows.set(
        second,
        (row = { answered: 0, maxMs: 0, ok: 0, phases: new Set() }),
      );
    row.answered++;
    row.maxMs = Math.max(row.maxMs, c.answeredAtMs - c.sentAtMs);
    if (c.answer === "OK") row.ok++;
    row.phases.add(c.phase);
  }
  let admitted = 0;
  return [...rows.entries()]
    .sort(([a], [b]) => a - b)
    .map(([second, r]) => {
      admitted += r.ok;
      return `t=${String(second).padStart(2)}s answered=${r.answered} max=${r.maxMs.toFixed(1)}ms admitted=${r.ok} (total ${admitted}) [${[...r.phases].join(",")}]`;
    })
    .join("\n");
}

afterAll(async () => {
  await stopAllRedisServers();
  if (reports.length > 0)
    process.stdout.write(
      `\n=== outage with default settings ===\n${reports.join("\n\n")}\n`,
    );
});

/** The service as its own process (dist/), on the kv backend, everything else default. */
interface Service {
  readonly grpc: string;
  readonly http: string;
  readonly debug: string;
  stat(name: string): Promise<number>;
  stop(): Promise<void>;
}

async function startService(
  store: { readonly address: string },
  env: Record<string, string>,
  waitUntilHealthy = true,
): Promise<Service> {
  const root = await mkdtemp(join(tmpdir(), "rls-outage-"));
  await mkdir(join(root, "config"));
  await writeFile(join(root, "config", "outage.yaml"), config);
  // The HTTP/2 engine named is the default one.
  const { env: serviceEnv, grpcPort: grpc } = await memoryServiceEnv(
    "builtin",
    root,
    {
      BACKEND_TYPE: "kv",
      KV_SOCKET_TYPE: "tcp",
      KV_URL: store.address,
      ...env,
    },
  );
  const http = serviceEnv["PORT"]!;
  const debug = serviceEnv["DEBUG_PORT"]!;
  const spawned = spawnNode("dist/src/main.js", [], serviceEnv);
  await waitFor(
    async () => {
      try {
        const status = (await fetch(`http://127.0.0.1:${http}/healthcheck`))
          .status;
        return status === 200 || !waitUntilHealthy ? true : undefined;
      } catch {
        return undefined;
      }
    },
    `the service's /healthcheck (output: ${spawned.output()})`,
    20_000,
  );
  return {
    grpc: `127.0.0.1:${grpc}`,
    http: `127.0.0.1:${http}`,
    debug: `127.0.0.1:${debug}`,
    async stat(name) {
      const text = await (
        await fetch(`http://127.0.0.1:${debug}/stats`)
      ).text();
      const line = text.split("\n").find((l) => l.startsWith(`${name}: `));
      return line === undefined ? 0 : Number(line.slice(name.length + 2));
    },
    async stop() {
      spawned.child.kill("SIGTERM");
      await spawned.exited;
      await rm(root, { recursive: true, force: true });
    },
  };
}

/** 20 calls/s; the store killed at 3 s, restarted (empty) at 9 s; 3 s more. */
async function killAndRestart(
  service: Service,
  store: RedisServer,
): Promise<LoadResult> {
  // The client's connection is up before the run (its first call is not part of it).
  await runLoad({
    address: service.grpc,
    domain: "warm-up",
    entries: [{ key: "client", value: "c0" }],
    ratePerSecond: 20,
    scenario: () => pause(100),
  });
  return runLoad({
    address: service.grpc,
    domain: "outage",
    entries: [{ key: "client", value: "c1" }],
    ratePerSecond: 20,
    scenario: async (phase) => {
      await pause(3000);
      phase("outage");
      await store.kill();
      await pause(6000);
      await store.restart();
      phase("after");
      await pause(3000);
    },
  });
}

describe("store killed and restarted empty, default settings", () => {
  it("local: every call answered by the local limiter, at most the limit admitted, outage hits added to the store", async () => {
    const store = await startRedisServer({ port: await freePort() });
    const service = await startService(store, {
      BACKEND_FAILURE_MODE: "local",
    });
    try {
      const windowStart = await minuteWithRoom(14);
      const load = await killAndRestart(service, store);
      const opened = await service.stat(statNames.backendCircuitOpened);
      const replayed = await service.stat(statNames.backendReplayedHits);
      reports.push(
        `BACKEND_FAILURE_MODE=local, everything else default; circuit_opened=${opened} ` +
          `failures=${await service.stat(statNames.backendFailures)} replayed_hits=${replayed}\n${timeline(load)}`,
      );
      const outage = load.inPhase("outage");
      // Speed is for benchmarks: here every outage call is answered by the local limiter
      // (OK or OVER_LIMIT), none by an error or the caller's deadline (a wait for the store).
      expect(
        outage.filter((c) => c.answer !== "OK" && c.answer !== "OVER_LIMIT"),
      ).toEqual([]);
      expect(load.calls.filter((c) => c.answer.startsWith("error"))).toEqual(
        [],
      );
      // One instance with the default share: the store and the local limiter together admit
      // at most the limit in the window (docs/failure-modes.md#nothing-lost).
      const admitted = load.calls.filter((c) => c.answer === "OK").length;
      expect(admitted).toBeLessThanOrEqual(100);
      expect(load.count(outage)["OK"] ?? 0).toBeGreaterThan(0);
      expect(load.count(outage)["OVER_LIMIT"] ?? 0).toBeGreaterThan(0);
      // The breaker opened and closed again.
      expect(opened).toBeGreaterThanOrEqual(1);
      expect(await service.stat(statNames.backendDegraded)).toBe(0);
      // The restarted store lost its counters, but holds what was counted locally during the
      // outage (replayed) plus the calls it decided since.
      const kv = store.client();
      try {
        const value = Number(await kv.get(`outage_client_c1_${windowStart}`));
        expect(replayed).toBeGreaterThanOrEqual(outage.length - 3);
        expect(value).toBeGreaterThanOrEqual(replayed);
        expect(value).toBeLessThanOrEqual(load.calls.length);
      } finally {
        kv.disconnect();
      }
    } finally {
      await service.stop();
      await store.stop();
    }
  }, 90_000);

  it("error (the default mode): UNAVAILABLE at once during the outage, decisions again after it", async () => {
    const store = await startRedisServer({ port: await freePort() });
    const service = await startService(store, {});
    try {
      const load = await killAndRestart(service, store);
      reports.push(
        `all settings default (BACKEND_FAILURE_MODE=error)\n${timeline(load)}`,
      );
      const outage = load.inPhase("outage");
      // Answered by the failure mode, never by the caller's deadline (a wait for the store):
      // UNAVAILABLE, or OK for a call the store decided before it died.
      expect(
        outage.filter(
          (c) => c.answer !== "error:unavailable" && c.answer !== "OK",
        ),
      ).toEqual([]);
      const counts = load.count(outage);
      expect(counts["error:unavailable"] ?? 0).toBeGreaterThan(100);
      expect(counts["OK"] ?? 0).toBeLessThanOrEqual(1);
      expect(load.inPhase("after").at(-1)?.answer).toBe("OK");
    } finally {
      await service.stop();
      await store.stop();
    }
  }, 60_000);

  it("opens the health and debug ports while it waits for the store, and says why it is not ready", async () => {
    const port = await freePort();
    const service = await startService(
      { address: `127.0.0.1:${port}` },
      {},
      false,
    );
    try {
      const health = await fetch(`http://${service.http}/healthcheck`);
      expect(health.status).toBe(500);
      expect(await health.text()).toBe(
        "unhealthy: startup (waiting for the kv store)",
      );
      expect((await fetch(`http://${service.debug}/stats`)).status).toBe(200);
      // A decision asked on the HTTP port meanwhile is answered at once, not after KV_TIMEOUT.
      const startMs = performance.now();
      const json = await fetch(`http://${service.http}/json`, {
        method: "POST",
        body: jsonRequest("outage", [["client", "c1"]]),
      });
      expect(json.status).toBeGreaterThanOrEqual(500);
      expect(performance.now() - startMs).toBeLessThan(2000);
      const store = await startRedisServer({ port });
      try {
        await waitFor(
          async () =>
            (await fetch(`http://${service.http}/healthcheck`)).status === 200
              ? true
              : undefined,
          "healthy once the store answers",
          30_000,
        );
        const load = await runLoad({
          address: service.grpc,
          domain: "outage",
          entries: [{ key: "client", value: "c1" }],
          ratePerSecond: 20,
          scenario: () => pause(200),
        });
        expect(load.calls.map((c) => c.answer)).toContain("OK");
      } finally {
        await store.stop();
      }
    } finally {
      await service.stop();
    }
  }, 60_000);

  it("a store that stops answering (SIGSTOP): the caller's deadline bounds the wait, then the breaker answers", async () => {
    const store = await startRedisServer({ port: await freePort() });
    const service = await startService(store, {
      BACKEND_FAILURE_MODE: "allow",
    });
    try {
      const load = await runLoad({
        address: service.grpc,
        domain: "outage",
        entries: [{ key: "client", value: "c2" }],
        ratePerSecond: 20,
        // A caller deadline, as Envoy sends one (its filter's `timeout`).
        timeoutMs: 200,
        scenario: async (phase) => {
          await pause(1000);
          phase("outage");
          store.pause(true);
          await pause(3000);
          store.pause(false);
          phase("after");
          await pause(2000);
        },
      });
      reports.push(
        `SIGSTOP, BACKEND_FAILURE_MODE=allow, caller deadline 200 ms\n${timeline(load)}`,
      );
      const outage = load.inPhase("outage");
      const counts = load.count(outage);
      // Answered by the mode before the caller gave up: at most the calls racing the reserve
      // miss it, none waits for KV_TIMEOUT (10 s).
      expect(counts["OK"] ?? 0).toBeGreaterThanOrEqual(outage.length - 2);
      expect(
        Object.keys(counts).filter(
          (k) => k !== "OK" && k !== "error:deadline_exceeded",
        ),
      ).toEqual([]);
      expect(
        await service.stat(statNames.backendCircuitOpened),
      ).toBeGreaterThanOrEqual(1);
      expect(load.inPhase("after").at(-1)?.answer).toBe("OK");
    } finally {
      store.pause(false);
      await service.stop();
      await store.stop();
    }
  }, 60_000);
});
