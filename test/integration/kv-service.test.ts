import { Writable } from "node:stream";
import { create } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createClient,
  type Client,
} from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { pino } from "pino";
import { silentLogger } from "../helpers/silent-logger.js";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BackendError } from "../../src/limiter/backend-error.js";
import { createDecider } from "../../src/limiter/decide.js";
import {
  RateLimitDescriptorSchema,
  RateLimitResponse_Code as RlCode,
  RateLimitService,
} from "../../src/proto.js";
import { createStatsManager } from "../../src/stats/stats-manager.js";
import { systemClock } from "../../src/util/clock.js";
import { testRateLimit } from "../helpers/rate-limit.js";
import {
  freePort,
  startRedisServer,
  stopAllRedisServers,
  track,
  type RedisServer,
} from "../helpers/redis-server.js";
import { windowAlignedClock } from "../helpers/aligned-clock.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";
import { waitFor } from "../helpers/wait-for.js";
import { kvLimiter } from "../helpers/limiters.js";
import { limitRequest } from "../helpers/limit-request.js";
import { jsonRequest, request } from "../helpers/requests.js";

const config = `
domain: rl
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: burst
    rate_limit: { unit: second, requests_per_unit: 100 }
`;

let store: RedisServer;
let admin: Redis;
let t: TestApp;
let client: Client<typeof RateLimitService>;

beforeAll(async () => {
  store = track(await startRedisServer());
  admin = store.client();
  t = await startTestApp(
    { "rl.yaml": config },
    {
      BACKEND_TYPE: "kv",
      KV_SOCKET_TYPE: "tcp",
      KV_URL: store.address,
      KV_TIMEOUT: "1s",
      KV_POOL_ON_EMPTY_BEHAVIOR: "ERROR",
      KV_POOL_ON_EMPTY_WAIT_DURATION: "200ms",
      KV_HEALTH_CHECK_ACTIVE_CONNECTION: "true",
      CACHE_KEY_PREFIX: "svc:",
      DISABLE_STATS: "true",
    },
    undefined,
    // Four hits and one stored key per minute window below: a clock 1 s into a minute.
    { clock: windowAlignedClock(60) },
  );
  client = createClient(
    RateLimitService,
    createGrpcTransport({ baseUrl: `http://${t.addresses.grpc}` }),
  );
});
afterAll(async () => {
  await t.stop();
  admin.disconnect();
  await stopAllRedisServers();
});

async function healthStatus(): Promise<number> {
  return (await fetch(`http://${t.addresses.http}/healthcheck`)).status;
}

describe("the service with BACKEND_TYPE=kv", () => {
  it("decides over gRPC with counters in the store", async () => {
    const remaining: number[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await client.shouldRateLimit(
        request("rl", [["user", "alice"]]),
      );
      expect(r.overallCode).toBe(RlCode.OK);
      remaining.push(r.statuses[0]!.limitRemaining);
    }
    expect(remaining).toEqual([2, 1, 0]);
    const over = await client.shouldRateLimit(
      request("rl", [["user", "alice"]]),
    );
    expect(over.overallCode).toBe(RlCode.OVER_LIMIT);
    const keys = await admin.keys("svc:rl_user_alice_*");
    expect(keys).toHaveLength(1);
    expect(await admin.get(keys[0]!)).toBe("4");
    expect(await healthStatus()).toBe(200);
    const store = t.app.statsManager.store;
    expect(store.gauge("ratelimit.kv_pool.cx_active").value()).toBe(1);
    expect(store.counter("ratelimit.kv_pool.cx_total").value()).toBe(1);
  });

  it("fails with UNAVAILABLE / 503 while the store is down, and recovers by itself", async () => {
    await store.kill();
    const errors = t.app.statsManager.store.counter(
      "ratelimit.service.call.should_rate_limit.kv_error",
    );
    const before = errors.value();
    const started = Date.now();
    const err = await client
      .shouldRateLimit(request("rl", [["user", "bob"]]))
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.Unavailable);
    // Within KV_TIMEOUT (1s): here the ERROR behaviour gives up after its 200 ms wait.
    expect(Date.now() - started).toBeLessThan(1000);
    const json = await fetch(`http://${t.addresses.http}/json`, {
      method: "POST",
      body: jsonRequest("rl", [["user", "bob"]]),
    });
    expect(json.status).toBe(503);
    expect(errors.value()).toBe(before + 2);
    await waitFor(
      async () => (await healthStatus()) === 500,
      "unhealthy",
      3000,
    );
    expect(
      t.app.statsManager.store.gauge("ratelimit.kv_pool.cx_active").value(),
    ).toBe(0);

    await store.restart();
    const r = await waitFor(
      () =>
        client
          .shouldRateLimit(request("rl", [["user", "bob"]]))
          .catch(() => undefined),
      "a decision after the store came back",
      5000,
    );
    expect(r.overallCode).toBe(RlCode.OK);
    expect(await healthStatus()).toBe(200);
    const pool = t.app.statsManager.store;
    expect(pool.gauge("ratelimit.kv_pool.cx_active").value()).toBe(1);
    expect(pool.counter("ratelimit.kv_pool.cx_total").value()).toBe(2);
  });
});

describe("KvCounterBackend start-up and waiting", () => {
  it("retries PING with backoff, logging each retry, and gives up after KV_STARTUP_MAX_ELAPSED_TIME", async () => {
    const lines: string[] = [];
    const logger = pino(
      { level: "warn" },
      new Writable({
        write(chunk: Buffer, _encoding, callback) {
          lines.push(chunk.toString());
          callback();
        },
      }),
    );
    const port = await freePort();
    const cache = kvLimiter({
      main: {
        type: "single",
        socketType: "tcp",
        url: `redis://user:hunter2@127.0.0.1:${port}`,
      },
      decider: createDecider({ clock: systemClock }),
      logger,
      startupInitialIntervalMs: 50,
      startupMaxIntervalMs: 100,
      startupMaxElapsedTimeMs: 400,
    });
    const started = Date.now();
    const err = await cache.start().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(BackendError);
    expect((err as Error).message).toMatch(
      /timed out waiting for kv connection to redis:\/\/\*\*\*\*\*@127\.0\.0\.1:\d+ after 400 ms/,
    );
    expect(Date.now() - started).toBeLessThan(2000);
    const retries = lines.filter((l) => l.includes("retrying kv connection"));
    expect(retries.length).toBeGreaterThanOrEqual(2);
    expect(lines.join("")).not.toContain("hunter2");
    await cache.close();
  });

  it("with WAIT, holds a request until the store is back (bounded by KV_TIMEOUT)", async () => {
    const server = track(await startRedisServer());
    const cache = kvLimiter({
      main: {
        type: "single",
        socketType: "tcp",
        url: server.address,
        poolOnEmptyBehavior: "WAIT",
        timeoutMs: 4000,
      },
      decider: createDecider({ clock: systemClock }),
      logger: silentLogger(),
    });
    await cache.start();
    await server.kill();
    const limit = testRateLimit(createStatsManager(), "d.k", 5);
    const d = create(RateLimitDescriptorSchema, {
      entries: [{ key: "k", value: "v" }],
    });
    // Let the client notice the loss before the request arrives.
    await new Promise((r) => setTimeout(r, 100));
    const pending = cache.doLimit(limitRequest("d", [d], [limit], [1]));
    await server.restart();
    const [status] = await pending;
    expect(status!.limitRemaining).toBe(4);
    await cache.close();
  });
});
