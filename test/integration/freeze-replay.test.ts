// Exact replay after a frozen store (issue 33 item 3, docs/failure-modes.md#calls-in-doubt): a
// real redis-server or memcached is stopped with SIGSTOP while calls keep arriving, then
// continued. The calls the decision deadline gave up on are in doubt until their own outcome is
// known; the store's counter, read directly afterwards, must hold exactly the hits answered.

import { createConnection } from "node:net";
import { create } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, describe, expect, it } from "vitest";
import {
  RateLimitRequestSchema,
  RateLimitResponse_Code as RlCode,
  RateLimitService,
} from "../../src/proto.js";
import { statNames } from "../../src/stats/names.js";
import type { Clock } from "../../src/util/clock.js";
import { pause } from "../helpers/load.js";
import { startMemcached } from "../helpers/memcached-server.js";
import { freePort, startRedisServer } from "../helpers/redis-server.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";
import { waitFor } from "../helpers/wait-for.js";

const config = `
domain: freeze
descriptors:
  - key: client
    rate_limit: { unit: minute, requests_per_unit: 1000 }
`;

/** The system clock shifted to 1 s into a minute (the run stays in one window). */
function minuteAlignedClock(): Clock {
  const offsetMs = 61_000 - (Date.now() % 60_000);
  return {
    nowMs: () => Date.now() + offsetMs,
    nowSeconds: () => Math.floor((Date.now() + offsetMs) / 1000),
  };
}

/** The store's cache key of the rule (the reference's: domain_key_value_windowStart). */
function cacheKey(clock: Clock): string {
  const now = clock.nowSeconds();
  return `freeze_client_c1_${String(now - (now % 60))}`;
}

const reports: string[] = [];
afterAll(() => {
  if (reports.length > 0)
    process.stdout.write(`\n=== freeze-replay ===\n${reports.join("\n")}\n`);
});

interface Run {
  readonly sent: number;
  readonly answered: number;
  readonly refused: number;
}

/**
 * Sends one call every 20 ms (not waiting for answers): `before` calls, then `during` with
 * the store frozen (`freeze`), then `after` once it is continued (`thaw`). Waits for every
 * answer.
 */
async function freezeUnderLoad(
  t: TestApp,
  freeze: () => Promise<void>,
  thaw: () => void,
): Promise<Run> {
  const client = createClient(
    RateLimitService,
    createGrpcTransport({ baseUrl: `http://${t.addresses.grpc}` }),
  );
  const request = create(RateLimitRequestSchema, {
    domain: "freeze",
    descriptors: [{ entries: [{ key: "client", value: "c1" }] }],
  });
  const calls: Promise<"answered" | "refused">[] = [];
  const send = async (n: number): Promise<void> => {
    for (let i = 0; i < n; i++) {
      calls.push(
        client.shouldRateLimit(request).then(
          (r) =>
            r.overallCode === RlCode.OK || r.overallCode === RlCode.OVER_LIMIT
              ? "answered"
              : "refused",
          () => "refused",
        ),
      );
      await pause(20);
    }
  };
  await send(25);
  await freeze();
  await send(100);
  thaw();
  await send(25);
  const outcomes = await Promise.all(calls);
  const answered = outcomes.filter((o) => o === "answered").length;
  return {
    sent: outcomes.length,
    answered,
    refused: outcomes.length - answered,
  };
}

function counter(t: TestApp, name: string): number {
  return t.app.statsManager.store.counter(name).value();
}

/** Waits until the calls in doubt have settled and the outage is replayed. */
async function settled(t: TestApp): Promise<void> {
  const store = t.app.statsManager.store;
  await waitFor(
    () =>
      store.gauge(statNames.backendCallsInDoubt).value() === 0 &&
      store.gauge(statNames.backendDegraded).value() === 0 &&
      counter(t, statNames.backendReplayedHits) > 0
        ? true
        : undefined,
    "the calls in doubt settled and the outage replayed",
    20_000,
  );
  // The replay's write is in flight once counted: give it a moment to land.
  await pause(300);
}

function report(backend: string, t: TestApp, run: Run, held: number): string {
  return `${backend}: sent=${String(run.sent)} answered=${String(run.answered)} refused=${String(run.refused)} store=${String(held)} failures=${String(counter(t, statNames.backendFailures))} counted_late=${String(counter(t, statNames.backendCountedLate))} replayed_hits=${String(counter(t, statNames.backendReplayedHits))} in_doubt_overflow=${String(counter(t, statNames.backendInDoubtOverflow))}`;
}

/** memcached's value of `key` (text protocol `get`), or undefined when missing. */
function memcachedGet(
  host: string,
  port: number,
  key: string,
): Promise<string | undefined> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ host, port });
    let data = "";
    socket.on("data", (chunk: Buffer) => {
      data += chunk.toString("latin1");
      if (!data.endsWith("END\r\n")) return;
      socket.destroy();
      const lines = data.split("\r\n");
      resolve(lines[0]!.startsWith("VALUE ") ? lines[1] : undefined);
    });
    socket.on("error", reject);
    socket.write(`get ${key}\r\n`);
  });
}

/** memcached's `stats`, by name. */
function memcachedStats(
  host: string,
  port: number,
): Promise<Map<string, string>> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ host, port });
    let data = "";
    socket.on("data", (chunk: Buffer) => {
      data += chunk.toString("latin1");
      if (!data.endsWith("END\r\n")) return;
      socket.destroy();
      const out = new Map<string, string>();
      for (const line of data.split("\r\n")) {
        const [tag, name, value] = line.split(" ");
        if (tag === "STAT" && name !== undefined && value !== undefined)
          out.set(name, value);
      }
      resolve(out);
    });
    socket.on("error", reject);
    socket.write("stats\r\n");
  });
}

describe("exact replay after a frozen store", () => {
  it("kv: the store holds exactly the hits answered", async () => {
    const store = await startRedisServer({ port: await freePort() });
    const clock = minuteAlignedClock();
    const t = await startTestApp(
      { "freeze.yaml": config },
      {
        BACKEND_TYPE: "kv",
        KV_SOCKET_TYPE: "tcp",
        KV_URL: store.address,
        BACKEND_FAILURE_MODE: "local",
        // The deadline a caller such as Envoy would set (the freeze is shorter than KV_TIMEOUT).
        BACKEND_DECISION_TIMEOUT: "50ms",
      },
      undefined,
      { clock },
    );
    try {
      const run = await freezeUnderLoad(
        t,
        () => {
          store.pause(true);
          return Promise.resolve();
        },
        () => {
          store.pause(false);
        },
      );
      await settled(t);
      const admin = store.client();
      const keys = await admin.keys("*");
      const held = Number(await admin.get(cacheKey(clock)));
      admin.disconnect();
      reports.push(report("kv", t, run, held));
      expect(keys).toEqual([cacheKey(clock)]);
      expect(run.refused).toBe(0);
      expect(counter(t, statNames.backendCountedLate)).toBeGreaterThan(0);
      expect(held).toBe(run.answered);
    } finally {
      store.pause(false);
      await t.stop();
      await store.stop();
    }
  }, 60_000);

  it("mc: the store holds exactly the hits answered", async () => {
    const node = await startMemcached();
    const clock = minuteAlignedClock();
    const t = await startTestApp(
      { "freeze.yaml": config },
      {
        BACKEND_TYPE: "mc",
        MC_HOST_PORT: node.address,
        BACKEND_FAILURE_MODE: "local",
        BACKEND_DECISION_TIMEOUT: "50ms",
      },
      undefined,
      { clock },
    );
    try {
      const run = await freezeUnderLoad(
        t,
        () => node.pause(),
        () => {
          node.resume();
        },
      );
      await settled(t);
      const held = Number(
        await memcachedGet(node.host, node.port, cacheKey(clock)),
      );
      const stats = await memcachedStats(node.host, node.port);
      reports.push(
        `${report("mc", t, run, held)} incr_hits=${stats.get("incr_hits") ?? "?"} incr_misses=${stats.get("incr_misses") ?? "?"} conns=${stats.get("total_connections") ?? "?"}`,
      );
      expect(run.refused).toBe(0);
      expect(counter(t, statNames.backendCountedLate)).toBeGreaterThan(0);
      expect(held).toBe(run.answered);
    } finally {
      node.resume();
      await t.stop();
      await node.stop();
    }
  }, 60_000);
});
