import { EventEmitter } from "node:events";
import { mkdtemp, mkdir, rm, writeFile } from "node:fs/promises";
import { readFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import {
  connect,
  type ClientHttp2Session,
  type IncomingHttpHeaders,
} from "node:http2";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gunzipSync, gzipSync } from "node:zlib";
import { create, fromBinary, fromJson, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createConnectRouter } from "@connectrpc/connect";
import {
  createAsyncIterable,
  type UniversalHandler,
} from "@connectrpc/connect/protocol";
import { compressionBrotli, compressionGzip } from "@connectrpc/connect-node";
import fc from "fast-check";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  RateLimitRequestSchema,
  RateLimitResponseSchema,
  RateLimitResponse_Code,
  type RateLimitResponse,
} from "../../src/proto.js";
import { decodeUnaryEnvelope } from "../../src/server/grpc/envelope.js";
import { remapDecodeErrors } from "../../src/server/connect-handler.js";
import { createJsonHandler } from "../../src/server/json-handler.js";
import { createRoutes } from "../../src/server/routes.js";
import {
  createShouldRateLimitHandler,
  type ShouldRateLimitHandler,
} from "../../src/server/should-rate-limit-handler.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";
import { freePort, spawnNode, type Spawned } from "../helpers/spawn-service.js";
import { waitFor } from "../helpers/wait-for.js";
import {
  encodeRequest,
  envelope,
  fuzzDomain,
  grpcFrame,
  jsonBody,
  maxGrpcMessageBytes,
  protoBody,
  splitBody,
  type GrpcFrameInput,
} from "./generators.js";

// The fuzz corpus (issue 16): seeded hostile inputs through every way a request comes in.
// Most inputs run in process through the same decoding and handler code the servers call;
// a smaller share goes over real sockets to a spawned service process. Invariants: every
// answer is a valid gRPC status or an HTTP response with a JSON error body, no bug (INTERNAL
// from an unexpected error, an error log), the process keeps running, RSS stays bounded, and a
// normal call after each batch gets the right decision. Reproduce a failure with FUZZ_SEED.

const seed = Number(
  process.env["FUZZ_SEED"] ?? Math.floor(Math.random() * 2 ** 31),
);
/** Multiplies every count (FUZZ_SCALE=0.1 for a quick run, 10 for a long one). */
const scale = Number(process.env["FUZZ_SCALE"] ?? 1);
const runs = (n: number): number => Math.max(10, Math.round(n * scale));
/** Inputs per in-process path (fast path decoder, Connect router, /json). */
const inProcessRuns = {
  grpc: runs(70_000),
  router: runs(15_000),
  json: runs(20_000),
};
/** Inputs over sockets to the spawned process, per path. */
const networkRuns = { grpc: runs(2400), router: runs(1200), json: runs(1600) };
const batches = 10;

const config = `
domain: ${fuzzDomain}
descriptors:
  - key: a
    rate_limit: { unit: second, requests_per_unit: 5 }
  - key: path
    descriptors:
      - key: remote_address
        rate_limit: { unit: minute, requests_per_unit: 100 }
  - key: b
    value: "1"
    rate_limit: { unlimited: true }
  - key: fuzz_probe
    rate_limit: { unit: hour, requests_per_unit: 3 }
`;

const shouldRateLimitPath =
  "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/** Says which input failed and how to replay it. */
function where(
  path: string,
  batch: number,
  index: number,
  input: Uint8Array,
): string {
  const hex = Buffer.from(input.subarray(0, 256)).toString("hex");
  return `FUZZ_SEED=${seed} path=${path} batch=${batch} input=${index} (${input.length} bytes, first 256 hex: ${hex})`;
}

/** Inputs of one batch: the seed is offset per path and batch so each batch is replayable. */
function sample<T>(
  arb: fc.Arbitrary<T>,
  salt: number,
  batch: number,
  runs: number,
): T[] {
  return fc.sample(arb, { seed: seed + salt * 1000 + batch, numRuns: runs });
}

// gRPC codes a hostile request may get. INTERNAL only for the protocol errors that the gRPC
// spec puts there (a compressed flag without an encoding, invalid flag bits).
const grpcInputCodes = new Set<number>([
  Code.InvalidArgument,
  Code.Unimplemented,
  Code.ResourceExhausted,
  Code.Internal,
]);
const internalProtocolMessage =
  /compress|envelope flags|invalid envelope|protocol error/i;

function checkGrpcError(code: number, message: string, at: string): void {
  expect(
    grpcInputCodes.has(code),
    `grpc-status ${code} "${message}" at ${at}`,
  ).toBe(true);
  expect(message.length, `empty grpc-message at ${at}`).toBeGreaterThan(0);
  if (code === (Code.Internal as number))
    expect(message, `INTERNAL at ${at}`).toMatch(internalProtocolMessage);
}

function checkDecision(response: RateLimitResponse, at: string): void {
  expect(
    [RateLimitResponse_Code.OK, RateLimitResponse_Code.OVER_LIMIT],
    `overall code at ${at}`,
  ).toContain(response.overallCode);
}

const connectCodeWords = new Map(
  Object.values(Code)
    .filter((v): v is Code => typeof v === "number")
    .map((code) => [
      Code[code].replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase(),
      code,
    ]),
);

/** A JSON error body `{code, message}` with a known code word; returns the code. */
function checkJsonError(body: Buffer, at: string): Code {
  let parsed: unknown;
  expect(() => {
    parsed = JSON.parse(body.toString("utf8")) as unknown;
  }, `JSON error body at ${at}: ${body.toString()}`).not.toThrow();
  const error = parsed as { code?: unknown; message?: unknown };
  expect(typeof error.code, `error code at ${at}`).toBe("string");
  const code = connectCodeWords.get(String(error.code));
  expect(code, `code word ${String(error.code)} at ${at}`).toBeDefined();
  if (error.message !== undefined) expect(typeof error.message).toBe("string");
  return code!;
}

/** The probe: a fresh value under the 3-per-hour rule answers OK with 2 remaining. */
function probeRequest(tag: string) {
  return create(RateLimitRequestSchema, {
    domain: fuzzDomain,
    descriptors: [
      { entries: [{ key: "fuzz_probe", value: `${tag}-${seed}` }] },
    ],
  });
}

function checkProbe(response: RateLimitResponse, at: string): void {
  expect(response.overallCode, `probe at ${at}`).toBe(
    RateLimitResponse_Code.OK,
  );
  expect(response.statuses[0]?.limitRemaining, `probe at ${at}`).toBe(2);
  expect(
    response.statuses[0]?.currentLimit?.requestsPerUnit,
    `probe at ${at}`,
  ).toBe(3);
}

/** Reads a Connect universal response completely. */
async function drain(
  handler: UniversalHandler,
  contentType: string,
  body: Uint8Array,
  extraHeaders: Record<string, string> = {},
): Promise<{
  status: number;
  header: Headers;
  trailer: Headers | undefined;
  body: Buffer;
}> {
  const response = await remapDecodeErrors(
    await handler({
      httpVersion: "2.0",
      url: `http://fuzz${shouldRateLimitPath}`,
      method: "POST",
      header: new Headers({ "content-type": contentType, ...extraHeaders }),
      body: createAsyncIterable([body]),
      signal: new AbortController().signal,
    }),
  );
  const chunks: Uint8Array[] = [];
  if (response.body !== undefined)
    for await (const c of response.body) chunks.push(c);
  return {
    status: response.status,
    header: response.header ?? new Headers(),
    trailer: response.trailer,
    // A gzip request may get a gzip answer (Connect protocol).
    body:
      response.header?.get("content-encoding") === "gzip"
        ? gunzipSync(Buffer.concat(chunks))
        : Buffer.concat(chunks),
  };
}

/** gRPC-web: the status from the headers (trailers-only) or the trailer frame (flag 0x80). */
function grpcWebStatus(
  header: Headers,
  body: Buffer,
): { code: number; message: string; message0?: Buffer } {
  const inHeader = header.get("grpc-status");
  if (inHeader !== null)
    return {
      code: Number(inHeader),
      message: decodeURIComponent(header.get("grpc-message") ?? ""),
    };
  let offset = 0;
  let message0: Buffer | undefined;
  while (offset + 5 <= body.length) {
    const flags = body[offset]!;
    const length = body.readUInt32BE(offset + 1);
    const payload = body.subarray(offset + 5, offset + 5 + length);
    offset += 5 + length;
    if ((flags & 0x80) === 0) {
      message0 = (flags & 1) === 1 ? gunzipSync(payload) : payload;
      continue;
    }
    const fields = new Map(
      payload
        .toString("utf8")
        .split("\r\n")
        .filter((l) => l.includes(":"))
        .map((l) => [
          l.slice(0, l.indexOf(":")).trim().toLowerCase(),
          l.slice(l.indexOf(":") + 1).trim(),
        ]),
    );
    return {
      code: Number(fields.get("grpc-status")),
      message: decodeURIComponent(fields.get("grpc-message") ?? ""),
      ...(message0 !== undefined ? { message0 } : {}),
    };
  }
  return { code: Number.NaN, message: "no trailer frame" };
}

/** Calls the `/json` handler with a minimal request/response pair (body split into chunks). */
function callJson(
  handle: (req: IncomingMessage, res: ServerResponse) => void,
  chunks: readonly Uint8Array[],
): Promise<{ status: number; contentType: string; body: Buffer }> {
  return new Promise((resolve) => {
    const req = Object.assign(new EventEmitter(), {
      headers: {},
      method: "POST",
      resume() {
        return req;
      },
    });
    let status = 0;
    let contentType = "";
    const res = {
      headersSent: false,
      writeHead(code: number, headers: Record<string, string | number>) {
        status = code;
        contentType = String(headers["content-type"]);
        res.headersSent = true;
        return res;
      },
      end(body: string) {
        resolve({ status, contentType, body: Buffer.from(body) });
      },
    };
    handle(req as unknown as IncomingMessage, res as unknown as ServerResponse);
    for (const chunk of chunks) req.emit("data", Buffer.from(chunk));
    req.emit("end");
  });
}

function rssMiB(pid = process.pid): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1]);
  return kb / 1024;
}

/** Runs `work` over `items` with at most `limit` in flight. */
async function inParallel<T>(
  items: readonly T[],
  limit: number,
  work: (item: T, index: number) => Promise<void>,
): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: limit }, async () => {
      while (next < items.length) {
        const index = next++;
        await work(items[index]!, index);
      }
    }),
  );
}

const counted = { inProcess: 0, network: 0 };

/** The input of the previous `fetchAt` (a reset may come from the one before). */
let previousAt = "";

/** `fetch`, with the input (and the previous one) named when the connection fails. */
async function fetchAt(
  url: string,
  init: RequestInit,
  at: string,
): Promise<Response> {
  const before = previousAt;
  previousAt = at;
  try {
    return await fetch(url, init);
  } catch (err) {
    throw new Error(
      `fetch failed at ${at} (previous: ${before}): ${String((err as Error).cause ?? err)}`,
      { cause: err },
    );
  }
}

describe("fuzz corpus", () => {
  let app: TestApp;
  let handler: ShouldRateLimitHandler;
  let routerHandler: UniversalHandler;
  let json: (req: IncomingMessage, res: ServerResponse) => void;
  const errorLogs: string[] = [];

  beforeAll(async () => {
    const logger = pino(
      { level: "error" },
      { write: (line: string) => void errorLogs.push(line) },
    );
    app = await startTestApp({ "fuzz.yaml": config }, {}, logger);
    const statsManager = app.app.statsManager;
    handler = createShouldRateLimitHandler({
      service: app.app.service,
      statsManager,
      logger,
    });
    const router = createConnectRouter({
      readMaxBytes: maxGrpcMessageBytes,
      acceptCompression: [compressionGzip, compressionBrotli],
    });
    createRoutes({
      shouldRateLimit: handler,
      health: app.app.health,
      statsManager,
    })(router);
    const found = router.handlers.find(
      (h) => h.requestPath === shouldRateLimitPath,
    );
    if (found === undefined) throw new Error("no ShouldRateLimit route");
    routerHandler = found;
    json = createJsonHandler({
      service: app.app.service,
      statsManager,
      logger,
    });
    console.log(`fuzz corpus: FUZZ_SEED=${seed}`);
  });

  afterAll(async () => {
    await app.stop();
    console.log(
      `fuzz corpus: ${counted.inProcess} inputs in process, ${counted.network} over sockets (FUZZ_SEED=${seed})`,
    );
  });

  it("answers every gRPC frame on the fast path's decoder and handler with a valid status", async () => {
    const rssBefore = rssMiB();
    const per = Math.ceil(inProcessRuns.grpc / batches);
    for (let batch = 0; batch < batches; batch++) {
      const inputs = sample(grpcFrame, 1, batch, per);
      for (let i = 0; i < inputs.length; i++) {
        const body = Buffer.from(inputs[i]!.body);
        try {
          const response = await handler(
            decodeUnaryEnvelope(body, maxGrpcMessageBytes),
          );
          toBinary(RateLimitResponseSchema, response);
          checkDecision(response, where("grpc", batch, i, body));
        } catch (err) {
          const e = ConnectError.from(err);
          checkGrpcError(e.code, e.rawMessage, where("grpc", batch, i, body));
        }
      }
      counted.inProcess += inputs.length;
      const probe = envelope(
        encodeRequest(probeRequest(`grpc-${batch}`)),
        0,
        encodeRequest(probeRequest(`grpc-${batch}`)).length,
      );
      checkProbe(
        await handler(decodeUnaryEnvelope(probe, maxGrpcMessageBytes)),
        `grpc batch ${batch} FUZZ_SEED=${seed}`,
      );
    }
    expect(errorLogs, `FUZZ_SEED=${seed}`).toEqual([]);
    expect(
      rssMiB() - rssBefore,
      `RSS growth (MiB) FUZZ_SEED=${seed}`,
    ).toBeLessThan(512);
  });

  it("answers every Connect, gRPC-web and gRPC request on the Connect router with a valid status", async () => {
    const input = fc.oneof(
      grpcFrame.map((f) => ({
        protocol: "grpc" as const,
        body: f.body,
        gzip: false,
      })),
      grpcFrame.map((f) => ({
        protocol: "grpc-web" as const,
        body: f.body,
        gzip: false,
      })),
      protoBody.map((body) => ({
        protocol: "connect-proto" as const,
        body,
        gzip: false,
      })),
      jsonBody.map((body) => ({
        protocol: "connect-json" as const,
        body,
        gzip: false,
      })),
      fc
        .tuple(
          fc.constantFrom(
            "grpc" as const,
            "grpc-web" as const,
            "connect-proto" as const,
          ),
          protoBody,
          fc.boolean(),
        )
        .map(([protocol, message, valid]) => ({
          protocol,
          gzip: true,
          body:
            protocol === "connect-proto"
              ? valid
                ? gzipSync(message)
                : message
              : envelope(
                  valid ? gzipSync(message) : message,
                  1,
                  valid ? gzipSync(message).length : message.length,
                ),
        })),
    );
    const contentTypes = {
      grpc: "application/grpc",
      "grpc-web": "application/grpc-web+proto",
      "connect-proto": "application/proto",
      "connect-json": "application/json",
    };
    const rssBefore = rssMiB();
    const per = Math.ceil(inProcessRuns.router / batches);
    for (let batch = 0; batch < batches; batch++) {
      const inputs = sample(input, 2, batch, per);
      for (let i = 0; i < inputs.length; i++) {
        const { protocol, body, gzip } = inputs[i]!;
        const at = where(
          `router ${protocol}${gzip ? " gzip" : ""}`,
          batch,
          i,
          body,
        );
        const encodingHeader: Record<string, string> = gzip
          ? protocol === "connect-proto"
            ? { "content-encoding": "gzip" }
            : { "grpc-encoding": "gzip" }
          : {};
        const r = await drain(
          routerHandler,
          contentTypes[protocol],
          body,
          encodingHeader,
        );
        if (protocol === "grpc") {
          expect(r.status, at).toBe(200);
          const status =
            r.trailer?.get("grpc-status") ?? r.header.get("grpc-status");
          const code = Number(status);
          if (code !== 0) {
            // The Connect handler remaps "parse binary" INTERNAL to INVALID_ARGUMENT.
            const message = decodeURIComponent(
              r.trailer?.get("grpc-message") ??
                r.header.get("grpc-message") ??
                "",
            );
            checkGrpcError(code, message, at);
          }
        } else if (protocol === "grpc-web") {
          expect(r.status, at).toBe(200);
          const { code, message, message0 } = grpcWebStatus(r.header, r.body);
          if (code === 0) {
            expect(message0, at).toBeDefined();
            checkDecision(fromBinary(RateLimitResponseSchema, message0!), at);
          } else {
            checkGrpcError(code, message, at);
          }
        } else if (r.status === 200) {
          const response =
            protocol === "connect-proto"
              ? fromBinary(RateLimitResponseSchema, r.body)
              : fromJson(
                  RateLimitResponseSchema,
                  JSON.parse(r.body.toString("utf8")) as never,
                );
          checkDecision(response, at);
        } else {
          expect(r.header.get("content-type"), at).toBe("application/json");
          const code = checkJsonError(r.body, at);
          const message =
            (JSON.parse(r.body.toString()) as { message?: string }).message ??
            "";
          checkGrpcError(code, message, at);
        }
      }
      counted.inProcess += inputs.length;
      const probe = await drain(
        routerHandler,
        "application/proto",
        encodeRequest(probeRequest(`router-${batch}`)),
      );
      expect(probe.status).toBe(200);
      checkProbe(
        fromBinary(RateLimitResponseSchema, probe.body),
        `router batch ${batch} FUZZ_SEED=${seed}`,
      );
    }
    expect(errorLogs, `FUZZ_SEED=${seed}`).toEqual([]);
    expect(
      rssMiB() - rssBefore,
      `RSS growth (MiB) FUZZ_SEED=${seed}`,
    ).toBeLessThan(512);
  });

  it("answers every /json body with a decision or a JSON error", async () => {
    const input = fc.tuple(jsonBody, fc.array(fc.nat(), { maxLength: 3 }));
    const rssBefore = rssMiB();
    const per = Math.ceil(inProcessRuns.json / batches);
    for (let batch = 0; batch < batches; batch++) {
      const inputs = sample(input, 3, batch, per);
      for (let i = 0; i < inputs.length; i++) {
        const [body, splits] = inputs[i]!;
        const at = where("json", batch, i, body);
        const r = await callJson(
          json,
          splitBody(
            body,
            splits.map((s) => s % (body.length + 1)),
          ),
        );
        expect(r.contentType, at).toBe("application/json");
        if (r.status === 200 || r.status === 429) {
          checkDecision(
            fromJson(
              RateLimitResponseSchema,
              JSON.parse(r.body.toString()) as never,
            ),
            at,
          );
        } else {
          expect(
            [400, 413],
            `${r.status} ${r.body.toString()} at ${at}`,
          ).toContain(r.status);
          checkJsonError(r.body, at);
        }
      }
      counted.inProcess += inputs.length;
      const probe = await callJson(json, [
        Buffer.from(
          JSON.stringify({
            domain: fuzzDomain,
            descriptors: [
              {
                entries: [
                  { key: "fuzz_probe", value: `json-${batch}-${seed}` },
                ],
              },
            ],
          }),
        ),
      ]);
      expect(probe.status).toBe(200);
      checkProbe(
        fromJson(
          RateLimitResponseSchema,
          JSON.parse(probe.body.toString()) as never,
        ),
        `json batch ${batch} FUZZ_SEED=${seed}`,
      );
    }
    expect(errorLogs, `FUZZ_SEED=${seed}`).toEqual([]);
    expect(
      rssMiB() - rssBefore,
      `RSS growth (MiB) FUZZ_SEED=${seed}`,
    ).toBeLessThan(512);
  });

  describe("over sockets, against a spawned service process", () => {
    let service: Spawned;
    let ports: { http: number; grpc: number; debug: number };
    let root: string;
    let rssStart = 0;

    beforeAll(async () => {
      root = await mkdtemp(join(tmpdir(), "rls-fuzz-"));
      await mkdir(join(root, "config"));
      await writeFile(join(root, "config", "fuzz.yaml"), config);
      ports = {
        http: await freePort(),
        grpc: await freePort(),
        debug: await freePort(),
      };
      service = spawnNode("dist/src/main.js", [], {
        BACKEND_TYPE: "memory",
        HOST: "127.0.0.1",
        PORT: String(ports.http),
        GRPC_HOST: "127.0.0.1",
        GRPC_PORT: String(ports.grpc),
        DEBUG_HOST: "127.0.0.1",
        DEBUG_PORT: String(ports.debug),
        RUNTIME_ROOT: root,
        RUNTIME_SUBDIRECTORY: "",
        RUNTIME_APPDIRECTORY: "config",
        RUNTIME_WATCH_ROOT: "false",
        USE_PUSHSTATS: "false",
        LOG_LEVEL: "warn",
        LOG_FORMAT: "json",
      });
      await waitFor(
        () => service.output().includes("ratelimit started"),
        "the service to listen",
        20_000,
      );
      rssStart = rssMiB(service.child.pid ?? 0);
    });

    afterAll(async () => {
      if (service.child.exitCode === null) service.child.kill("SIGKILL");
      await service.exited;
      await rm(root, { recursive: true, force: true });
    });

    function alive(): void {
      expect(
        service.child.exitCode,
        `service exited FUZZ_SEED=${seed}: ${service.output()}`,
      ).toBeNull();
      const errors = service
        .output()
        .split("\n")
        .filter(
          (l) => l.includes('"level":"error"') || l.includes('"level":"fatal"'),
        );
      expect(errors, `FUZZ_SEED=${seed}`).toEqual([]);
    }

    /** One raw gRPC call on `session`, the body written in chunks. */
    function grpcCall(
      session: ClientHttp2Session,
      input: GrpcFrameInput,
      headers: Record<string, string> = {},
    ): Promise<{
      status: number;
      code: number;
      message: string;
      body: Buffer;
    }> {
      return new Promise((resolve, reject) => {
        const stream = session.request({
          ":method": "POST",
          ":path": shouldRateLimitPath,
          "content-type": "application/grpc",
          te: "trailers",
          ...headers,
        });
        let status = 0;
        let source: IncomingHttpHeaders = {};
        const chunks: Buffer[] = [];
        stream.on("response", (h) => {
          status = Number(h[":status"]);
          source = h;
        });
        stream.on("trailers", (t: IncomingHttpHeaders) => {
          source = t;
          // The answer is complete. A server that answered before reading the whole request
          // (the Connect router) leaves the rest unread: stop sending instead of waiting.
          finish();
          stream.destroy();
        });
        stream.on("data", (c: Buffer) => chunks.push(c));
        stream.on("error", reject);
        // An unanswered call is a failure too (the service must answer every frame).
        const timer = setTimeout(() => {
          reject(
            new Error(
              `no answer in 20 s FUZZ_SEED=${seed}: ${Buffer.from(input.body.subarray(0, 64)).toString("hex")} (${input.body.length} bytes, splits ${input.splits.join(",")}, ${JSON.stringify(headers)})`,
            ),
          );
          stream.close();
        }, 20_000);
        const finish = (): void => {
          clearTimeout(timer);
          resolve({
            status,
            code: Number(source["grpc-status"]),
            message: decodeURIComponent(
              [source["grpc-message"] ?? ""].flat().join(","),
            ),
            body: Buffer.concat(chunks),
          });
        };
        stream.on("close", finish);
        const parts = splitBody(input.body, input.splits);
        for (const part of parts) stream.write(part);
        stream.end();
      });
    }

    it("answers every gRPC frame (split, compressed, oversize) on the HTTP/2 port", async () => {
      const session = connect(`http://127.0.0.1:${ports.grpc}`);
      session.on("error", () => undefined);
      const input = fc.tuple(
        grpcFrame,
        fc.constantFrom("identity", "identity", "identity", "gzip"),
      );
      const per = Math.ceil(networkRuns.grpc / batches);
      try {
        for (let batch = 0; batch < batches; batch++) {
          const inputs = sample(input, 4, batch, per);
          await inParallel(inputs, 16, async ([frame, encoding], i) => {
            const at = where(`net grpc ${encoding}`, batch, i, frame.body);
            const r = await grpcCall(session, frame, {
              "grpc-encoding": encoding,
            });
            expect(r.status, at).toBe(200);
            if (r.code === 0) {
              expect(r.body.length, at).toBeGreaterThanOrEqual(5);
              // The router answers a gzip request compressed (flag 1).
              const message = r.body.subarray(5);
              checkDecision(
                fromBinary(
                  RateLimitResponseSchema,
                  (r.body[0]! & 1) === 1 ? gunzipSync(message) : message,
                ),
                at,
              );
            } else {
              checkGrpcError(r.code, r.message, at);
            }
          });
          counted.network += inputs.length;
          const message = encodeRequest(probeRequest(`net-grpc-${batch}`));
          const probe = await grpcCall(session, {
            body: envelope(message, 0, message.length),
            splits: [],
          });
          expect(probe.code).toBe(0);
          checkProbe(
            fromBinary(RateLimitResponseSchema, probe.body.subarray(5)),
            `net grpc batch ${batch} FUZZ_SEED=${seed}`,
          );
          alive();
        }
        // Real oversize messages, streamed in 64 KiB writes.
        const big = Buffer.alloc(maxGrpcMessageBytes + 1, 0x0a);
        for (const declared of [big.length, 16]) {
          const r = await grpcCall(session, {
            body: envelope(big, 0, declared),
            splits: Array.from({ length: 70 }, (_, k) => (k + 1) * 65536),
          });
          counted.network++;
          expect(r.status).toBe(200);
          checkGrpcError(
            r.code,
            r.message,
            `oversize declared ${declared} FUZZ_SEED=${seed}`,
          );
          expect([Code.ResourceExhausted, Code.Unimplemented]).toContain(
            r.code,
          );
        }
        alive();
      } finally {
        session.close();
      }
    });

    it("answers every Connect and gRPC-web request on the HTTP port with a valid status", async () => {
      const input = fc.oneof(
        protoBody.map((body) => ({ contentType: "application/proto", body })),
        jsonBody.map((body) => ({ contentType: "application/json", body })),
        grpcFrame.map((f) => ({
          contentType: "application/grpc-web+proto",
          body: f.body,
        })),
      );
      const per = Math.ceil(networkRuns.router / batches);
      const url = `http://127.0.0.1:${ports.http}${shouldRateLimitPath}`;
      for (let batch = 0; batch < batches; batch++) {
        const inputs = sample(input, 5, batch, per);
        await inParallel(inputs, 8, async ({ contentType, body }, i) => {
          const at = where(`net ${contentType}`, batch, i, body);
          const r = await fetchAt(
            url,
            { method: "POST", headers: { "content-type": contentType }, body },
            at,
          );
          const bytes = Buffer.from(await r.arrayBuffer());
          if (contentType === "application/grpc-web+proto") {
            expect(r.status, at).toBe(200);
            const { code, message, message0 } = grpcWebStatus(r.headers, bytes);
            if (code === 0)
              checkDecision(fromBinary(RateLimitResponseSchema, message0!), at);
            else checkGrpcError(code, message, at);
          } else if (r.status === 200) {
            checkDecision(
              contentType === "application/proto"
                ? fromBinary(RateLimitResponseSchema, bytes)
                : fromJson(
                    RateLimitResponseSchema,
                    JSON.parse(bytes.toString()) as never,
                  ),
              at,
            );
          } else {
            expect(r.headers.get("content-type"), at).toBe("application/json");
            const code = checkJsonError(bytes, at);
            checkGrpcError(
              code,
              (JSON.parse(bytes.toString()) as { message?: string }).message ??
                "",
              at,
            );
          }
        });
        counted.network += inputs.length;
        const probe = await fetch(url, {
          method: "POST",
          headers: { "content-type": "application/proto" },
          body: encodeRequest(probeRequest(`net-connect-${batch}`)),
        });
        expect(probe.status).toBe(200);
        checkProbe(
          fromBinary(
            RateLimitResponseSchema,
            Buffer.from(await probe.arrayBuffer()),
          ),
          `net connect batch ${batch} FUZZ_SEED=${seed}`,
        );
        alive();
      }
    });

    it("answers every /json body with a decision or a JSON error", async () => {
      const per = Math.ceil(networkRuns.json / batches);
      const url = `http://127.0.0.1:${ports.http}/json`;
      for (let batch = 0; batch < batches; batch++) {
        const inputs = sample(jsonBody, 6, batch, per);
        await inParallel(inputs, 8, async (body, i) => {
          const at = where("net json", batch, i, body);
          const r = await fetchAt(url, { method: "POST", body }, at);
          const text = await r.text();
          expect(r.headers.get("content-type"), at).toBe("application/json");
          if (r.status === 200 || r.status === 429) {
            checkDecision(
              fromJson(RateLimitResponseSchema, JSON.parse(text) as never),
              at,
            );
          } else {
            expect([400, 413], `${r.status} ${text} at ${at}`).toContain(
              r.status,
            );
            checkJsonError(Buffer.from(text), at);
          }
        });
        counted.network += inputs.length;
        const probe = await fetch(url, {
          method: "POST",
          body: JSON.stringify({
            domain: fuzzDomain,
            descriptors: [
              {
                entries: [
                  { key: "fuzz_probe", value: `net-json-${batch}-${seed}` },
                ],
              },
            ],
          }),
        });
        expect(probe.status).toBe(200);
        checkProbe(
          fromJson(RateLimitResponseSchema, (await probe.json()) as never),
          `net json batch ${batch} FUZZ_SEED=${seed}`,
        );
        alive();
      }
      // A body over the 1 MiB limit.
      const r = await fetch(url, {
        method: "POST",
        body: Buffer.alloc(1024 * 1024 + 1, 0x20),
      });
      counted.network++;
      expect(r.status).toBe(413);
      expect(checkJsonError(Buffer.from(await r.text()), "oversize json")).toBe(
        Code.ResourceExhausted,
      );
      alive();
    });

    it("keeps the service process's RSS bounded", () => {
      alive();
      const rssEnd = rssMiB(service.child.pid ?? 0);
      console.log(
        `fuzz corpus: service RSS ${rssStart.toFixed(0)} MiB → ${rssEnd.toFixed(0)} MiB`,
      );
      expect(rssEnd - rssStart, `FUZZ_SEED=${seed}`).toBeLessThan(384);
    });
  });
});
