import { create } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { createSocket } from "node:dgram";
import { afterEach, describe, expect, it, vi } from "vitest";
import { RateLimitRequestSchema, RateLimitService } from "../../src/proto.js";
import { windowAlignedClock } from "../helpers/aligned-clock.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";
import { waitFor } from "../helpers/wait-for.js";

const config = `
domain: rl
descriptors:
  - key: key
    value: value
    rate_limit: { unit: minute, requests_per_unit: 2 }
`;

const request = create(RateLimitRequestSchema, {
  domain: "rl",
  descriptors: [{ entries: [{ key: "key", value: "value" }] }],
});

async function call(t: TestApp, times: number): Promise<void> {
  const client = createClient(
    RateLimitService,
    createGrpcTransport({ baseUrl: `http://${t.addresses.grpc}` }),
  );
  for (let i = 0; i < times; i++) await client.shouldRateLimit(request);
}

const apps: TestApp[] = [];
afterEach(async () => {
  vi.restoreAllMocks();
  for (const t of apps.splice(0)) await t.stop();
});

async function start(env: Record<string, string> = {}): Promise<TestApp> {
  // Counts of hits on a 2-per-minute rule: a clock 1 s into a minute keeps them in one window.
  const t = await startTestApp(
    { "rl.yaml": config },
    { DISABLE_STATS: "false", ...env },
    undefined,
    { clock: windowAlignedClock(60) },
  );
  apps.push(t);
  return t;
}

async function get(t: TestApp, path: string): Promise<Response> {
  return fetch(`http://${t.addresses.debug}${path}`);
}

describe("debug server", () => {
  it("lists its paths, dumps the config and lists every statistic", async () => {
    const t = await start();
    await call(t, 3);
    const index = await (await get(t, "/")).text();
    expect(
      index
        .split("\n")
        .filter(Boolean)
        .map((l) => l.split(":")[0]),
    ).toEqual([
      "/",
      "/debug/pprof/",
      "/debug/pprof/heap",
      "/debug/pprof/profile",
      "/ratelimit.admin.v1.AdminService/",
      "/rlconfig",
      "/stats",
    ]);
    expect(await (await get(t, "/unknown")).text()).toBe(index);
    expect(await (await get(t, "/rlconfig")).text()).toContain(
      "rl.key_value: unit=MINUTE requests_per_unit=2",
    );
    const stats = await (await get(t, "/stats")).text();
    const lines = stats.trimEnd().split("\n");
    expect(lines).toContain(
      "ratelimit.service.rate_limit.rl.key_value.total_hits: 3",
    );
    expect(lines).toContain(
      "ratelimit.service.rate_limit.rl.key_value.over_limit: 1",
    );
    expect(lines).toContain("ratelimit.service.config_load_success: 1");
    expect(
      lines.some((l) =>
        l.startsWith(
          "ratelimit_server.ShouldRateLimit.response_time: count=3 ",
        ),
      ),
    ).toBe(true);
    expect(lines.some((l) => l.startsWith("memstats: {"))).toBe(true);
    const names = lines.map((l) => l.slice(0, l.indexOf(": ")));
    expect(names).toEqual([...names].sort());
    expect(await (await get(t, "/debug/pprof/")).text()).toMatch(
      /profile\?seconds=N/,
    );
  });

  it("returns a CPU profile and a heap profile as V8 JSON", async () => {
    const t = await start();
    const [cpu, heap, busy] = await Promise.all([
      get(t, "/debug/pprof/profile?seconds=1"),
      get(t, "/debug/pprof/heap?seconds=1"),
      // A second CPU profile while one runs is refused.
      new Promise((r) => setTimeout(r, 100)).then(() =>
        get(t, "/debug/pprof/profile?seconds=1"),
      ),
    ]);
    expect(cpu.status).toBe(200);
    expect(cpu.headers.get("content-disposition")).toMatch(/\.cpuprofile"$/);
    const profile = (await cpu.json()) as {
      nodes: unknown[];
      startTime: number;
      endTime: number;
      samples: number[];
    };
    expect(profile.nodes.length).toBeGreaterThan(0);
    expect(profile.endTime - profile.startTime).toBeGreaterThanOrEqual(900_000); // µs
    expect(heap.status).toBe(200);
    const heapProfile = (await heap.json()) as {
      head: { children: unknown[] };
    };
    expect(Array.isArray(heapProfile.head.children)).toBe(true);
    expect(busy.status).toBe(409);
    expect((await get(t, "/debug/pprof/profile?seconds=0")).status).toBe(400);
  });
});

describe("statistics on standard output", () => {
  it("prints one JSON line per statistic per flush when no sink is on (timers summarised)", async () => {
    const written: string[] = [];
    vi.spyOn(process.stdout, "write").mockImplementation(
      (chunk: string | Uint8Array) => {
        written.push(String(chunk));
        return true;
      },
    );
    const t = await start({
      USE_PUSHSTATS: "false",
      DISABLE_STATS: "false",
      STATS_FLUSH_INTERVAL: "100ms",
    });
    await call(t, 2);
    const hits = "ratelimit.service.rate_limit.rl.key_value.total_hits";
    // One write per flush, one JSON line per statistic.
    const parse = () =>
      written
        .filter((w) => w.startsWith("{"))
        .flatMap((w) => w.trimEnd().split("\n"))
        .map(
          (l) =>
            JSON.parse(l) as {
              type: string;
              name: string;
              value: number;
              count: number;
            },
        );
    // The calls may straddle a flush: add up the counter's deltas.
    const records = await waitFor(() => {
      const parsed = parse();
      const total = parsed
        .filter((r) => r.type === "counter" && r.name === hits)
        .reduce((sum, r) => sum + r.value, 0);
      return total === 2 && parsed;
    }, "statistics lines on stdout");
    // The response-time timer: one summary line per flush, counting both calls.
    const timer = records.filter(
      (r) =>
        r.type === "timer" &&
        r.name === "ratelimit_server.ShouldRateLimit.response_time",
    );
    expect(timer.length).toBeGreaterThanOrEqual(1);
    expect(timer.reduce((sum, r) => sum + r.count, 0)).toBe(2);
  });
});

describe("disabled statistics", () => {
  it("sends nothing but still counts for /stats", async () => {
    const received: string[] = [];
    const socket = createSocket("udp4");
    socket.on("message", (m) => received.push(m.toString()));
    await new Promise<void>((r) => socket.bind(0, "127.0.0.1", r));
    try {
      const t = await start({
        DISABLE_STATS: "true",
        USE_PUSHSTATS: "true",
        PUSHSTATS_PROTOCOL: "udp",
        PUSHSTATS_HOST: "127.0.0.1",
        PUSHSTATS_PORT: String(socket.address().port),
        STATS_FLUSH_INTERVAL: "50ms",
      });
      await call(t, 1);
      await new Promise((r) => setTimeout(r, 200));
      await t.stop();
      apps.splice(apps.indexOf(t), 1);
      expect(received).toEqual([]);
    } finally {
      socket.close();
    }
  });

  it("keeps the in-process counters for the debug page", async () => {
    const t = await start({ DISABLE_STATS: "true" });
    await call(t, 1);
    expect(await (await get(t, "/stats")).text()).toContain(
      "ratelimit.service.rate_limit.rl.key_value.total_hits: 1\n",
    );
  });
});
