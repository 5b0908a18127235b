import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { setTimeout as delay } from "node:timers/promises";
import { join } from "node:path";
import {
  Code as RpcCode,
  ConnectError,
  createClient,
} from "@connectrpc/connect";
import {
  createConnectTransport,
  createGrpcTransport,
} from "@connectrpc/connect-node";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import {
  AdminService,
  RateLimitResponse_Code as Code,
  RateLimitService,
  type GetCanaryReportResponse,
  type RateLimitResponse,
} from "../../src/proto.js";
import { FakeClock } from "../helpers/fake-clock.js";
import {
  startMemcached,
  type MemcachedServer,
} from "../helpers/memcached-server.js";
import {
  startRedisServer,
  stopAllRedisServers,
  type RedisServer,
} from "../helpers/redis-server.js";
import { windowAlignedClock } from "../helpers/aligned-clock.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";
import { mulberry32 } from "../helpers/seeded-random.js";

// The canary of a real service against a second real service whose live config is the
// candidate: the same seeded requests, at the same (fake) times, go to both over gRPC; the
// canary report of the first (over the admin API on its debug port) must count exactly the
// requests the two answered differently, per rule. One rule per top-level key, so the rule of a
// descriptor is `rl.<its key>`.

const live = `domain: rl
descriptors:
  - key: a
    rate_limit: { unit: minute, requests_per_unit: 6 }
  - key: b
    rate_limit: { unit: minute, requests_per_unit: 4, algorithm: sliding_window }
  - key: c
    rate_limit: { unit: minute, requests_per_unit: 6, algorithm: token_bucket, burst: 3 }
  - key: e
    rate_limit: { unit: minute, requests_per_unit: 2 }
    shadow_mode: true
  - key: f
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: g
    rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: h
    rate_limit: { unit: minute, requests_per_unit: 3 }
`;

const candidate = `domain: rl
descriptors:
  - key: a
    rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: b
    rate_limit: { unit: minute, requests_per_unit: 6, algorithm: sliding_window }
  - key: c
    rate_limit: { unit: minute, requests_per_unit: 6, algorithm: token_bucket, burst: 2 }
  - key: d
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: e
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: f
    rate_limit: { unlimited: true }
  - key: g
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: h
    rate_limit: { unit: minute, requests_per_unit: 3 }
`;

const keys = ["a", "b", "c", "d", "e", "f", "g", "h"];
const start = 1_700_000_000;

/** Per rule: requests the candidate would refuse (+) and admit (−). */
type Changes = Record<string, { refuse: number; admit: number }>;

function admin(t: TestApp) {
  return createClient(
    AdminService,
    createConnectTransport({
      baseUrl: `http://${t.addresses.debug}`,
      httpVersion: "1.1",
    }),
  );
}

function rls(t: TestApp) {
  return createClient(
    RateLimitService,
    createGrpcTransport({ baseUrl: `http://${t.addresses.grpc}` }),
  );
}

function reportChanges(report: GetCanaryReportResponse): Changes {
  return Object.fromEntries(
    report.rules.map((r) => [
      r.rule,
      { refuse: Number(r.wouldRefuse), admit: Number(r.wouldAdmit) },
    ]),
  );
}

/** Rule of the first over-limit descriptor, as the report names it. */
function decidingRule(
  response: RateLimitResponse,
  descriptors: readonly string[],
): string {
  const i = response.statuses.findIndex((s) => s.code === Code.OVER_LIMIT);
  return `rl.${descriptors[i]?.split("=")[0] ?? "?"}`;
}

/**
 * Sends the same seeded stream to both services, moving both fake clocks alike, and returns
 * the differences per rule and the number of requests answered differently.
 *
 * @param pauseMs - a pause after each request (mc: the store's increments land in the
 *   background after the answer, as upstream's do; the next request must read them)
 */
async function sendBoth(
  a: TestApp,
  clockA: FakeClock,
  b: TestApp,
  clockB: FakeClock,
  seed: number,
  requests: number,
  pauseMs = 0,
): Promise<{ changes: Changes; changed: number }> {
  const random = mulberry32(seed);
  const clientA = rls(a);
  const clientB = rls(b);
  const changes: Changes = {};
  let changed = 0;
  for (let n = 0; n < requests; n++) {
    if (random() < 0.15) {
      const step = 1 + Math.floor(random() * 4);
      clockA.seconds += step;
      clockB.seconds += step;
    }
    const count = 1 + Math.floor(random() * 3);
    const descriptors: string[] = [];
    for (let d = 0; d < count; d++)
      descriptors.push(
        `${keys[Math.floor(random() * keys.length)]}=v${Math.floor(random() * 3)}`,
      );
    const request = {
      domain: "rl",
      descriptors: descriptors.map((text) => {
        const [key = "", value = ""] = text.split("=");
        return { entries: [{ key, value }] };
      }),
    };
    const [ra, rb] = await Promise.all([
      clientA.shouldRateLimit(request),
      clientB.shouldRateLimit(request),
    ]);
    if (pauseMs > 0) await delay(pauseMs);
    if (ra.overallCode === rb.overallCode) continue;
    changed++;
    const refuse = rb.overallCode === Code.OVER_LIMIT;
    const rule = decidingRule(refuse ? rb : ra, descriptors);
    const tally = (changes[rule] ??= { refuse: 0, admit: 0 });
    if (refuse) tally.refuse++;
    else tally.admit++;
  }
  return { changes, changed };
}

let apps: TestApp[] = [];
afterEach(async () => {
  await Promise.all(apps.map((t) => t.stop()));
  apps = [];
});

describe("config canary against a second service running the candidate", () => {
  let redis: RedisServer;
  let memcached: MemcachedServer;
  beforeAll(async () => {
    redis = await startRedisServer();
    memcached = await startMemcached();
  });
  afterAll(async () => {
    await stopAllRedisServers();
    await memcached.stop();
  });

  const backends: Record<string, () => Record<string, string>> = {
    memory: () => ({}),
    "kv (redis-server)": () => ({
      BACKEND_TYPE: "kv",
      KV_SOCKET_TYPE: "tcp",
      KV_URL: redis.address,
    }),
    "mc (memcached)": () => ({
      BACKEND_TYPE: "mc",
      MC_HOST_PORT: memcached.address,
    }),
  };

  it.each(Object.keys(backends))(
    "reports per rule exactly what the second service answered differently (%s)",
    async (backend) => {
      const env = backends[backend]!();
      const clockA = new FakeClock(start);
      const clockB = new FakeClock(start);
      // Each service its own keys in the one store.
      const a = await startTestApp(
        { "rl.yaml": live },
        { ...env, CACHE_KEY_PREFIX: "a_" },
        undefined,
        { clock: clockA },
      );
      apps.push(a);
      const b = await startTestApp(
        { "rl.yaml": candidate },
        { ...env, CACHE_KEY_PREFIX: "b_" },
        undefined,
        { clock: clockB },
      );
      apps.push(b);
      const started = await admin(a).startCanary({
        files: [{ name: "rl.yaml", content: candidate }],
      });
      expect(started.domains).toEqual(["rl"]);

      const { changes, changed } = await sendBoth(
        a,
        clockA,
        b,
        clockB,
        7,
        600,
        backend.startsWith("mc") ? 3 : 0,
      );
      const report = await admin(a).getCanaryReport({});
      expect(report.active).toBe(true);
      expect(report.source).toBe("inline");
      expect(report.requests).toBe(600n);
      expect(report.unevaluatedRequests).toBe(0n);
      expect(report.changedRequests).toBe(BigInt(changed));
      expect(reportChanges(report)).toEqual(changes);
      // Both directions, on several rules.
      expect(Object.keys(changes).length).toBeGreaterThan(4);
      expect(changed).toBeGreaterThan(40);

      if (backend.startsWith("kv")) {
        const client = redis.client();
        try {
          // The candidate-only counters are in the store under their own keys; the live
          // counters the candidate shares were charged once, as the second service's were.
          const canaryKeys = await client.keys("a_*|canary");
          expect(canaryKeys.length).toBeGreaterThan(0);
          expect(canaryKeys.every((k) => /^a_rl_[cdg]_/.test(k))).toBe(true);
          const shared = (await client.keys("a_rl_a_*")).sort();
          expect(shared.length).toBeGreaterThan(0);
          for (const key of shared) {
            expect(await client.get(key)).toBe(
              await client.get(`b_${key.slice(2)}`),
            );
          }
        } finally {
          client.disconnect();
        }
      }

      const stopped = await admin(a).stopCanary({});
      expect(stopped.report?.active).toBe(false);
      expect(stopped.report?.changedRequests).toBe(BigInt(changed));
    },
  );
});

describe("config canary admin API", () => {
  it("refuses a candidate that does not load with the loader's file, line and field", async () => {
    const t = await startTestApp({ "rl.yaml": live });
    apps.push(t);
    const bad =
      "domain: rl\ndescriptors:\n  - key: a\n    rate_limit: { unit: minute, requests_per_unt: 3 }\n";
    const error = await admin(t)
      .startCanary({ files: [{ name: "bad.yaml", content: bad }] })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConnectError);
    const connectError = error as ConnectError;
    expect(connectError.code).toBe(RpcCode.InvalidArgument);
    expect(connectError.rawMessage).toMatch(/^bad\.yaml: /);
    expect(connectError.rawMessage).toContain("requests_per_unt");
    expect(connectError.rawMessage).toContain(
      "line 4, field descriptors[0].rate_limit.requests_per_unt",
    );
    // No canary runs; the live config answers as before.
    expect((await admin(t).getCanaryReport({})).active).toBe(false);
    const stop = await admin(t)
      .stopCanary({})
      .catch((e: unknown) => e);
    expect((stop as ConnectError).code).toBe(RpcCode.FailedPrecondition);
  });

  it("starts the canary of CANARY_CONFIG_DIR at start-up and reads a directory given to StartCanary", async () => {
    const root = await mkdtemp(join(tmpdir(), "rls-canary-"));
    try {
      const dir = join(root, "candidate");
      await mkdir(dir);
      await writeFile(join(dir, "rl.yaml"), candidate);
      // Five hits on per-minute rules: a clock 1 s into a minute keeps them in one window.
      const t = await startTestApp(
        { "rl.yaml": live },
        { CANARY_CONFIG_DIR: dir },
        undefined,
        { clock: windowAlignedClock(60) },
      );
      apps.push(t);
      const report = await admin(t).getCanaryReport({});
      expect(report.active).toBe(true);
      expect(report.source).toBe(dir);
      const client = rls(t);
      for (let i = 0; i < 5; i++)
        await client.shouldRateLimit({
          domain: "rl",
          descriptors: [{ entries: [{ key: "a", value: "x" }] }],
        });
      const after = await admin(t).getCanaryReport({});
      expect(reportChanges(after)).toEqual({ "rl.a": { refuse: 2, admit: 0 } });
      expect(after.rules[0]?.top.map((o) => [o.descriptor, o.hits])).toEqual([
        ["a=x", 2n],
      ]);

      // Replaced by a directory given to StartCanary: a fresh report.
      const again = await admin(t).startCanary({ configDir: dir });
      expect(again.domains).toEqual(["rl"]);
      expect((await admin(t).getCanaryReport({})).requests).toBe(0n);
      const missing = await admin(t)
        .startCanary({ configDir: join(root, "nope") })
        .catch((e: unknown) => e);
      expect((missing as ConnectError).code).toBe(RpcCode.InvalidArgument);
      expect((missing as ConnectError).rawMessage).toContain(
        "no config file to load",
      );
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
});
