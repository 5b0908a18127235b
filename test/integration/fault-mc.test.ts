// Fault tests on a real memcached: the node killed and restarted while the service answers a
// bounded load (200 calls/s). Under the default `error` mode the backend keeps the reference's
// fail-open reads; under `local` the circuit breaker takes over. Counts are asserted by phase;
// timelines are printed.

import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, describe, expect, it } from "vitest";
import type { FailureMode } from "../../src/config/failure-mode.js";
import {
  Health,
  HealthCheckResponse_ServingStatus as Serving,
} from "../../src/proto.js";
import { statNames } from "../../src/stats/names.js";
import type { Clock } from "../../src/util/clock.js";
import { pause, runLoad, type LoadResult } from "../helpers/load.js";
import {
  startMemcached,
  type MemcachedServer,
} from "../helpers/memcached-server.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";

const config = `
domain: fault
descriptors:
  - key: client
    rate_limit: { unit: minute, requests_per_unit: 100 }
`;

/** The system clock shifted to 1 s into a minute (the run stays in one window). */
function minuteAlignedClock(): Clock {
  const offsetMs = 61_000 - (Date.now() % 60_000);
  return {
    nowMs: () => Date.now() + offsetMs,
    nowSeconds: () => Math.floor((Date.now() + offsetMs) / 1000),
  };
}

function stat(t: TestApp, name: string): number {
  return t.app.statsManager.store.counter(name).value();
}

const timelines: string[] = [];
afterAll(() => {
  if (timelines.length > 0)
    process.stdout.write(
      `\n=== fault-mc timelines (answers per second by code) ===\n${timelines.join("\n\n")}\n`,
    );
});

async function killUnderLoad(
  mode: FailureMode,
): Promise<{ load: LoadResult; t: TestApp; health: string[] }> {
  const node: MemcachedServer = await startMemcached();
  const t = await startTestApp(
    { "fault.yaml": config },
    {
      BACKEND_TYPE: "mc",
      MC_HOST_PORT: node.address,
      BACKEND_FAILURE_MODE: mode,
      BACKEND_FAILURE_THRESHOLD: "3",
      BACKEND_PROBE_INTERVAL: "500ms",
    },
    undefined,
    { clock: minuteAlignedClock() },
  );
  const health: string[] = [];
  const grpcHealth = createClient(
    Health,
    createGrpcTransport({ baseUrl: `http://${t.addresses.grpc}` }),
  );
  // `/healthcheck` status and body, then the gRPC health status of "ratelimit".
  const healthcheck = async (): Promise<string> => {
    const res = await fetch(`http://${t.addresses.http}/healthcheck`);
    const grpc = await grpcHealth.check({ service: "ratelimit" });
    return `${res.status} ${await res.text()} / grpc ${Serving[grpc.status]}`;
  };
  try {
    const load = await runLoad({
      address: t.addresses.grpc,
      domain: "fault",
      entries: [{ key: "client", value: "c1" }],
      scenario: async (phase) => {
        await pause(250);
        phase("killing");
        await node.kill();
        phase("outage");
        await pause(2000);
        health.push(await healthcheck());
        await pause(1000);
        phase("restarting");
        await node.restart();
        phase("after");
        await pause(2000);
        health.push(await healthcheck());
      },
    });
    timelines.push(
      `BACKEND_TYPE=mc BACKEND_FAILURE_MODE=${mode} (failures=${stat(t, statNames.backendFailures)} ` +
        `circuit_opened=${stat(t, statNames.backendCircuitOpened)} degraded_decisions=${stat(t, statNames.backendDegradedDecisions)}; ` +
        `healthcheck during/after: ${JSON.stringify(health)})\n${load.timeline()}`,
    );
    return { load, t, health };
  } finally {
    await t.stop();
    await node.stop();
  }
}

describe("memcached killed under load (200 calls/s, 100 per minute)", () => {
  it("error (default): the reference's fail-open reads, no error, breaker never involved", async () => {
    const { load, t } = await killUnderLoad("error");
    expect(load.calls.filter((c) => c.answer.startsWith("error"))).toEqual([]);
    // The dead node's counters read as 0: every call of the outage is admitted. Only calls
    // answered before the restart began were decided with the node dead: a call the pacing
    // sent late in the outage (catching up after a stall) may be decided by the restarted node,
    // which counts it exactly (a burst of them goes over the limit).
    const restartAtMs = Math.min(
      ...load.calls
        .filter((c) => c.phase === "restarting" || c.phase === "after")
        .map((c) => c.sentAtMs),
    );
    const outage = load
      .inPhase("outage")
      .filter((c) => c.answeredAtMs < restartAtMs);
    expect(outage.length).toBeGreaterThan(0);
    expect(load.count(outage)).toEqual({ OK: outage.length });
    expect(stat(t, statNames.backendCircuitOpened)).toBe(0);
  }, 60_000);

  it("local: no error, at most 100 admitted in the minute, the circuit opens and closes", async () => {
    const { load, t, health } = await killUnderLoad("local");
    expect(load.calls.filter((c) => c.answer.startsWith("error"))).toEqual([]);
    expect(
      load.calls.filter((c) => c.answer === "OK").length,
    ).toBeLessThanOrEqual(100);
    const outage = load.count(load.inPhase("outage"));
    expect(outage["OVER_LIMIT"] ?? 0).toBeGreaterThan(0);
    expect(stat(t, statNames.backendCircuitOpened)).toBeGreaterThanOrEqual(1);
    expect(stat(t, statNames.backendDegradedDecisions)).toBeGreaterThan(0);
    expect(health[0]).toBe("200 degraded: backend / grpc SERVING");
    expect(health[1]).toBe("200 OK / grpc SERVING");
    expect(
      t.app.statsManager.store.gauge(statNames.backendDegraded).value(),
    ).toBe(0);
  }, 60_000);
});
