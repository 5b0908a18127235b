import { createSocket } from "node:dgram";
import {
  createServer,
  type AddressInfo,
  type Server,
  type Socket,
} from "node:net";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { pino, type Logger } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import {
  RateLimitResponse_Code as RlCode,
  RateLimitService,
} from "../../src/proto.js";
import { windowAlignedClock } from "../helpers/aligned-clock.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";
import { freePort } from "../helpers/spawn-service.js";
import { waitFor } from "../helpers/wait-for.js";
import { request } from "../helpers/requests.js";

const config = `
domain: rl
descriptors:
  - key: key
    value: value
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: user
    descriptors:
      - key: path
        rate_limit: { unit: minute, requests_per_unit: 100 }
`;

/** A line as received, with the time it arrived. */
interface Received {
  readonly line: string;
  readonly atMs: number;
}

/** A statsd server in the test: TCP or UDP, collecting newline-separated lines. */
interface StatsdListener {
  readonly port: number;
  readonly lines: Received[];
  /** Number of TCP connections accepted. */
  connections: number;
  close(): Promise<void>;
}

async function tcpListener(port = 0): Promise<StatsdListener> {
  const lines: Received[] = [];
  const sockets = new Set<Socket>();
  const listener = {
    port: 0,
    lines,
    connections: 0,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => {
          resolve();
        });
      }),
  };
  const server: Server = createServer((socket) => {
    listener.connections++;
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    let pending = "";
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => {
      pending += chunk;
      const parts = pending.split("\n");
      pending = parts.pop() ?? "";
      for (const line of parts)
        if (line !== "") lines.push({ line, atMs: Date.now() });
    });
  });
  await new Promise<void>((resolve) =>
    server.listen(port, "127.0.0.1", resolve),
  );
  listener.port = (server.address() as AddressInfo).port;
  return listener;
}

async function udpListener(): Promise<StatsdListener> {
  const lines: Received[] = [];
  const socket = createSocket("udp4");
  socket.on("message", (msg) => {
    for (const line of msg.toString("utf8").split("\n"))
      if (line !== "") lines.push({ line, atMs: Date.now() });
  });
  await new Promise<void>((resolve) => socket.bind(0, "127.0.0.1", resolve));
  return {
    port: socket.address().port,
    lines,
    connections: 0,
    close: () =>
      new Promise<void>((resolve) =>
        socket.close(() => {
          resolve();
        }),
      ),
  };
}

function clientOf(t: TestApp) {
  return createClient(
    RateLimitService,
    createGrpcTransport({ baseUrl: `http://${t.addresses.grpc}` }),
  );
}

/** Parses `name:value|type[|@rate][|#tags]`. */
function parseLine(line: string): {
  name: string;
  value: number;
  type: string;
  tags: string[];
} {
  const m = /^([^:]+):([^|]+)\|([a-z]+)(?:\|@[\d.]+)?(?:\|#(.*))?$/.exec(line);
  if (m === null) throw new Error(`not a statsd line: ${line}`);
  return {
    name: m[1]!,
    value: Number(m[2]),
    type: m[3]!,
    tags: m[4] === undefined ? [] : m[4].split(","),
  };
}

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function start(
  env: Record<string, string>,
  logger?: Logger,
): Promise<TestApp> {
  const t = await startTestApp(
    { "rl.yaml": config },
    { STATS_FLUSH_INTERVAL: "100ms", DISABLE_STATS: "false", ...env },
    logger,
    // Counts of hits on a 2-per-minute rule: a clock 1 s into a minute keeps them in one window.
    { clock: windowAlignedClock(60) },
  );
  cleanups.push(() => t.stop());
  return t;
}

describe("push statistics (statsd)", () => {
  it("sends counters as deltas, timers and EXTRA_TAGS over TCP every flush interval", async () => {
    const statsd = await tcpListener();
    cleanups.push(() => statsd.close());
    const t = await start({
      USE_PUSHSTATS: "true",
      PUSHSTATS_HOST: "127.0.0.1",
      PUSHSTATS_PORT: String(statsd.port),
      EXTRA_TAGS: "env:test.eu",
      LOCAL_CACHE_SIZE_IN_BYTES: "1048576",
    });
    const client = clientOf(t);
    const codes: RlCode[] = [];
    for (let i = 0; i < 3; i++)
      codes.push(
        (await client.shouldRateLimit(request("rl", [["key", "value"]])))
          .overallCode,
      );
    expect(codes).toEqual([RlCode.OK, RlCode.OK, RlCode.OVER_LIMIT]);

    const prefix = "ratelimit.service.rate_limit.rl.key_value";
    // Calls may straddle a flush, so add up the deltas of every line of a counter.
    const sum = (name: string, from = 0): number =>
      statsd.lines
        .slice(from)
        .map((r) => parseLine(r.line))
        .filter((p) => p.name === name && p.type === "c")
        .reduce((total, p) => total + p.value, 0);
    const hits = `${prefix}.total_hits.__env=test_eu`;
    await waitFor(() => sum(hits) === 3, `${hits} adding up to 3`);
    await waitFor(
      () =>
        sum("ratelimit_server.ShouldRateLimit.total_requests.__env=test_eu") ===
        3,
      "total_requests adding up to 3",
    );
    expect(sum(`${prefix}.over_limit.__env=test_eu`)).toBe(1);
    expect(sum(`${prefix}.within_limit.__env=test_eu`)).toBe(2);
    expect(statsd.lines.map((r) => r.line)).toContain(
      "ratelimit.service.config_load_success.__env=test_eu:1|c",
    );
    const times = statsd.lines
      .map((r) => parseLine(r.line))
      .filter(
        (p) =>
          p.name ===
          "ratelimit_server.ShouldRateLimit.response_time.__env=test_eu",
      );
    expect(times).toHaveLength(3);
    expect(times.every((p) => p.type === "ms" && p.value >= 0)).toBe(true);

    // Delta semantics: nothing more for this counter until new hits, then only the new ones.
    const seenAt = statsd.lines.length;
    await new Promise((r) => setTimeout(r, 250));
    expect(sum(hits, seenAt)).toBe(0);
    const calledAt = Date.now();
    await client.shouldRateLimit(request("rl", [["key", "value"]]));
    const got = await waitFor(
      () => statsd.lines.slice(seenAt).find((r) => r.line === `${hits}:1|c`),
      "the next total_hits delta",
    );
    // It arrives within about one flush interval.
    expect(got.atMs - calledAt).toBeLessThan(1000);
    // config_load_success changed once, so it was sent once.
    expect(
      statsd.lines.filter((r) =>
        r.line.startsWith("ratelimit.service.config_load_success"),
      ),
    ).toHaveLength(1);
    // Gauges go out on every flush, ~100 ms apart.
    const gaugeTimes = statsd.lines
      .filter((r) =>
        r.line.startsWith("ratelimit.localcache.entryCount.__env=test_eu:"),
      )
      .map((r) => r.atMs);
    expect(gaugeTimes.length).toBeGreaterThanOrEqual(4);
    const gaps = gaugeTimes.slice(1).map((at, i) => at - gaugeTimes[i]!);
    const meanGap = gaps.reduce((a, b) => a + b, 0) / gaps.length;
    expect(meanGap).toBeGreaterThan(60);
    expect(meanGap).toBeLessThan(300);
    expect(statsd.connections).toBe(1);
  });

  it("retries a refused TCP connection without failing decisions", async () => {
    const port = await freePort();
    const warnings: string[] = [];
    const logger = pino(
      { level: "warn" },
      { write: (line: string) => warnings.push(line) },
    );
    const t = await start(
      {
        USE_PUSHSTATS: "true",
        PUSHSTATS_HOST: "127.0.0.1",
        PUSHSTATS_PORT: String(port),
      },
      logger,
    );
    const client = clientOf(t);
    for (let i = 0; i < 2; i++)
      expect(
        (await client.shouldRateLimit(request("rl", [["key", "value"]])))
          .overallCode,
      ).toBe(RlCode.OK);
    await new Promise((r) => setTimeout(r, 350)); // a few failed flushes
    const failures = warnings.filter((w) =>
      w.includes("not delivered to the push sink"),
    );
    // Logged at most once per flush (~100 ms), never per value.
    expect(failures.length).toBeGreaterThanOrEqual(1);
    expect(failures.length).toBeLessThanOrEqual(5);
    const statsd = await tcpListener(port);
    cleanups.push(() => statsd.close());
    await client.shouldRateLimit(request("rl", [["key", "value"]]));
    await waitFor(
      () =>
        statsd.lines.some((r) =>
          r.line.startsWith("ratelimit_server.ShouldRateLimit.response_time:"),
        ),
      "statistics after the statsd server came up",
      3000,
    );
    expect(statsd.connections).toBe(1);
  });

  it("sends the same lines over UDP", async () => {
    const statsd = await udpListener();
    cleanups.push(() => statsd.close());
    const t = await start({
      USE_PUSHSTATS: "true",
      PUSHSTATS_HOST: "127.0.0.1",
      PUSHSTATS_PORT: String(statsd.port),
      PUSHSTATS_PROTOCOL: "udp",
    });
    await clientOf(t).shouldRateLimit(
      request("rl", [
        ["user", "u1"],
        ["path", "/a"],
      ]),
    );
    const line = "ratelimit.service.rate_limit.rl.user.path.total_hits:1|c";
    await waitFor(() => statsd.lines.some((r) => r.line === line), line);
  });
});

describe("tagged push statistics", () => {
  it("splits tags off, applies the first matching mogrifier and sends DogStatsD tags", async () => {
    const statsd = await udpListener();
    cleanups.push(() => statsd.close());
    const t = await start({
      USE_PUSHSTATS: "false",
      USE_TAGGED_PUSHSTATS: "true",
      PUSHSTATS_HOST: "127.0.0.1",
      PUSHSTATS_PORT: String(statsd.port),
      EXTRA_TAGS: "env:test",
      TAGGED_PUSHSTATS_MOGRIFIERS: "rule,server",
      TAGGED_PUSHSTATS_MOGRIFIERS_rule_PATTERN: String.raw`^ratelimit\.service\.rate_limit\.([^.]+)\.(.+)\.([a-z_]+)$`,
      TAGGED_PUSHSTATS_MOGRIFIERS_rule_NAME: "ratelimit.service.rate_limit.$3",
      TAGGED_PUSHSTATS_MOGRIFIERS_rule_TAGS: "domain:$1,descriptor:$2",
      // The spec's worked-example spelling.
      TAGGED_PUSHSTATS_MOGRIFIER_server_PATTERN: String.raw`^ratelimit_server\.([^.]+)\.(.+)$`,
      TAGGED_PUSHSTATS_MOGRIFIER_server_NAME: "ratelimit_server.$2",
      TAGGED_PUSHSTATS_MOGRIFIER_server_TAGS: "grpc_method:$1",
    });
    await clientOf(t).shouldRateLimit(request("rl", [["key", "value"]]));
    const hit = await waitFor(
      () =>
        statsd.lines
          .map((r) => parseLine(r.line))
          .find((p) => p.name === "ratelimit.service.rate_limit.total_hits"),
      "a mogrified total_hits line",
    );
    expect(hit).toEqual({
      name: "ratelimit.service.rate_limit.total_hits",
      value: 1,
      type: "c",
      tags: ["env:test", "domain:rl", "descriptor:key_value"],
    });
    const parsed = statsd.lines.map((r) => parseLine(r.line));
    expect(parsed).toContainEqual({
      name: "ratelimit_server.total_requests",
      value: 1,
      type: "c",
      tags: ["env:test", "grpc_method:ShouldRateLimit"],
    });
    const time = parsed.find(
      (p) => p.name === "ratelimit_server.response_time",
    );
    expect(time?.type).toBe("ms");
    expect(Number.isInteger(time?.value)).toBe(true);
    expect(parsed).toContainEqual({
      name: "ratelimit.service.config_load_success",
      value: 1,
      type: "c",
      tags: ["env:test"],
    });
  });
});
