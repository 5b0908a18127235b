// Fault tests on a real redis-server: the store killed and restarted, or paused (SIGSTOP), while
// the service answers a bounded load (200 calls/s), once per BACKEND_FAILURE_MODE. Assertions
// count answers by phase (before / outage / after); timelines are printed, never asserted.

import { create } from "@bufbuild/protobuf";
import { ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { Writable } from "node:stream";
import { pino, type Logger } from "pino";
import { afterAll, describe, expect, it } from "vitest";
import type { FailureMode } from "../../src/config/failure-mode.js";
import {
  RateLimitRequestSchema,
  RateLimitResponse_Code as RlCode,
  RateLimitService,
} from "../../src/proto.js";
import { statNames } from "../../src/stats/names.js";
import type { Clock } from "../../src/util/clock.js";
import { pause, runLoad, type LoadResult } from "../helpers/load.js";
import {
  startRedisServer,
  stopAllRedisServers,
  type RedisServer,
} from "../helpers/redis-server.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";
import { freePort } from "../helpers/spawn-service.js";
import { waitFor } from "../helpers/wait-for.js";

const config = `
domain: fault
descriptors:
  - key: client
    rate_limit: { unit: minute, requests_per_unit: 100 }
`;
const probeIntervalMs = 500;
const outageMs = 5000;

/**
 * The system clock shifted so that now is 1 s into a minute: a run shorter than 50 s then
 * stays in one window of the 100-per-minute rule, whatever the wall clock says.
 */
function minuteAlignedClock(): Clock {
  const now = Date.now();
  const offsetMs = 61_000 - (now % 60_000);
  return {
    nowMs: () => Date.now() + offsetMs,
    nowSeconds: () => Math.floor((Date.now() + offsetMs) / 1000),
  };
}

/** Circuit transitions logged by the apps, with the time since the first (ms). */
const transitions: string[] = [];

function transitionLogger(): Logger {
  return pino(
    { level: "warn" },
    new Writable({
      write(chunk: Buffer, _encoding, done) {
        const line = JSON.parse(String(chunk)) as {
          msg: string;
          time: number;
          err?: { message?: string };
        };
        if (line.msg.includes("circuit"))
          transitions.push(
            `${new Date(line.time).toISOString().slice(17, 23)} ${line.msg}${line.err?.message !== undefined ? ` (${line.err.message})` : ""}`,
          );
        done();
      },
    }),
  );
}

async function startKvApp(
  store: RedisServer,
  mode: FailureMode,
  extraEnv: Record<string, string> = {},
): Promise<TestApp> {
  return startTestApp(
    { "fault.yaml": config },
    {
      BACKEND_TYPE: "kv",
      KV_SOCKET_TYPE: "tcp",
      KV_URL: store.address,
      KV_TIMEOUT: "100ms",
      BACKEND_FAILURE_MODE: mode,
      BACKEND_FAILURE_THRESHOLD: "3",
      BACKEND_PROBE_INTERVAL: `${probeIntervalMs}ms`,
      ...extraEnv,
    },
    transitionLogger(),
    { clock: minuteAlignedClock() },
  );
}

function gauge(t: TestApp): number {
  return t.app.statsManager.store.gauge(statNames.backendDegraded).value();
}

function counter(t: TestApp, name: string): number {
  return t.app.statsManager.store.counter(name).value();
}

interface Outage {
  readonly load: LoadResult;
  /** Milliseconds from the store answering PING again to the circuit closing. */
  readonly recoveryMs: number;
}

/**
 * 200 calls/s: 250 ms with the store up ("before"), the store killed for 5 s ("outage"),
 * restarted ("after") until the circuit has closed, then 1 s more.
 */
async function killUnderLoad(t: TestApp, store: RedisServer): Promise<Outage> {
  let recoveryMs = 0;
  const load = await runLoad({
    address: t.addresses.grpc,
    domain: "fault",
    entries: [{ key: "client", value: "c1" }],
    scenario: async (phase) => {
      await pause(250);
      phase("killing");
      await store.kill();
      phase("outage");
      await pause(outageMs);
      phase("restarting");
      await store.restart();
      phase("after");
      const back = performance.now();
      // Polled every 10 ms: the printed recovery time is to within that.
      while (gauge(t) !== 0 && performance.now() - back < 10_000)
        await pause(10);
      recoveryMs = performance.now() - back;
      await pause(1000);
    },
  });
  return { load, recoveryMs };
}

const timelines: string[] = [];

/** Distinct error messages per phase, with counts (for the printed report). */
function errorMessages(
  load: LoadResult,
): Record<string, Record<string, number>> {
  const out: Record<string, Record<string, number>> = {};
  for (const c of load.calls) {
    if (c.message === undefined) continue;
    const byPhase = (out[c.phase] ??= {});
    const text = c.message.replace(/\d+/g, "N");
    byPhase[text] = (byPhase[text] ?? 0) + 1;
  }
  return out;
}

afterAll(async () => {
  await stopAllRedisServers();
  if (timelines.length > 0)
    process.stdout.write(
      `\n=== fault-kv timelines (answers per second by code) ===\n${timelines.join("\n\n")}\n`,
    );
});

describe("store killed under load (200 calls/s, 100 per minute, 5 s outage)", () => {
  const runs = new Map<FailureMode, Outage & { t: TestApp }>();

  async function run(mode: FailureMode): Promise<Outage & { t: TestApp }> {
    const store = await startRedisServer({ port: await freePort() });
    const t = await startKvApp(store, mode);
    transitions.length = 0;
    try {
      const outage = await killUnderLoad(t, store);
      const { load } = outage;
      timelines.push(
        `BACKEND_FAILURE_MODE=${mode} (recovery ${outage.recoveryMs.toFixed(0)} ms after the store answered again; ` +
          `failures=${counter(t, statNames.backendFailures)} circuit_opened=${counter(t, statNames.backendCircuitOpened)} ` +
          `degraded_decisions=${counter(t, statNames.backendDegradedDecisions)})\n` +
          `totals by phase: ${JSON.stringify(
            Object.fromEntries(
              ["before", "killing", "outage", "restarting", "after"].map(
                (p) => [p, load.count(load.inPhase(p))],
              ),
            ),
          )}\nerror messages: ${JSON.stringify(errorMessages(load))}\ntransitions (ss.mmm): ${JSON.stringify(transitions)}\n${load.timeline()}`,
      );
      const result = { ...outage, t };
      runs.set(mode, result);
      // The store answered before the outage (in `error` mode, calls in flight when the store
      // was killed fail: the other modes answer them).
      const before = load.count(load.inPhase("before"));
      expect(before["OK"] ?? 0).toBeGreaterThan(0);
      // The breaker opened (and closed again: the scenario waited for it).
      expect(counter(t, statNames.backendCircuitOpened)).toBeGreaterThanOrEqual(
        1,
      );
      expect(load.inPhase("after").length).toBeGreaterThan(0);
      return result;
    } finally {
      await t.stop();
      await store.stop();
    }
  }

  it("error: UNAVAILABLE during the outage, decisions again after it", async () => {
    const { load } = await run("error");
    const outage = load.count(load.inPhase("outage"));
    expect(Object.keys(outage)).toEqual(["error:unavailable"]);
    expect(
      load.calls.every(
        (c) =>
          !c.answer.startsWith("error") || c.answer === "error:unavailable",
      ),
    ).toBe(true);
    // After the circuit closed the store decides again (it restarted empty: OK first).
    const after = load.count(load.inPhase("after"));
    expect(after["OK"] ?? 0).toBeGreaterThan(0);
  }, 60_000);

  it("allow: OK for every call of the outage, no error at all", async () => {
    const { load, t } = await run("allow");
    const outage = load.inPhase("outage");
    expect(load.count(outage)).toEqual({ OK: outage.length });
    expect(load.calls.filter((c) => c.answer.startsWith("error"))).toEqual([]);
    expect(
      counter(t, statNames.backendDegradedDecisions),
    ).toBeGreaterThanOrEqual(outage.length);
  }, 60_000);

  it("deny: OVER_LIMIT for every call of the outage, no error at all", async () => {
    const { load, t } = await run("deny");
    const outage = load.inPhase("outage");
    expect(load.count(outage)).toEqual({ OVER_LIMIT: outage.length });
    expect(load.calls.filter((c) => c.answer.startsWith("error"))).toEqual([]);
    expect(
      counter(t, statNames.backendDegradedDecisions),
    ).toBeGreaterThanOrEqual(outage.length);
  }, 60_000);

  it("local: OK then OVER_LIMIT, never an error, at most 100 admitted in the minute, back to the store", async () => {
    const { load } = await run("local");
    expect(load.calls.filter((c) => c.answer.startsWith("error"))).toEqual([]);
    // The whole run is one window of the rule: store and local limiter together admit ≤ 100.
    const ok = load.calls.filter((c) => c.answer === "OK").length;
    expect(ok).toBeLessThanOrEqual(100);
    // The outage went on deciding: admissions continued locally, then over limit.
    const outage = load.inPhase("outage");
    const outageCounts = load.count(outage);
    expect(outageCounts["OVER_LIMIT"] ?? 0).toBeGreaterThan(0);
    const before = load.count(load.inPhase("before"))["OK"] ?? 0;
    if (before < 100) expect(outageCounts["OK"] ?? 0).toBeGreaterThan(0);
    // OK answers come first, then only OVER_LIMIT.
    const firstOver = outage.findIndex((c) => c.answer === "OVER_LIMIT");
    expect(
      outage.slice(firstOver).every((c) => c.answer === "OVER_LIMIT"),
    ).toBe(true);
  }, 60_000);
});

describe("store that accepts connections but never answers (SIGSTOP)", () => {
  it("opens the circuit after the threshold, then answers at once; closes after SIGCONT", async () => {
    const store = await startRedisServer({ port: await freePort() });
    const t = await startKvApp(store, "error");
    const client = createClient(
      RateLimitService,
      createGrpcTransport({
        baseUrl: `http://${t.addresses.grpc}`,
      }),
    );
    const request = create(RateLimitRequestSchema, {
      domain: "fault",
      descriptors: [{ entries: [{ key: "client", value: "stopped" }] }],
    });
    const call = () =>
      client.shouldRateLimit(request).then(
        (r) => (r.overallCode === RlCode.OK ? "OK" : "OVER_LIMIT"),
        (e: unknown) => ConnectError.from(e).rawMessage,
      );
    try {
      expect(await call()).toBe("OK");
      store.pause(true);
      const answers: string[] = [];
      // Sequential calls: the first three wait for KV_TIMEOUT and fail; the fourth is refused
      // by the open circuit without touching the store.
      for (let i = 0; i < 4; i++) answers.push(await call());
      expect(
        answers.slice(0, 3).every((a) => !a.includes("circuit open")),
      ).toBe(true);
      expect(answers[3]).toMatch(/circuit open after 3 consecutive failures/);
      expect(counter(t, statNames.backendCircuitOpened)).toBe(1);
      expect(counter(t, statNames.backendFailures)).toBe(3);
      expect(gauge(t)).toBe(1);
      // Serving, degraded: the health check stays up and says so.
      const health = await fetch(`http://${t.addresses.http}/healthcheck`);
      expect(health.status).toBe(200);
      expect(await health.text()).toBe("degraded: backend");
      store.pause(false);
      const back = await waitFor(
        async () => ((await call()) === "OK" ? true : undefined),
        "a decision from the store after SIGCONT",
        10_000,
      );
      expect(back).toBe(true);
      expect(gauge(t)).toBe(0);
      expect(
        await (await fetch(`http://${t.addresses.http}/healthcheck`)).text(),
      ).toBe("OK");
    } finally {
      store.pause(false);
      await t.stop();
      await store.stop();
    }
  }, 60_000);
});

describe("per-domain failure_mode", () => {
  it("lets one domain fail closed while the others degrade", async () => {
    const store = await startRedisServer({ port: await freePort() });
    const t = await startKvApp(store, "local");
    await t.writeConfig(
      "strict.yaml",
      `
domain: strict
failure_mode: deny
descriptors:
  - key: client
    rate_limit: { unit: minute, requests_per_unit: 100 }
`,
    );
    const client = createClient(
      RateLimitService,
      createGrpcTransport({ baseUrl: `http://${t.addresses.grpc}` }),
    );
    const call = (domain: string) =>
      client
        .shouldRateLimit(
          create(RateLimitRequestSchema, {
            domain,
            descriptors: [{ entries: [{ key: "client", value: "d" }] }],
          }),
        )
        .then(
          (r) => (r.overallCode === RlCode.OK ? "OK" : "OVER_LIMIT"),
          (e: unknown) => `error:${ConnectError.from(e).code}`,
        );
    try {
      await waitFor(
        () =>
          t.app.service.currentConfig()?.failureModes?.get("strict") === "deny",
        "the strict domain to load",
      );
      expect(await call("strict")).toBe("OK");
      await store.kill();
      const answers = { fault: [] as string[], strict: [] as string[] };
      for (let i = 0; i < 6; i++) {
        answers.fault.push(await call("fault"));
        answers.strict.push(await call("strict"));
      }
      expect(answers.fault).toEqual(Array<string>(6).fill("OK"));
      expect(answers.strict).toEqual(Array<string>(6).fill("OVER_LIMIT"));
      expect(gauge(t)).toBe(1);
    } finally {
      await t.stop();
      await store.stop();
    }
  }, 60_000);
});
