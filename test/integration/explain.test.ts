import { create, fromJson, toJson, type JsonObject } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createClient,
  type Transport,
} from "@connectrpc/connect";
import {
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
} from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  DescriptorExplanation_Verdict as Verdict,
  ExplainRequestSchema,
  ExplainResponseSchema,
  ExplainService,
  MatchStep_Outcome as Outcome,
  RateLimitRequestSchema,
  RateLimitResponse_Code as RlCode,
  RateLimitService,
  type ExplainResponse,
} from "../../src/proto.js";
import {
  startMemcached,
  type MemcachedServer,
} from "../helpers/memcached-server.js";
import {
  startRedisServer,
  stopAllRedisServers,
  track,
  type RedisServer,
} from "../helpers/redis-server.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";

const config = `
domain: rl
descriptors:
  - key: category
    value: account
    rate_limit: { unit: hour, requests_per_unit: 3 }
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 100 }
`;

const rlRequest = (hitsAddend = 1) =>
  create(RateLimitRequestSchema, {
    domain: "rl",
    hitsAddend,
    descriptors: [
      { entries: [{ key: "category", value: "account" }] },
      { entries: [{ key: "user", value: "alice" }] },
    ],
  });

type Protocol = "grpc" | "connect" | "grpc-web" | "json";

function transports(t: TestApp): Record<Exclude<Protocol, "json">, Transport> {
  return {
    grpc: createGrpcTransport({ baseUrl: `http://${t.addresses.grpc}` }),
    connect: createConnectTransport({
      baseUrl: `http://${t.addresses.http}`,
      httpVersion: "1.1",
    }),
    "grpc-web": createGrpcWebTransport({
      baseUrl: `http://${t.addresses.http}`,
      httpVersion: "1.1",
    }),
  };
}

async function explainVia(
  t: TestApp,
  protocol: Protocol,
  charge: boolean,
): Promise<ExplainResponse> {
  const message = create(ExplainRequestSchema, {
    request: rlRequest(),
    charge,
  });
  if (protocol === "json") {
    const res = await fetch(`http://${t.addresses.http}/explain`, {
      method: "POST",
      body: JSON.stringify(toJson(ExplainRequestSchema, message)),
    });
    expect(res.status).toBe(200);
    return fromJson(ExplainResponseSchema, (await res.json()) as JsonObject);
  }
  const client = createClient(ExplainService, transports(t)[protocol]);
  return client.explain(message);
}

interface Backend {
  readonly name: "memory" | "kv" | "mc";
  env(): Record<string, string>;
  /** Every counter the backend holds for the test's keys, by cache key. */
  counters(keys: readonly string[]): Promise<Record<string, string | null>>;
  /** Stores a counter directly in the backend (absent for memory). */
  seed?(key: string, value: number): Promise<void>;
}

let redis: RedisServer;
let memcached: MemcachedServer;

beforeAll(async () => {
  redis = track(await startRedisServer());
  // A fresh free port each try: on a loaded machine the first one may be taken meanwhile.
  for (let attempt = 1; ; attempt++) {
    try {
      memcached = await startMemcached();
      break;
    } catch (err) {
      if (attempt === 3) throw err;
    }
  }
});
afterAll(async () => {
  await stopAllRedisServers();
  await (memcached as MemcachedServer | undefined)?.stop();
});

function backends(getApp: () => TestApp): Backend[] {
  return [
    {
      name: "memory",
      env: () => ({ BACKEND_TYPE: "memory" }),
      // The memory backend's counters are read back through Explain itself on the debug port
      // (always on): charge:false reads the map directly.
      async counters(keys) {
        const t = getApp();
        const client = createClient(
          ExplainService,
          createGrpcWebTransport({
            baseUrl: `http://${t.addresses.debug}`,
            httpVersion: "1.1",
          }),
        );
        const r = await client.explain({ request: rlRequest() });
        const out: Record<string, string | null> = {};
        for (const key of keys) {
          const c = r.descriptors.find((d) => d.counter?.key === key)?.counter;
          out[key] = c === undefined ? null : String(c.value);
        }
        return out;
      },
    },
    {
      name: "kv",
      env: () => ({
        BACKEND_TYPE: "kv",
        KV_SOCKET_TYPE: "tcp",
        KV_URL: redis.address,
      }),
      async counters(keys) {
        const admin = redis.client();
        try {
          const values = await admin.mget(...keys);
          return Object.fromEntries(keys.map((k, i) => [k, values[i] ?? null]));
        } finally {
          admin.disconnect();
        }
      },
      async seed(key, value) {
        const admin = redis.client();
        try {
          await admin.set(key, String(value), "EX", 7200);
        } finally {
          admin.disconnect();
        }
      },
    },
    {
      name: "mc",
      env: () => ({ BACKEND_TYPE: "mc", MC_HOST_PORT: memcached.address }),
      async counters(keys) {
        const out: Record<string, string | null> = {};
        for (const key of keys) out[key] = await mcGet(memcached, key);
        return out;
      },
      async seed(key, value) {
        const text = String(value);
        const reply = await mcCommand(
          memcached,
          `set ${key} 0 7200 ${text.length}\r\n${text}\r\n`,
          /\r\n$/,
        );
        expect(reply).toBe("STORED\r\n");
      },
    },
  ];
}

/** Sends one memcached text command over a fresh socket; resolves with the reply. */
async function mcCommand(
  server: MemcachedServer,
  command: string,
  end: RegExp,
): Promise<string> {
  const { createConnection } = await import("node:net");
  return new Promise((resolve, reject) => {
    const socket = createConnection(server.port, server.host);
    let data = "";
    socket.on("data", (chunk) => {
      data += chunk.toString("latin1");
      if (end.test(data)) {
        socket.end();
        resolve(data);
      }
    });
    socket.on("error", reject);
    socket.write(command);
  });
}

/** Reads one key with the memcached text protocol over a fresh socket. */
async function mcGet(
  server: MemcachedServer,
  key: string,
): Promise<string | null> {
  const { createConnection } = await import("node:net");
  return new Promise((resolve, reject) => {
    const socket = createConnection(server.port, server.host);
    let data = "";
    socket.on("data", (chunk) => {
      data += chunk.toString("latin1");
      if (data.endsWith("END\r\n")) {
        socket.end();
        const match = /^VALUE \S+ \d+ \d+\r\n(.*)\r\n/.exec(data);
        resolve(match?.[1]?.trim() ?? null);
      }
    });
    socket.on("error", reject);
    socket.write(`get ${key}\r\n`);
  });
}

let current: TestApp;
for (const backend of backends(() => current)) {
  describe(`Explain on the ${backend.name} backend`, () => {
    let t: TestApp;
    beforeAll(async () => {
      t = await startTestApp(
        { "rl.yaml": config },
        { ...backend.env(), DISABLE_STATS: "true", EXPLAIN_ENABLED: "true" },
      );
      current = t;
    });
    afterAll(async () => {
      await t.stop();
    });

    for (const protocol of ["grpc", "connect", "grpc-web", "json"] as const) {
      it(`explains over ${protocol} without charging, then charges`, async () => {
        current = t;
        const before = await explainVia(t, protocol, false);
        expect(before.charged).toBe(false);
        expect(before.backend).toBe(backend.name);
        const [category, user] = before.descriptors;
        expect(category!.path.map((s) => s.outcome)).toEqual([Outcome.EXACT]);
        expect(category!.path[0]!.node).toBe("rl.category_account");
        expect(category!.path[0]!.source?.name).toBe("rl.yaml");
        expect(category!.path[0]!.source?.line).toBe(4);
        expect(user!.path.map((s) => s.outcome)).toEqual([Outcome.KEY_ONLY]);
        expect(category!.rule?.requestsPerUnit).toBe(3);
        const key = category!.counter!.key;
        expect(key).toMatch(/^rl_category_account_\d+$/);
        const userKey = user!.counter!.key;
        const stored = await backend.counters([key, userKey]);
        const start = stored[key] === null ? 0n : BigInt(stored[key]!);
        expect(category!.counter!.value).toBe(start);

        // A read-only call leaves every counter as it was.
        await explainVia(t, protocol, false);
        expect(await backend.counters([key, userKey])).toEqual(stored);

        const charged = await explainVia(t, protocol, true);
        expect(charged.charged).toBe(true);
        expect(charged.response?.overallCode).toBe(charged.overallCode);
        expect(charged.descriptors[0]!.counter!.value).toBe(start);
        await waitForCounter(backend, key, start + 1n);
      });
    }

    it("reaches OVER_LIMIT and names the deciding descriptor", async () => {
      current = t;
      // Every protocol above charged once: 4 hits > 3 per minute, unless the minute rolled.
      let r = await explainVia(t, "grpc", false);
      for (let i = 0; i < 5 && r.overallCode !== RlCode.OVER_LIMIT; i++) {
        await explainVia(t, "grpc", true);
        r = await explainVia(t, "grpc", false);
      }
      expect(r.overallCode).toBe(RlCode.OVER_LIMIT);
      expect(r.decidingDescriptor).toBe(0);
      expect(r.descriptors[0]!.deciding).toBe(true);
      expect(r.descriptors[0]!.verdict).toBe(Verdict.OVER_LIMIT);
      expect(r.summary).toContain("rl.category_account");
      // ShouldRateLimit agrees.
      const decision = await createClient(
        RateLimitService,
        transports(t).grpc,
      ).shouldRateLimit(
        create(RateLimitRequestSchema, { ...rlRequest(), hitsAddend: 0 }),
      );
      expect(decision.overallCode).toBe(RlCode.OVER_LIMIT);
    });
  });
}

// A sliding window of one hour in an all-or-nothing domain, next to a fixed limit.
const slidingConfig = `
domain: sw
charge: all_or_nothing
descriptors:
  - key: api
    rate_limit: { unit: hour, requests_per_unit: 3, algorithm: sliding_window }
  - key: tenant
    rate_limit: { unit: hour, requests_per_unit: 100 }
`;

const swRequest = () =>
  create(RateLimitRequestSchema, {
    domain: "sw",
    descriptors: [
      { entries: [{ key: "api", value: "v1" }] },
      { entries: [{ key: "tenant", value: "t1" }] },
    ],
  });

for (const backend of backends(() => current)) {
  if (backend.seed === undefined) continue;
  const seed = backend.seed.bind(backend);
  describe(`Explain of a sliding window on the ${backend.name} backend`, () => {
    let t: TestApp;
    beforeAll(async () => {
      t = await startTestApp(
        { "sw.yaml": slidingConfig },
        { ...backend.env(), DISABLE_STATS: "true", EXPLAIN_ENABLED: "true" },
      );
    });
    afterAll(async () => {
      await t.stop();
    });

    it("reads the previous window, predicts every answer, and refuses all-or-nothing without charging", async () => {
      const explain = createClient(ExplainService, transports(t).grpc);
      const rls = createClient(RateLimitService, transports(t).grpc);
      const read = () => explain.explain({ request: swRequest() });
      // Retried once if the hour rolls over in the middle (the keys embed the window start).
      for (let attempt = 1; ; attempt++) {
        const first = await read();
        const api = first.descriptors[0]!;
        expect(api.rule?.slidingWindow).toBe(true);
        expect(api.rule?.allOrNothing).toBe(true);
        expect(first.allOrNothing).toBe(true);
        const c = api.counter!;
        expect(c.key).toMatch(/^sw_api_v1_\d+_s3600$/);
        const start = Number(c.windowStart!.seconds);
        expect(c.previousKey).toBe(`sw_api_v1_${start - 3600}_s3600`);
        // One hit in the previous window weighs 1 for the whole window (ceil).
        await seed(c.previousKey, 1);
        const tenantKey = first.descriptors[1]!.counter!.key;
        const answers: RlCode[] = [];
        let rolled = false;
        for (let i = 0; i < 3; i++) {
          const predicted = await read();
          const p = predicted.descriptors[0]!;
          if (p.counter!.key !== c.key) {
            rolled = true;
            break;
          }
          expect(p.counter!.previousValue).toBe(1n);
          expect(p.counter!.previousWeight).toBe(1n);
          expect(p.counter!.comparedCount).toBe(1n + BigInt(i) + 1n);
          const stored = await backend.counters([c.key, tenantKey]);
          const actual = await rls.shouldRateLimit(swRequest());
          expect(predicted.overallCode).toBe(actual.overallCode);
          expect(
            predicted.descriptors.map((d) => [
              d.status!.code,
              d.status!.limitRemaining,
            ]),
          ).toEqual(actual.statuses.map((s) => [s.code, s.limitRemaining]));
          answers.push(actual.overallCode);
          if (predicted.allOrNothingRefused) {
            // Refused: neither counter moved, the fitting tenant counter included.
            expect(p.verdict).toBe(Verdict.OVER_LIMIT);
            expect(predicted.descriptors[1]!.notes.join("\n")).toContain(
              "all_or_nothing",
            );
            expect(predicted.descriptors[1]!.counter!.valueAfter).toBe(
              predicted.descriptors[1]!.counter!.value,
            );
            expect(await backend.counters([c.key, tenantKey])).toEqual(stored);
          }
        }
        if (rolled && attempt < 2) continue;
        // 1 (previous) + 1, + 2 fit the limit of 3; the third is over and charges nothing.
        expect(answers).toEqual([RlCode.OK, RlCode.OK, RlCode.OVER_LIMIT]);
        return;
      }
    });
  });
}

async function waitForCounter(
  backend: Backend,
  key: string,
  atLeast: bigint,
): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const value = (await backend.counters([key]))[key];
    if (value !== null && value !== undefined && BigInt(value) >= atLeast)
      return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`counter ${key} never reached ${atLeast}`);
}

describe("Explain while EXPLAIN_ENABLED is off", () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ "rl.yaml": config }, { DISABLE_STATS: "true" });
  });
  afterAll(async () => {
    await t.stop();
  });

  it("answers UNIMPLEMENTED over gRPC, naming the setting", async () => {
    const client = createClient(ExplainService, transports(t).grpc);
    const err = await client.explain({ request: rlRequest() }).then(
      () => undefined,
      (e: unknown) => ConnectError.from(e),
    );
    expect(err?.code).toBe(Code.Unimplemented);
    expect(err?.rawMessage).toContain("EXPLAIN_ENABLED");
  });

  it("answers 404 on /explain, naming the setting", async () => {
    const res = await fetch(`http://${t.addresses.http}/explain`, {
      method: "POST",
      body: "{}",
    });
    expect(res.status).toBe(404);
    const body = (await res.json()) as { message: string };
    expect(body.message).toContain("EXPLAIN_ENABLED");
  });

  it("still explains on the debug port over Connect and gRPC-web", async () => {
    for (const make of [createConnectTransport, createGrpcWebTransport]) {
      const client = createClient(
        ExplainService,
        make({ baseUrl: `http://${t.addresses.debug}`, httpVersion: "1.1" }),
      );
      const r = await client.explain({ request: rlRequest() });
      expect(r.descriptors[0]!.rule?.fullKey).toBe("rl.category_account");
    }
  });

  it("serves the console to HTML clients and the plain index to others", async () => {
    const base = `http://${t.addresses.debug}`;
    const html = await fetch(`${base}/`, { headers: { accept: "text/html" } });
    expect(html.headers.get("content-type")).toContain("text/html");
    expect(await html.text()).toContain(
      '<script type="module" src="/console/app.js">',
    );
    const plain = await (await fetch(`${base}/`)).text();
    expect(plain).toContain("/rlconfig:");
    const state = (await (
      await fetch(`${base}/console/state.json`)
    ).json()) as {
      domains: {
        domain: string;
        rules: { fullKey: string; source: { line: number } }[];
      }[];
    };
    expect(state.domains[0]!.rules[0]).toMatchObject({
      fullKey: "rl.category_account",
      source: { line: 4 },
    });
    const js = await fetch(`${base}/console/app.js`);
    // Built by `make build`, which `make test` runs before the tests.
    expect(js.status).toBe(200);
    expect(js.headers.get("content-type")).toContain("javascript");
  });

  it("refuses bad input with ShouldRateLimit's errors", async () => {
    const client = createClient(
      ExplainService,
      createConnectTransport({
        baseUrl: `http://${t.addresses.debug}`,
        httpVersion: "1.1",
      }),
    );
    const err = await client
      .explain({ request: { domain: "", descriptors: [] } })
      .then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
    expect(err?.code).toBe(Code.InvalidArgument);
    expect(err?.rawMessage).toBe("rate limit domain must not be empty");
    // The request bounds of docs/limits.md apply to Explain as to ShouldRateLimit.
    const tooBig = await client
      .explain({
        request: {
          domain: "rl",
          descriptors: [
            {
              entries: [{ key: "category", value: "x" }],
              hitsAddend: 2n ** 53n,
            },
          ],
        },
      })
      .then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
    expect(tooBig?.code).toBe(Code.InvalidArgument);
    expect(tooBig?.rawMessage).toBe(
      "descriptors[0].hits_addend must be at most 9007199254740991 (got 9007199254740992)",
    );
  });
});
