import { randomBytes } from "node:crypto";
import { createServer, type AddressInfo, type Socket } from "node:net";
import { join, relative } from "node:path";
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  RateLimitRequestSchema,
  RateLimitResponseSchema,
  RateLimitResponse_Code,
  type RateLimitResponse,
} from "../../src/proto.js";
import {
  startOtlpGrpcReceiver,
  startOtlpHttpReceiver,
  type OtlpReceiver,
  type ReceivedSpan,
} from "../helpers/otlp-receivers.js";
import {
  freePort,
  repoRoot,
  spawnNode,
  type Spawned,
} from "../helpers/spawn-service.js";
import { waitFor } from "../helpers/wait-for.js";
import { minuteWithRoom } from "../helpers/windows.js";
import { request } from "../helpers/requests.js";

// The built service (dist/) as a child process (the SDK registers process-wide globals),
// exporting to OTLP receivers that run in this test. RATELIMIT_DIST points at another build.
const mainJs = join(
  relative(repoRoot, process.env["RATELIMIT_DIST"] ?? join(repoRoot, "dist")),
  "src",
  "main.js",
);

const grpcSpanName =
  "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
const backendSpanName = "ratelimit.backend doLimit";
const kind = { internal: 1, server: 2, client: 3 } as const;

interface Service {
  readonly process: Spawned;
  readonly grpcAddress: string;
  readonly httpUrl: string;
  /** SIGTERM, then the exit code. */
  stop(): Promise<number | string>;
}

async function startService(env: Record<string, string>): Promise<Service> {
  const http = await freePort();
  const grpcPort = await freePort();
  const debug = await freePort();
  const p = spawnNode(mainJs, [], {
    BACKEND_TYPE: "memory",
    HOST: "127.0.0.1",
    PORT: String(http),
    GRPC_HOST: "127.0.0.1",
    GRPC_PORT: String(grpcPort),
    DEBUG_HOST: "127.0.0.1",
    DEBUG_PORT: String(debug),
    RUNTIME_ROOT: join(repoRoot, "examples"),
    RUNTIME_SUBDIRECTORY: "",
    RUNTIME_WATCH_ROOT: "false",
    LOG_LEVEL: "info",
    LOG_FORMAT: "json",
    ...env,
  });
  await waitFor(
    () => p.output().includes("ratelimit started") || p.child.exitCode !== null,
    "the service to listen",
    20_000,
  );
  if (p.child.exitCode !== null)
    throw new Error(`service exited:\n${p.output()}`);
  return {
    process: p,
    grpcAddress: `127.0.0.1:${grpcPort}`,
    httpUrl: `http://127.0.0.1:${http}`,
    stop: () => {
      if (p.child.exitCode === null) p.child.kill("SIGTERM");
      return p.exited;
    },
  };
}

/** A W3C trace context of a (pretend) caller. */
interface Caller {
  readonly traceId: string;
  readonly spanId: string;
  readonly traceparent: string;
}
function caller(sampled = true): Caller {
  const traceId = randomBytes(16).toString("hex");
  const spanId = randomBytes(8).toString("hex");
  return {
    traceId,
    spanId,
    traceparent: `00-${traceId}-${spanId}-${sampled ? "01" : "00"}`,
  };
}

const account = request("rl", [["category", "account"]]);

/** Unary gRPC ShouldRateLimit with grpc-js (served by the HTTP/2 fast path). */
function grpcCall(
  address: string,
  message: ReturnType<typeof request>,
  traceparent?: string,
): Promise<{ response?: RateLimitResponse; code: grpc.status }> {
  const client = new grpc.Client(address, grpc.credentials.createInsecure());
  const metadata = new grpc.Metadata();
  if (traceparent !== undefined) metadata.set("traceparent", traceparent);
  return new Promise((resolve) => {
    client.makeUnaryRequest(
      `/${grpcSpanName}`,
      (r: typeof message) => Buffer.from(toBinary(RateLimitRequestSchema, r)),
      (b: Buffer) => fromBinary(RateLimitResponseSchema, b),
      message,
      metadata,
      (err, response) => {
        client.close();
        resolve(
          err !== null
            ? { code: err.code }
            : {
                code: grpc.status.OK,
                ...(response !== undefined ? { response } : {}),
              },
        );
      },
    );
  });
}

/** ShouldRateLimit in the Connect protocol (JSON) on the HTTP/1.1 port: the Connect router. */
async function connectCall(
  service: Service,
  traceparent: string,
): Promise<string> {
  const res = await fetch(`${service.httpUrl}/${grpcSpanName}`, {
    method: "POST",
    headers: { "content-type": "application/json", traceparent },
    body: JSON.stringify({
      domain: "rl",
      descriptors: [{ entries: [{ key: "category", value: "account" }] }],
    }),
  });
  const body = (await res.json()) as { overallCode?: string };
  return body.overallCode ?? "";
}

async function jsonCall(
  service: Service,
  traceparent?: string,
): Promise<number> {
  const res = await fetch(`${service.httpUrl}/json`, {
    method: "POST",
    headers: traceparent !== undefined ? { traceparent } : {},
    body: JSON.stringify({
      domain: "rl",
      descriptors: [{ entries: [{ key: "category", value: "account" }] }],
    }),
  });
  await res.arrayBuffer();
  return res.status;
}

function one(spans: ReceivedSpan[], what: string): ReceivedSpan {
  expect(spans, what).toHaveLength(1);
  return spans[0]!;
}
const serverSpanOf = (
  spans: ReceivedSpan[],
  traceId: string,
  name: string,
): ReceivedSpan =>
  one(
    spans.filter((s) => s.traceId === traceId && s.name === name),
    `${name} span of trace ${traceId}`,
  );
const backendSpanOf = (
  spans: ReceivedSpan[],
  server: ReceivedSpan,
): ReceivedSpan =>
  one(
    spans.filter(
      (s) => s.name === backendSpanName && s.parentSpanId === server.spanId,
    ),
    `backend span under ${server.name}`,
  );

function expectBackendChild(spans: ReceivedSpan[], server: ReceivedSpan): void {
  const backend = backendSpanOf(spans, server);
  expect(backend).toMatchObject({
    traceId: server.traceId,
    kind: kind.internal,
    scope: "ratelimit.service",
    attributes: { "ratelimit.backend": "memory" },
  });
}

function jsonLogLines(output: string): Record<string, unknown>[] {
  return output
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

describe("tracing over OTLP/HTTP at rate 1", () => {
  let receiver: OtlpReceiver;
  let service: Service;
  const viaFastPath = caller();
  const viaConnect = caller();
  const viaJson = caller();
  const overLimit = caller();
  const invalid = caller();
  let exitCode: number | string;
  let exportsBeforeShutdown: number;

  beforeAll(async () => {
    receiver = await startOtlpHttpReceiver();
    service = await startService({
      TRACING_ENABLED: "true",
      TRACING_SERVICE_NAME: "rls-test",
      TRACING_SERVICE_NAMESPACE: "edge",
      TRACING_SERVICE_INSTANCE_ID: "instance-7",
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
      // Nothing is exported on a timer: every span below arrives in the shutdown flush.
      OTEL_BSP_SCHEDULE_DELAY: "60000",
    });
    const root = await grpcCall(
      service.grpcAddress,
      request("rl", [["category", "account"]], [["path", "/api/v1/x"]]),
    );
    expect(root.response?.overallCode).toBe(RateLimitResponse_Code.OK);
    const traced = await grpcCall(
      service.grpcAddress,
      account,
      viaFastPath.traceparent,
    );
    expect(traced.response?.overallCode).toBe(RateLimitResponse_Code.OK);
    expect(await connectCall(service, viaConnect.traceparent)).toBe("OK");
    expect(await jsonCall(service, viaJson.traceparent)).toBe(200);
    // Limit 1/min: the second call is over the limit (both in one minute of the service's
    // clock, which the test cannot shift: it waits until the minute has room).
    await minuteWithRoom(2);
    const once = request("rl", [
      ["foo", `f${Date.now()}`],
      ["bar", "bkthomps"],
    ]);
    await grpcCall(service.grpcAddress, once);
    const over = await grpcCall(
      service.grpcAddress,
      once,
      overLimit.traceparent,
    );
    expect(over.response?.overallCode).toBe(RateLimitResponse_Code.OVER_LIMIT);
    const bad = await grpcCall(
      service.grpcAddress,
      request("", [["category", "account"]]),
      invalid.traceparent,
    );
    expect(bad.code).toBe(grpc.status.INVALID_ARGUMENT);
    exportsBeforeShutdown = receiver.requests();
    exitCode = await service.stop();
  });

  afterAll(async () => {
    await service.stop();
    await receiver.close();
  });

  it("logs the start-up line and flushes every span on shutdown", () => {
    const started = jsonLogLines(service.process.output()).find(
      (l) => l["@message"] === "tracer provider initialized",
    );
    expect(started).toMatchObject({
      protocol: "http",
      serviceName: "rls-test",
      serviceNamespace: "edge",
      serviceInstanceId: "instance-7",
      samplingRate: 1,
    });
    expect(exportsBeforeShutdown).toBe(0);
    expect(exitCode).toBe(0);
    expect(receiver.contentTypes[0]).toMatch(/^application\/json/);
    // 7 calls, each a server span with one backend span, except the invalid one (no backend).
    expect(receiver.spans.filter((s) => s.kind === kind.server)).toHaveLength(
      7,
    );
    expect(
      receiver.spans.filter((s) => s.name === backendSpanName),
    ).toHaveLength(6);
  });

  it("sets the resource attributes", () => {
    for (const span of receiver.spans) {
      expect(span.resource).toMatchObject({
        "service.name": "rls-test",
        "service.namespace": "edge",
        "service.instance.id": "instance-7",
      });
    }
  });

  it("starts a root server span with a backend child for a call without traceparent", () => {
    const root = one(
      receiver.spans.filter(
        (s) =>
          s.kind === kind.server &&
          s.attributes["ratelimit.descriptor_count"] === 2,
      ),
      "the root call",
    );
    expect(root).toMatchObject({
      name: grpcSpanName,
      parentSpanId: "",
      scope: "ratelimit.server",
      attributes: {
        "rpc.system": "grpc",
        "rpc.service": "envoy.service.ratelimit.v3.RateLimitService",
        "rpc.method": "ShouldRateLimit",
        "rpc.grpc.status_code": 0,
        "ratelimit.domain": "rl",
        "ratelimit.overall_code": "OK",
      },
      status: { code: 0 },
    });
    expectBackendChild(receiver.spans, root);
  });

  it("continues the caller's trace on the gRPC fast path", () => {
    const span = serverSpanOf(
      receiver.spans,
      viaFastPath.traceId,
      grpcSpanName,
    );
    expect(span.parentSpanId).toBe(viaFastPath.spanId);
    expect(span.kind).toBe(kind.server);
    expect(span.attributes["ratelimit.descriptor_count"]).toBe(1);
    expectBackendChild(receiver.spans, span);
  });

  it("continues the caller's trace through the Connect router", () => {
    const span = serverSpanOf(receiver.spans, viaConnect.traceId, grpcSpanName);
    expect(span.parentSpanId).toBe(viaConnect.spanId);
    expect(span.attributes["ratelimit.overall_code"]).toBe("OK");
    expectBackendChild(receiver.spans, span);
  });

  it("names the /json span POST /json and continues the caller's trace", () => {
    const span = serverSpanOf(receiver.spans, viaJson.traceId, "POST /json");
    expect(span).toMatchObject({
      parentSpanId: viaJson.spanId,
      kind: kind.server,
      scope: "ratelimit.server",
      attributes: {
        "http.request.method": "POST",
        "http.route": "/json",
        "http.response.status_code": 200,
        "ratelimit.domain": "rl",
        "ratelimit.descriptor_count": 1,
        "ratelimit.overall_code": "OK",
      },
    });
    expectBackendChild(receiver.spans, span);
  });

  it("records OVER_LIMIT as the overall code", () => {
    const span = serverSpanOf(receiver.spans, overLimit.traceId, grpcSpanName);
    expect(span.attributes["ratelimit.overall_code"]).toBe("OVER_LIMIT");
    expect(span.status.code).toBe(0);
  });

  it("records the gRPC code of a rejected request, without a backend span", () => {
    const span = serverSpanOf(receiver.spans, invalid.traceId, grpcSpanName);
    expect(span.attributes["rpc.grpc.status_code"]).toBe(
      grpc.status.INVALID_ARGUMENT,
    );
    expect(span.attributes["ratelimit.overall_code"]).toBeUndefined();
    // A client error leaves the status unset (OpenTelemetry gRPC server conventions).
    expect(span.status.code).toBe(0);
    expect(
      receiver.spans.filter((s) => s.parentSpanId === span.spanId),
    ).toHaveLength(0);
  });
});

describe("tracing over OTLP/gRPC", () => {
  let receiver: OtlpReceiver;
  let service: Service;
  const sampled = caller();
  const notSampled = caller(false);

  beforeAll(async () => {
    receiver = await startOtlpGrpcReceiver();
    service = await startService({
      TRACING_ENABLED: "true",
      TRACING_EXPORTER_PROTOCOL: "grpc",
      TRACING_SERVICE_INSTANCE_ID: "instance-g",
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
      OTEL_BSP_SCHEDULE_DELAY: "100",
    });
  });

  afterAll(async () => {
    await service.stop();
    await receiver.close();
  });

  it("exports server and backend spans as protobuf while running", async () => {
    await grpcCall(service.grpcAddress, account, sampled.traceparent);
    expect(await jsonCall(service, sampled.traceparent)).toBe(200);
    await grpcCall(service.grpcAddress, account, notSampled.traceparent);
    await waitFor(
      () => receiver.spans.length >= 4,
      "4 spans at the gRPC receiver",
      10_000,
    );
    const grpcSpan = serverSpanOf(
      receiver.spans,
      sampled.traceId,
      grpcSpanName,
    );
    expect(grpcSpan).toMatchObject({
      parentSpanId: sampled.spanId,
      kind: kind.server,
      attributes: {
        "rpc.method": "ShouldRateLimit",
        "ratelimit.domain": "rl",
        "ratelimit.descriptor_count": 1,
        "ratelimit.overall_code": "OK",
      },
    });
    expectBackendChild(receiver.spans, grpcSpan);
    const jsonSpan = serverSpanOf(
      receiver.spans,
      sampled.traceId,
      "POST /json",
    );
    expect(jsonSpan.parentSpanId).toBe(sampled.spanId);
    expectBackendChild(receiver.spans, jsonSpan);
    expect(receiver.spans[0]!.resource).toMatchObject({
      "service.name": "RateLimit",
      "service.instance.id": "instance-g",
    });
    // An empty namespace is left out.
    expect(receiver.spans[0]!.resource["service.namespace"]).toBeUndefined();
  });

  it("follows a caller that did not sample", async () => {
    expect(await service.stop()).toBe(0);
    expect(receiver.spans.some((s) => s.traceId === notSampled.traceId)).toBe(
      false,
    );
    expect(receiver.spans).toHaveLength(4);
  });
});

describe("tracing at rate 0", () => {
  let receiver: OtlpReceiver;
  let service: Service;

  beforeAll(async () => {
    receiver = await startOtlpHttpReceiver();
    service = await startService({
      TRACING_ENABLED: "true",
      TRACING_SAMPLING_RATE: "0",
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
      OTEL_BSP_SCHEDULE_DELAY: "60000",
    });
  });

  afterAll(async () => {
    await service.stop();
    await receiver.close();
  });

  it("samples no new trace but follows a sampled caller", async () => {
    const sampled = caller();
    expect(
      (await grpcCall(service.grpcAddress, account)).response?.overallCode,
    ).toBe(RateLimitResponse_Code.OK);
    expect(await jsonCall(service)).toBe(200);
    await grpcCall(service.grpcAddress, account, sampled.traceparent);
    expect(await service.stop()).toBe(0);
    expect(receiver.spans.map((s) => s.traceId)).toEqual([
      sampled.traceId,
      sampled.traceId,
    ]);
  });
});

describe("tracing with a failing collector", () => {
  it("keeps deciding and logs the export failure when the collector is down", async () => {
    const closedPort = await freePort();
    const service = await startService({
      TRACING_ENABLED: "true",
      OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${closedPort}`,
      OTEL_EXPORTER_OTLP_TIMEOUT: "300",
      OTEL_BSP_SCHEDULE_DELAY: "50",
    });
    try {
      for (let i = 0; i < 3; i++) {
        expect(await jsonCall(service)).toBe(200);
        await new Promise((r) => setTimeout(r, 100));
      }
      const logged = await waitFor(
        () =>
          jsonLogLines(service.process.output()).find(
            (l) => l["component"] === "tracing" && l["level"] === "error",
          ),
        "an export error in the log",
      );
      expect(logged["@message"]).toContain("ECONNREFUSED");
      expect(await service.stop()).toBe(0);
    } finally {
      await service.stop();
    }
  });

  it("stops within the 5 s bound when the collector never answers", async () => {
    const sockets: Socket[] = [];
    const blackHole = createServer((socket) => {
      sockets.push(socket);
    });
    await new Promise<void>((resolve) => {
      blackHole.listen(0, "127.0.0.1", resolve);
    });
    const { port } = blackHole.address() as AddressInfo;
    const service = await startService({
      TRACING_ENABLED: "true",
      OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`,
      OTEL_BSP_SCHEDULE_DELAY: "60000",
    });
    try {
      expect(await jsonCall(service)).toBe(200);
      const start = Date.now();
      expect(await service.stop()).toBe(0);
      const elapsed = Date.now() - start;
      expect(elapsed).toBeGreaterThan(4000);
      expect(elapsed).toBeLessThan(8000);
      expect(service.process.output()).toContain("tracing shutdown timed out");
    } finally {
      await service.stop();
      for (const socket of sockets) socket.destroy();
      blackHole.close();
    }
  });
});

describe("tracing disabled", () => {
  it("logs it and exports nothing", async () => {
    const receiver = await startOtlpHttpReceiver();
    const service = await startService({
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
    });
    try {
      await grpcCall(service.grpcAddress, account, caller().traceparent);
      expect(await jsonCall(service, caller().traceparent)).toBe(200);
      expect(await service.stop()).toBe(0);
      expect(
        jsonLogLines(service.process.output()).some(
          (l) => l["@message"] === "tracing disabled",
        ),
      ).toBe(true);
      expect(receiver.requests()).toBe(0);
    } finally {
      await service.stop();
      await receiver.close();
    }
  });
});
