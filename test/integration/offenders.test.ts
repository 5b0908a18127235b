// Top offenders per rule on a running service (docs/operations.md#top-offenders): a seeded
// skewed load over gRPC, its exact counts kept from the answers, and TopOffenders over Connect
// JSON on the debug port checked against them within the stated bound; on the memory backend
// and on a real redis-server; and the opt-in series on the pull-stats endpoint.

import { create, toJson } from "@bufbuild/protobuf";
import { createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import parsePrometheusTextFormat from "parse-prometheus-text-format";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import {
  AdminService,
  RateLimitRequestSchema,
  RateLimitResponse_Code as Code,
  RateLimitService,
  TopOffendersResponseSchema,
} from "../../src/proto.js";
import { FakeClock } from "../helpers/fake-clock.js";
import {
  startRedisServer,
  stopAllRedisServers,
  track,
} from "../helpers/redis-server.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";
import { freePort } from "../helpers/spawn-service.js";
import { ExactCounts, zipfSampler } from "../helpers/zipf.js";

const config = `
domain: rl
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 30 }
  - key: client
    descriptors:
      - key: path
        rate_limit: { unit: minute, requests_per_unit: 120 }
`;

/** 2026-11-28T00:00:10Z: ten seconds into a minute window. */
const t0 = 1_795_824_010;

/** TopOffenders' answer in proto3 JSON (uint64 as strings, zero fields left out). */
interface TopOffendersJson {
  rules?: {
    rule: string;
    domain: string;
    offenders?: {
      descriptor: string;
      hits: string;
      overLimit?: string;
      error?: string;
    }[];
    since: string;
    hits: string;
    window: string;
    counters: number;
  }[];
}

/** Exact counts per rule stats key, from the answers the service gave. */
type Exact = Map<string, ExactCounts>;

const apps: TestApp[] = [];
afterEach(async () => {
  await Promise.all(apps.splice(0).map((t) => t.stop()));
});
afterAll(async () => {
  await stopAllRedisServers();
});

async function start(
  env: Record<string, string>,
  clock = new FakeClock(t0),
): Promise<{
  t: TestApp;
  clock: FakeClock;
  client: Client<typeof RateLimitService>;
}> {
  const t = await startTestApp({ "rl.yaml": config }, env, undefined, {
    clock,
  });
  apps.push(t);
  const client = createClient(
    RateLimitService,
    createGrpcTransport({ baseUrl: `http://${t.addresses.grpc}` }),
  );
  return { t, clock, client };
}

/**
 * Sends `count` requests of two descriptors each, `user=u<n>` and `client=c<n>,path=/p<n>`,
 * both Zipf-distributed from `seed`, 50 in flight; adds what the answers say to `exact`.
 */
async function drive(
  client: Client<typeof RateLimitService>,
  exact: Exact,
  seed: number,
  count: number,
): Promise<void> {
  const users = zipfSampler(400, 1.1, seed);
  const paths = zipfSampler(300, 1.2, seed + 1);
  const byRule = (rule: string): ExactCounts => {
    let counts = exact.get(rule);
    if (counts === undefined) {
      counts = new ExactCounts();
      exact.set(rule, counts);
    }
    return counts;
  };
  const requests = Array.from({ length: count }, () => {
    const user = `u${users()}`;
    const path = paths();
    return {
      user,
      client: `c${path % 7}`,
      path: `/p${path}`,
    };
  });
  for (let i = 0; i < requests.length; i += 50) {
    await Promise.all(
      requests.slice(i, i + 50).map(async (r) => {
        const response = await client.shouldRateLimit(
          create(RateLimitRequestSchema, {
            domain: "rl",
            descriptors: [
              { entries: [{ key: "user", value: r.user }] },
              {
                entries: [
                  { key: "client", value: r.client },
                  { key: "path", value: r.path },
                ],
              },
            ],
          }),
        );
        const refused = (n: number): number =>
          response.statuses[n]?.code === Code.OVER_LIMIT ? 1 : 0;
        byRule("rl.user").add(`user=${r.user}`, 1, refused(0));
        byRule("rl.client.path").add(
          `client=${r.client},path=${r.path}`,
          1,
          refused(1),
        );
      }),
    );
  }
}

/** TopOffenders over Connect unary JSON on the debug port. */
async function topOffenders(
  t: TestApp,
  body: { domain?: string; k?: number },
): Promise<{
  status: number;
  json: TopOffendersJson & { code?: string; message?: string };
}> {
  const res = await fetch(
    `http://${t.addresses.debug}/ratelimit.admin.v1.AdminService/TopOffenders`,
    {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    },
  );
  return {
    status: res.status,
    json: (await res.json()) as TopOffendersJson & {
      code?: string;
      message?: string;
    },
  };
}

/**
 * Checks one answer against the exact counts: every rule with traffic, each rule's total
 * exact, offenders heaviest first, each estimate within [true, true + error], error within
 * N / m, and every true top-k value above N / m reported.
 */
function expectWithinBound(
  answer: TopOffendersJson,
  exact: Exact,
  k: number,
  m: number,
): void {
  const rules = answer.rules ?? [];
  expect(rules.map((r) => r.rule)).toEqual([...exact.keys()].sort());
  for (const rule of rules) {
    const counts = exact.get(rule.rule)!;
    expect(rule.domain).toBe("rl");
    expect(rule.counters).toBe(m);
    expect(rule.window).toBe("60s");
    expect(Number(rule.hits)).toBe(counts.total);
    const bound = counts.total / m;
    const offenders = rule.offenders ?? [];
    expect(offenders).toHaveLength(Math.min(k, counts.hits.size));
    for (const [i, o] of offenders.entries()) {
      const hits = Number(o.hits);
      const overLimit = Number(o.overLimit ?? "0");
      const error = Number(o.error ?? "0");
      const trueHits = counts.hits.get(o.descriptor) ?? 0;
      const trueOver = counts.overLimit.get(o.descriptor) ?? 0;
      expect(error).toBeLessThanOrEqual(bound);
      expect(hits).toBeGreaterThanOrEqual(trueHits);
      expect(hits).toBeLessThanOrEqual(trueHits + error);
      expect(overLimit).toBeGreaterThanOrEqual(trueOver);
      expect(overLimit).toBeLessThanOrEqual(trueOver + error);
      if (i > 0)
        expect(hits).toBeLessThanOrEqual(Number(offenders[i - 1]!.hits));
    }
    const reported = offenders.map((o) => o.descriptor);
    const heavy = counts
      .ranked()
      .slice(0, k)
      .filter(([, hits]) => hits > bound);
    expect(heavy.length).toBeGreaterThan(0);
    for (const [descriptor] of heavy) expect(reported).toContain(descriptor);
  }
}

describe("TopOffenders on a running service", () => {
  it("matches the exact counts of a skewed load within the bound (memory backend)", async () => {
    const { t, client, clock } = await start({ TOP_OFFENDERS_K: "5" });
    const exact: Exact = new Map();
    await drive(client, exact, 2026, 2000);
    const { status, json } = await topOffenders(t, { domain: "rl", k: 5 });
    expect(status).toBe(200);
    expectWithinBound(json, exact, 5, 50);
    expect(json.rules![0]!.since).toBe("2026-11-27T23:59:00Z");
    // Refusals were counted: the heaviest user is far over 30 a minute.
    expect(
      Number(json.rules!.at(-1)!.offenders![0]!.overLimit),
    ).toBeGreaterThan(0);

    // The next window: the counts cover both.
    clock.seconds = t0 + 60;
    await drive(client, exact, 7, 600);
    expectWithinBound(
      (await topOffenders(t, { domain: "rl" })).json,
      exact,
      5,
      50,
    );

    // k below K answers k; above K, K; another domain, nothing.
    const two = (await topOffenders(t, { domain: "rl", k: 2 })).json;
    expect(two.rules!.map((r) => r.offenders!.length)).toEqual([2, 2]);
    const many = (await topOffenders(t, { k: 100 })).json;
    expect(many.rules!.map((r) => r.offenders!.length)).toEqual([5, 5]);
    expect((await topOffenders(t, { domain: "other" })).json).toEqual({});

    // Two windows without traffic: nothing left.
    clock.seconds = t0 + 180;
    expect((await topOffenders(t, {})).json).toEqual({});
  });

  it("matches the exact counts on a real redis-server", async () => {
    const store = track(await startRedisServer());
    const { t, client } = await start({
      TOP_OFFENDERS_K: "4",
      BACKEND_TYPE: "kv",
      KV_SOCKET_TYPE: "tcp",
      KV_URL: store.address,
    });
    const exact: Exact = new Map();
    await drive(client, exact, 99, 2000);
    const { status, json } = await topOffenders(t, { domain: "rl" });
    expect(status).toBe(200);
    expectWithinBound(json, exact, 4, 40);
  });

  it("answers the same over gRPC on the gRPC port with ADMIN_ENABLED", async () => {
    const { t, client } = await start({
      TOP_OFFENDERS_K: "3",
      ADMIN_ENABLED: "true",
    });
    await drive(client, new Map(), 11, 300);
    const admin = createClient(
      AdminService,
      createGrpcTransport({ baseUrl: `http://${t.addresses.grpc}` }),
    );
    const overGrpc = await admin.topOffenders({ domain: "rl", k: 3 });
    expect(overGrpc.rules.map((r) => r.offenders.length)).toEqual([3, 3]);
    expect(toJson(TopOffendersResponseSchema, overGrpc)).toEqual(
      (await topOffenders(t, { domain: "rl", k: 3 })).json,
    );
  });

  it("answers UNIMPLEMENTED naming TOP_OFFENDERS_K when it is 0", async () => {
    const { t } = await start({ TOP_OFFENDERS_K: "0" });
    const { status, json } = await topOffenders(t, { domain: "rl" });
    expect(status).toBe(501);
    expect(json).toEqual({
      code: "unimplemented",
      message: "top offenders are not tracked: TOP_OFFENDERS_K is 0",
    });
  });
});

describe("top offenders on the pull-stats endpoint", () => {
  async function startPull(metrics: boolean) {
    const port = await freePort();
    const started = await start({
      TOP_OFFENDERS_K: "3",
      TOP_OFFENDERS_METRICS: String(metrics),
      USE_PULLSTATS: "true",
      DISABLE_STATS: "false",
      PULLSTATS_ADDR: `127.0.0.1:${port}`,
    });
    const scrape = async () => {
      const res = await fetch(`http://127.0.0.1:${port}/metrics`);
      expect(res.status).toBe(200);
      return parsePrometheusTextFormat(await res.text());
    };
    return { ...started, scrape };
  }

  /** The series of one family as `rule rank descriptor value` lines. */
  function series(
    families: ReturnType<typeof parsePrometheusTextFormat>,
    name: string,
  ): string[] {
    const family = families.find((f) => f.name === name);
    return (family?.metrics ?? []).map((m) => {
      const labels = m.labels ?? {};
      return `${labels["rule"]} ${labels["rank"]} ${labels["descriptor"]} ${"value" in m ? m.value : ""}`;
    });
  }

  it("shows at most K series per rule, replaced as the top changes", async () => {
    const { t, client, scrape } = await startPull(true);
    const exact: Exact = new Map();
    await drive(client, exact, 5, 1500);
    const api = (await topOffenders(t, { domain: "rl" })).json;
    const expected = api.rules!.flatMap((r) =>
      r.offenders!.map(
        (o, i) => `${r.rule} ${i + 1} ${o.descriptor} ${o.hits}`,
      ),
    );
    const first = await scrape();
    const hits = series(first, "ratelimit_top_offender_hits");
    expect(hits.sort()).toEqual(expected.sort());
    expect(hits).toHaveLength(6); // 3 per rule, 2 rules
    expect(series(first, "ratelimit_top_offender_over_limit").length).toBe(6);

    // A new heaviest user: it takes rank 1, the old rank 3 is gone (no fourth series).
    const before = series(first, "ratelimit_top_offender_hits").filter((s) =>
      s.startsWith("rl.user "),
    );
    for (let i = 0; i < 10; i++) {
      await Promise.all(
        Array.from({ length: 60 }, () =>
          client.shouldRateLimit(
            create(RateLimitRequestSchema, {
              domain: "rl",
              descriptors: [{ entries: [{ key: "user", value: "newcomer" }] }],
            }),
          ),
        ),
      );
    }
    // Replaced, not accumulated: the series are the API's answer again, the newcomer first
    // (600 hits, plus at most the error it inherited), the old third gone.
    const now = (await topOffenders(t, { domain: "rl" })).json;
    const after = series(await scrape(), "ratelimit_top_offender_hits");
    expect(after.sort()).toEqual(
      now
        .rules!.flatMap((r) =>
          r.offenders!.map(
            (o, i) => `${r.rule} ${i + 1} ${o.descriptor} ${o.hits}`,
          ),
        )
        .sort(),
    );
    const users = after.filter((s) => s.startsWith("rl.user "));
    expect(users).toHaveLength(3);
    const newcomer = now.rules!.find((r) => r.rule === "rl.user")!
      .offenders![0]!;
    expect(newcomer.descriptor).toBe("user=newcomer");
    expect(Number(newcomer.hits)).toBeGreaterThanOrEqual(600);
    expect(Number(newcomer.hits)).toBeLessThanOrEqual(
      600 + Number(newcomer.error ?? "0"),
    );
    const oldThird = before.find((s) => s.startsWith("rl.user 3 "))!;
    const oldThirdDescriptor = oldThird.split(" ")[2];
    expect(users.some((s) => s.split(" ")[2] === oldThirdDescriptor)).toBe(
      false,
    );
  });

  it("shows no top-offender series with TOP_OFFENDERS_METRICS=false", async () => {
    const { client, scrape } = await startPull(false);
    await drive(client, new Map(), 5, 300);
    const families = await scrape();
    expect(
      families.filter((f) => f.name.startsWith("ratelimit_top_offender")),
    ).toEqual([]);
    // The reference's series are there.
    expect(
      families.some(
        (f) => f.name === "ratelimit_service_rate_limit_total_hits",
      ),
    ).toBe(true);
  });
});
