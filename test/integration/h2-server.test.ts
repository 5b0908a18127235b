import { connect as http2Connect, constants } from "node:http2";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { silentLogger } from "../helpers/silent-logger.js";
import { afterEach, describe, expect, it } from "vitest";
import {
  Health,
  HealthCheckResponse_ServingStatus,
  RateLimitRequestSchema,
  RateLimitResponse_Code,
  RateLimitResponseSchema,
  RateLimitService,
  type RateLimitResponse,
} from "../../src/proto.js";
import {
  createConnectDispatcher,
  type ConnectDispatcher,
} from "../../src/server/connect-handler.js";
import type { Http2Event } from "../../src/http2/limits.js";
import {
  ErrorCode,
  Flag,
  FrameType,
  SettingId,
} from "../../src/http2/frames.js";
import { startBuiltinHttp2Server } from "../../src/server/grpc/builtin-listener.js";
import type { Http2ConnectionOptions } from "../../src/http2/connection-options.js";
import type { Listening } from "../../src/server/listen.js";
import type { ShouldRateLimitHandler } from "../../src/server/should-rate-limit-handler.js";
import { GrpcJsRateLimitClient } from "../helpers/grpc-js-client.js";
import {
  frame,
  grpcRequestFields,
  headerBlock,
  RawH2Client,
  settingsPayload,
  u32,
} from "../helpers/h2-raw-client.js";
import { envelope, rawGrpc } from "../helpers/raw-grpc.js";

// The built-in HTTP/2 engine, driven frame by frame over a raw socket (framing, flow
// control, stream and connection errors) and by real clients (node:http2, @grpc/grpc-js,
// Connect).

function requestBody(domain: string): Buffer {
  return envelope(
    toBinary(
      RateLimitRequestSchema,
      create(RateLimitRequestSchema, {
        domain,
        descriptors: [{ entries: [{ key: "k", value: "v" }] }],
      }),
    ),
  );
}

/** Answers OK, with `rawBody` of the size the domain names (`big:<n>`); never answers `hang`. */
const pending: (() => void)[] = [];
const handler: ShouldRateLimitHandler = (request) => {
  if (request.domain === "hang")
    return new Promise((resolve) => {
      pending.push(() => {
        resolve(create(RateLimitResponseSchema, {}));
      });
    });
  const big = /^big:(\d+)$/.exec(request.domain);
  return Promise.resolve(
    create(RateLimitResponseSchema, {
      overallCode: RateLimitResponse_Code.OK,
      rawBody:
        big === null
          ? new Uint8Array(0)
          : new Uint8Array(Number(big[1])).fill(7),
    }),
  );
};

const servers: Listening[] = [];
const clients: RawH2Client[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  for (const s of servers.splice(0)) await s.close(0);
  pending.splice(0);
});

async function start(
  connection: Omit<
    Http2ConnectionOptions,
    "onStream" | "onClose" | "logger"
  > = {},
  extra: {
    onEvent?: (event: Http2Event) => void;
    wrap?: (dispatcher: ConnectDispatcher) => ConnectDispatcher;
  } = {},
): Promise<Listening> {
  const wrap = extra.wrap ?? ((d: ConnectDispatcher) => d);
  const { handshakeTimeoutMs, ...perConnection } = connection;
  const server = await startBuiltinHttp2Server({
    ...(handshakeTimeoutMs !== undefined ? { handshakeTimeoutMs } : {}),
    ...(extra.onEvent !== undefined ? { onEvent: extra.onEvent } : {}),
    dispatcher: wrap(
      createConnectDispatcher({
        routes: (router) => {
          router.service(Health, {
            check: () => ({
              status: HealthCheckResponse_ServingStatus.SERVING,
            }),
            async *watch() {
              yield { status: HealthCheckResponse_ServingStatus.SERVING };
              await new Promise((resolve) => setTimeout(resolve, 50));
              yield { status: HealthCheckResponse_ServingStatus.NOT_SERVING };
            },
          });
          router.service(RateLimitService, {
            shouldRateLimit: (request) => handler(request),
          });
        },
        logger: silentLogger(),
      }),
    ),
    fastPath: { handler, readMaxBytes: 4 * 1024 * 1024 },
    logger: silentLogger(),
    target: { host: "127.0.0.1", port: 0 },
    connection: perConnection,
  });
  servers.push(server);
  return server;
}

async function open(
  port: number,
  options: Parameters<typeof RawH2Client.open>[1] = {},
): Promise<RawH2Client> {
  const client = await RawH2Client.open(port, options);
  clients.push(client);
  return client;
}

/** HEADERS (END_HEADERS) + DATA (END_STREAM) of a unary call. */
function unaryCall(
  streamId: number,
  domain: string,
  extra: [string, string][] = [],
): Buffer {
  return Buffer.concat([
    frame(
      FrameType.headers,
      Flag.endHeaders,
      streamId,
      headerBlock(grpcRequestFields(extra)),
    ),
    frame(FrameType.data, Flag.endStream, streamId, requestBody(domain)),
  ]);
}

/** Waits for the end of `streamId`'s response and returns its parts. */
async function response(
  client: RawH2Client,
  streamId: number,
): Promise<{
  headers: Record<string, string>;
  body: Buffer;
  trailers: Record<string, string> | undefined;
  dataFrames: number[];
}> {
  await client.waitFor(
    (f) =>
      f.streamId === streamId &&
      (f.flags & Flag.endStream) !== 0 &&
      (f.type === FrameType.headers || f.type === FrameType.data),
  );
  const frames = client.on(streamId);
  const blocks = frames.filter((f) => f.type === FrameType.headers);
  const data = frames.filter((f) => f.type === FrameType.data);
  const first = blocks[0];
  if (first === undefined) throw new Error("no HEADERS");
  return {
    headers: client.decodeHeaders(first),
    body: Buffer.concat(data.map((f) => f.payload)),
    trailers:
      blocks[1] !== undefined ? client.decodeHeaders(blocks[1]) : undefined,
    dataFrames: data.map((f) => f.payload.length),
  };
}

function decodeFrame(body: Buffer): RateLimitResponse {
  expect(body.readUInt32BE(1)).toBe(body.length - 5);
  return fromBinary(RateLimitResponseSchema, body.subarray(5));
}

describe("built-in HTTP/2 engine: connection setup", () => {
  it("sends its SETTINGS first, acknowledges the client's, and answers PING", async () => {
    const server = await start();
    const client = await open(server.port);
    const settings = await client.waitFor(
      (f) => f.type === FrameType.settings && f.flags === 0,
    );
    expect(client.frames[0]?.type).toBe(FrameType.settings);
    const values = new Map<number, number>();
    for (let p = 0; p < settings.payload.length; p += 6)
      values.set(
        settings.payload.readUInt16BE(p),
        settings.payload.readUInt32BE(p + 2),
      );
    expect(values.get(SettingId.enablePush)).toBe(0);
    expect(values.get(SettingId.maxConcurrentStreams)).toBe(1000);
    expect(values.get(SettingId.initialWindowSize)).toBe(1024 * 1024);
    expect(values.get(SettingId.maxHeaderListSize)).toBe(64 * 1024);
    await client.waitFor(
      (f) => f.type === FrameType.settings && f.flags === Flag.ack,
    );
    const payload = Buffer.from("12345678");
    client.send(frame(FrameType.ping, 0, 0, payload));
    const pong = await client.waitFor((f) => f.type === FrameType.ping);
    expect(pong.flags).toBe(Flag.ack);
    expect(pong.payload).toEqual(payload);
  });

  it("closes a connection with a bad preface with GOAWAY(PROTOCOL_ERROR)", async () => {
    const server = await start();
    const client = await open(server.port, { preface: false });
    client.send(Buffer.from("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
    expect(await client.goawayCode()).toBe(ErrorCode.protocolError);
    await client.closed;
  });

  it("requires SETTINGS as the first frame", async () => {
    const server = await start();
    const client = await open(server.port, { preface: false });
    const { clientPreface } = await import("../../src/http2/frames.js");
    client.send(
      Buffer.concat([
        clientPreface,
        frame(FrameType.ping, 0, 0, Buffer.alloc(8)),
      ]),
    );
    expect(await client.goawayCode()).toBe(ErrorCode.protocolError);
  });
});

describe("built-in HTTP/2 engine: framing", () => {
  it("answers a call whose frames arrive a few bytes at a time", async () => {
    const server = await start();
    const client = await open(server.port);
    await client.sendInPieces(
      Buffer.concat([unaryCall(1, "a"), unaryCall(3, "b")]),
      7,
    );
    for (const id of [1, 3]) {
      const r = await response(client, id);
      expect(r.headers[":status"]).toBe("200");
      expect(r.headers["content-type"]).toBe("application/grpc");
      expect(r.trailers).toEqual({ "grpc-status": "0" });
      expect(decodeFrame(r.body).overallCode).toBe(RateLimitResponse_Code.OK);
    }
  });

  it("decodes HEADERS with padding and priority continued by CONTINUATION, and padded DATA", async () => {
    const server = await start();
    const client = await open(server.port);
    const block = headerBlock(grpcRequestFields([["x-extra", "y".repeat(40)]]));
    const padded = Buffer.concat([
      Buffer.from([3]), // pad length
      Buffer.from([0, 0, 0, 0, 15]), // priority: depends on stream 0, weight 16
      block.subarray(0, 10),
      Buffer.alloc(3),
    ]);
    const body = requestBody("padded");
    client.send(
      Buffer.concat([
        frame(FrameType.headers, Flag.padded | Flag.priority, 1, padded),
        frame(FrameType.continuation, 0, 1, block.subarray(10, 30)),
        frame(FrameType.continuation, Flag.endHeaders, 1, block.subarray(30)),
        frame(
          FrameType.data,
          Flag.padded | Flag.endStream,
          1,
          Buffer.concat([Buffer.from([5]), body, Buffer.alloc(5)]),
        ),
      ]),
    );
    const r = await response(client, 1);
    expect(r.trailers).toEqual({ "grpc-status": "0" });
  });

  it("ignores unknown frame types and PRIORITY frames", async () => {
    const server = await start();
    const client = await open(server.port);
    client.send(
      Buffer.concat([
        frame(0xfa, 0xff, 0, Buffer.from("whatever")),
        frame(FrameType.priority, 0, 9, Buffer.from([0, 0, 0, 0, 1])),
        unaryCall(1, "a"),
      ]),
    );
    expect((await response(client, 1)).trailers).toEqual({
      "grpc-status": "0",
    });
  });

  it("answers a frame other than CONTINUATION inside a header block with GOAWAY(PROTOCOL_ERROR)", async () => {
    const server = await start();
    const client = await open(server.port);
    const block = headerBlock(grpcRequestFields());
    client.send(
      Buffer.concat([
        frame(FrameType.headers, 0, 1, block.subarray(0, 5)),
        frame(FrameType.data, 0, 1, Buffer.from("x")),
      ]),
    );
    expect(await client.goawayCode()).toBe(ErrorCode.protocolError);
  });

  it("answers DATA padding as long as the payload with GOAWAY(PROTOCOL_ERROR)", async () => {
    const server = await start();
    const client = await open(server.port);
    client.send(
      Buffer.concat([
        frame(
          FrameType.headers,
          Flag.endHeaders,
          1,
          headerBlock(grpcRequestFields()),
        ),
        frame(FrameType.data, Flag.padded, 1, Buffer.from([5, 1, 2, 3, 4])),
      ]),
    );
    expect(await client.goawayCode()).toBe(ErrorCode.protocolError);
  });

  it("answers HEADERS padding longer than the block with GOAWAY(PROTOCOL_ERROR)", async () => {
    const server = await start();
    const client = await open(server.port);
    const block = headerBlock(grpcRequestFields());
    client.send(
      frame(
        FrameType.headers,
        Flag.endHeaders | Flag.padded | Flag.priority,
        1,
        Buffer.concat([
          Buffer.from([block.length + 1]),
          Buffer.from([0, 0, 0, 0, 15]),
          block,
        ]),
      ),
    );
    expect(await client.goawayCode()).toBe(ErrorCode.protocolError);
  });

  it("answers an oversized frame with GOAWAY(FRAME_SIZE_ERROR)", async () => {
    const server = await start();
    const client = await open(server.port);
    client.send(frame(FrameType.data, 0, 1, Buffer.alloc(16_385)));
    expect(await client.goawayCode()).toBe(ErrorCode.frameSizeError);
  });

  it("answers PUSH_PROMISE from a client with GOAWAY(PROTOCOL_ERROR)", async () => {
    const server = await start();
    const client = await open(server.port);
    client.send(
      frame(FrameType.pushPromise, Flag.endHeaders, 1, Buffer.alloc(4)),
    );
    expect(await client.goawayCode()).toBe(ErrorCode.protocolError);
  });

  it("resets a malformed request (uppercase name, connection header) with PROTOCOL_ERROR", async () => {
    const server = await start();
    const client = await open(server.port);
    client.send(
      frame(
        FrameType.headers,
        Flag.endHeaders | Flag.endStream,
        1,
        headerBlock(grpcRequestFields([["connection", "close"]])),
      ),
    );
    const rst = await client.waitFor((f) => f.type === FrameType.rstStream);
    expect(rst.streamId).toBe(1);
    expect(rst.payload.readUInt32BE(0)).toBe(ErrorCode.protocolError);
  });
});

describe("built-in HTTP/2 engine: stream identifiers and limits", () => {
  it("answers an even stream id with GOAWAY(PROTOCOL_ERROR)", async () => {
    const server = await start();
    const client = await open(server.port);
    client.send(unaryCall(2, "a"));
    expect(await client.goawayCode()).toBe(ErrorCode.protocolError);
  });

  it("answers a decreasing stream id with GOAWAY(PROTOCOL_ERROR)", async () => {
    const server = await start();
    const client = await open(server.port);
    client.send(unaryCall(5, "a"));
    await response(client, 5);
    client.send(unaryCall(3, "a"));
    expect(await client.goawayCode()).toBe(ErrorCode.protocolError);
  });

  it("refuses streams beyond MAX_CONCURRENT_STREAMS and serves the rest", async () => {
    const server = await start({ maxConcurrentStreams: 2 });
    const client = await open(server.port);
    client.send(
      Buffer.concat([
        unaryCall(1, "hang"),
        unaryCall(3, "hang"),
        unaryCall(5, "a"),
      ]),
    );
    const rst = await client.waitFor((f) => f.type === FrameType.rstStream);
    expect(rst.streamId).toBe(5);
    expect(rst.payload.readUInt32BE(0)).toBe(ErrorCode.refusedStream);
    for (const release of pending.splice(0)) release();
    expect((await response(client, 1)).trailers).toEqual({
      "grpc-status": "0",
    });
    expect((await response(client, 3)).trailers).toEqual({
      "grpc-status": "0",
    });
  });

  it("writes nothing on a stream the client reset, and keeps serving", async () => {
    const server = await start();
    const client = await open(server.port);
    client.send(unaryCall(1, "hang"));
    await new Promise((resolve) => setTimeout(resolve, 20));
    client.send(frame(FrameType.rstStream, 0, 1, u32(ErrorCode.cancel)));
    await new Promise((resolve) => setTimeout(resolve, 20));
    for (const release of pending.splice(0)) release();
    client.send(unaryCall(3, "a"));
    expect((await response(client, 3)).trailers).toEqual({
      "grpc-status": "0",
    });
    expect(client.on(1)).toEqual([]);
  });

  it("sends GOAWAY(ENHANCE_YOUR_CALM) beyond the stream reset limit", async () => {
    const server = await start({
      streamResetLimit: { burst: 5, ratePerSecond: 1 },
    });
    const client = await open(server.port);
    const frames: Buffer[] = [];
    for (let id = 1; id <= 21; id += 2)
      frames.push(
        unaryCall(id, "hang"),
        frame(FrameType.rstStream, 0, id, u32(ErrorCode.cancel)),
      );
    client.send(Buffer.concat(frames));
    expect(await client.goawayCode()).toBe(ErrorCode.enhanceYourCalm);
    await client.closed;
  });

  it("sends GOAWAY(ENHANCE_YOUR_CALM) when open streams hold more request body than the cap, and releases a closed stream's bytes", async () => {
    const server = await start({ maxConnectionMemoryBytes: 10_000 });
    const client = await open(server.port);
    // Two complete calls of ~6,000 body bytes each: each stream's bytes are released when it
    // closes, so together they stay under the cap.
    for (const id of [1, 3]) {
      client.send(
        Buffer.concat([
          frame(
            FrameType.headers,
            Flag.endHeaders,
            id,
            headerBlock(grpcRequestFields()),
          ),
          frame(
            FrameType.data,
            Flag.endStream,
            id,
            envelope(Buffer.alloc(6000, 0xff)),
          ),
        ]),
      );
      const r = await response(client, id);
      // INVALID_ARGUMENT (the body is not a RateLimitRequest), trailers-only.
      expect((r.trailers ?? r.headers)["grpc-status"]).toBe("3");
    }
    // Two calls that never end, holding 6,000 bytes each: over the cap.
    for (const id of [5, 7])
      client.send(
        Buffer.concat([
          frame(
            FrameType.headers,
            Flag.endHeaders,
            id,
            headerBlock(grpcRequestFields()),
          ),
          frame(FrameType.data, 0, id, Buffer.alloc(6000, 0xff)),
        ]),
      );
    expect(await client.goawayCode()).toBe(ErrorCode.enhanceYourCalm);
    await client.closed;
  });

  it("answers DEADLINE_EXCEEDED after grpc-timeout, trailers-only", async () => {
    const server = await start();
    const client = await open(server.port);
    client.send(unaryCall(1, "hang", [["grpc-timeout", "30m"]]));
    const r = await response(client, 1);
    expect(r.trailers).toBeUndefined();
    expect(r.headers["grpc-status"]).toBe("4");
    expect(r.headers["grpc-message"]).toBe("the%20operation%20timed%20out");
  });
});

describe("built-in HTTP/2 engine: flow control", () => {
  it("rejects WINDOW_UPDATE with a zero increment on the connection", async () => {
    const server = await start();
    const client = await open(server.port);
    client.send(frame(FrameType.windowUpdate, 0, 0, u32(0)));
    expect(await client.goawayCode()).toBe(ErrorCode.protocolError);
  });

  it("rejects a connection window overflow with GOAWAY(FLOW_CONTROL_ERROR)", async () => {
    const server = await start();
    const client = await open(server.port);
    client.send(frame(FrameType.windowUpdate, 0, 0, u32(0x7fffffff)));
    expect(await client.goawayCode()).toBe(ErrorCode.flowControlError);
  });

  it("splits DATA at MAX_FRAME_SIZE", async () => {
    const server = await start();
    const client = await open(server.port);
    client.send(unaryCall(1, "big:40000"));
    const r = await response(client, 1);
    expect(r.dataFrames.every((n) => n <= 16_384)).toBe(true);
    expect(r.dataFrames.length).toBeGreaterThanOrEqual(3);
    expect(decodeFrame(r.body).rawBody.length).toBe(40_000);
    expect(r.trailers).toEqual({ "grpc-status": "0" });
  });

  it("queues DATA beyond a tiny peer window until WINDOW_UPDATE, trailers last", async () => {
    const server = await start();
    const client = await open(server.port, {
      settings: [[SettingId.initialWindowSize, 10]],
    });
    client.send(unaryCall(1, "big:100"));
    await client.waitFor((f) => f.type === FrameType.data && f.streamId === 1);
    await new Promise((resolve) => setTimeout(resolve, 30));
    expect(client.on(1).map((f) => [f.type, f.payload.length])).toEqual([
      [FrameType.headers, expect.any(Number) as number],
      [FrameType.data, 10],
    ]);
    // A SETTINGS change applies to open streams; then a stream WINDOW_UPDATE.
    client.send(
      frame(
        FrameType.settings,
        0,
        0,
        settingsPayload([[SettingId.initialWindowSize, 30]]),
      ),
    );
    await client.waitFor(
      (f) =>
        f.type === FrameType.data &&
        f.streamId === 1 &&
        f.payload.length === 20,
    );
    client.send(frame(FrameType.windowUpdate, 0, 1, u32(1000)));
    const r = await response(client, 1);
    expect(r.dataFrames).toEqual([10, 20, r.body.length - 30]);
    expect(decodeFrame(r.body).rawBody.length).toBe(100);
    expect(r.trailers).toEqual({ "grpc-status": "0" });
  });

  it("reopens the windows for a request body larger than them", async () => {
    const server = await start();
    // 3 MiB: three times the stream and connection windows.
    const big = envelope(Buffer.alloc(3 * 1024 * 1024, 0xff));
    const r = await rawGrpc(
      `127.0.0.1:${server.port}`,
      "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
      big,
    );
    expect(r.grpcStatus).toBe(3); // INVALID_ARGUMENT: not a RateLimitRequest
  });
});

describe("built-in HTTP/2 engine with real clients", () => {
  it("serves @grpc/grpc-js and Connect gRPC clients, unary and server-streaming", async () => {
    const server = await start();
    const address = `127.0.0.1:${server.port}`;
    const grpcJs = new GrpcJsRateLimitClient(address);
    try {
      const answers = await Promise.all(
        Array.from({ length: 50 }, (_, i) =>
          grpcJs.shouldRateLimit(
            create(RateLimitRequestSchema, {
              domain: `d${i}`,
              descriptors: [{ entries: [{ key: "k", value: "v" }] }],
            }),
          ),
        ),
      );
      expect(
        answers.every((a) => a.overallCode === RateLimitResponse_Code.OK),
      ).toBe(true);
    } finally {
      grpcJs.close();
    }
    const transport = createGrpcTransport({ baseUrl: `http://${address}` });
    const health = createClient(Health, transport);
    expect((await health.check({})).status).toBe(
      HealthCheckResponse_ServingStatus.SERVING,
    );
    const seen: number[] = [];
    for await (const r of health.watch({})) seen.push(r.status);
    expect(seen).toEqual([
      HealthCheckResponse_ServingStatus.SERVING,
      HealthCheckResponse_ServingStatus.NOT_SERVING,
    ]);
    // Compressed gRPC goes through the Connect router.
    const compressed = createClient(
      RateLimitService,
      createGrpcTransport({
        baseUrl: `http://${address}`,
        sendCompression: (await import("@connectrpc/connect-node"))
          .compressionGzip,
      }),
    );
    const r = await compressed.shouldRateLimit({
      domain: "gz",
      descriptors: [{ entries: [{ key: "k", value: "v" }] }],
    });
    expect(r.overallCode).toBe(RateLimitResponse_Code.OK);
  });

  it("answers 404 for an unknown path", async () => {
    const server = await start();
    const session = http2Connect(`http://127.0.0.1:${server.port}`);
    try {
      const status = await new Promise<number>((resolve, reject) => {
        const stream = session.request({
          ":path": "/nowhere",
          ":method": "GET",
        });
        stream.on("response", (h) => {
          resolve(Number(h[":status"]));
        });
        stream.on("error", reject);
        stream.end();
      });
      expect(status).toBe(404);
    } finally {
      session.close();
    }
  });

  it("drains on close: GOAWAY, the in-flight call finishes, then the connection ends", async () => {
    const server = await start();
    const session = http2Connect(`http://127.0.0.1:${server.port}`);
    session.on("error", () => undefined);
    const goaway = new Promise<number>((resolve) => {
      session.on("goaway", (code: number) => {
        resolve(code);
      });
    });
    const answer = new Promise<string>((resolve) => {
      const stream = session.request({
        ":method": "POST",
        ":path": "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        "content-type": "application/grpc",
        te: "trailers",
      });
      stream.on("trailers", (t: Record<string, unknown>) => {
        resolve(String(t["grpc-status"]));
      });
      stream.on("error", () => {
        resolve("failed");
      });
      stream.resume();
      stream.end(requestBody("hang"));
    });
    await new Promise((resolve) => setTimeout(resolve, 30));
    servers.splice(0);
    const closing = server.close(5000);
    expect(await goaway).toBe(constants.NGHTTP2_NO_ERROR);
    for (const release of pending.splice(0)) release();
    expect(await answer).toBe("0");
    await closing;
    session.close();
  });
});

/** One HPACK literal field without indexing, new name (RFC 7541 §6.2.2), any bytes at all. */
function rawField(name: string, value: string): Buffer {
  const n = Buffer.from(name, "latin1");
  const v = Buffer.from(value, "latin1");
  if (n.length > 126 || v.length > 126) throw new Error("short strings only");
  return Buffer.concat([
    Buffer.from([0x00, n.length]),
    n,
    Buffer.from([v.length]),
    v,
  ]);
}

/** Waits until `client`'s socket has closed, or fails after `ms`. */
async function closedWithin(client: RawH2Client, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    client.closed,
    new Promise((_, reject) => {
      timer = setTimeout(() => {
        reject(new Error(`connection still open after ${String(ms)} ms`));
      }, ms);
    }),
  ]).finally(() => {
    clearTimeout(timer);
  });
}

describe("built-in HTTP/2 engine: abuse limits (issue: one HEADERS frame killed the service)", () => {
  // Requests that go to the Connect router (not the inline fast path), where the fields
  // become a WHATWG Headers object.
  const routerRequests: [string, [string, string][]][] = [
    [
      "gRPC-web",
      grpcRequestFields().map(([n, v]) =>
        n === "content-type" ? [n, "application/grpc-web+proto"] : [n, v],
      ),
    ],
    ["gzip on ShouldRateLimit", grpcRequestFields([["grpc-encoding", "gzip"]])],
    [
      "health check",
      grpcRequestFields().map(([n, v]) =>
        n === ":path" ? [n, "/grpc.health.v1.Health/Check"] : [n, v],
      ),
    ],
  ];
  const badFields: [string, string, string][] = [
    ["a name with a space", "x y", "1"],
    ["a name with a control character", "x\u0001y", "1"],
    ["a name with a separator", "x(y", "1"],
    ["a value with NUL", "x-v", "a\u0000b"],
    ["a value with CR LF", "x-v", "a\r\nb: c"],
    ["a value with a leading space", "x-v", " a"],
    ["a pseudo-header value with LF", ":authority", "a\nb"],
  ];
  for (const [routeName, fields] of routerRequests)
    for (const [what, name, value] of badFields)
      it(`resets a ${routeName} request with ${what} (PROTOCOL_ERROR) and keeps serving`, async () => {
        const events: Http2Event[] = [];
        const server = await start({}, { onEvent: (e) => events.push(e) });
        const client = await open(server.port);
        const block = name.startsWith(":")
          ? Buffer.concat([
              headerBlock(fields.filter(([n]) => n !== ":authority")),
              rawField(name, value),
            ])
          : Buffer.concat([headerBlock(fields), rawField(name, value)]);
        // A pseudo-header after regular fields is malformed too; put it first instead.
        const ordered = name.startsWith(":")
          ? Buffer.concat([
              rawField(name, value),
              headerBlock(fields.filter(([n]) => n !== ":authority")),
            ])
          : block;
        client.send(
          frame(
            FrameType.headers,
            Flag.endHeaders | Flag.endStream,
            1,
            ordered,
          ),
        );
        const rst = await client.waitFor((f) => f.type === FrameType.rstStream);
        expect([rst.streamId, rst.payload.readUInt32BE(0)]).toEqual([
          1,
          ErrorCode.protocolError,
        ]);
        expect(events).toEqual(["malformed_request"]);
        client.send(unaryCall(3, "a"));
        expect((await response(client, 3)).trailers).toEqual({
          "grpc-status": "0",
        });
      });

  it("contains an exception while serving a stream: GOAWAY(INTERNAL_ERROR) on that connection, counted, others served", async () => {
    const events: Http2Event[] = [];
    const server = await start(
      {},
      {
        onEvent: (e) => events.push(e),
        wrap: (d) => ({
          ...d,
          handlerFor: (path) => {
            if (path === "/boom") throw new Error("boom");
            return d.handlerFor(path);
          },
        }),
      },
    );
    const victim = await open(server.port);
    victim.send(
      frame(
        FrameType.headers,
        Flag.endHeaders | Flag.endStream,
        1,
        headerBlock(
          grpcRequestFields().map(([n, v]) =>
            n === ":path" ? [n, "/boom"] : [n, v],
          ),
        ),
      ),
    );
    expect(await victim.goawayCode()).toBe(ErrorCode.internalError);
    await closedWithin(victim, 3000);
    expect(events).toEqual(["internal_error"]);
    const other = await open(server.port);
    other.send(unaryCall(1, "a"));
    expect((await response(other, 1)).trailers).toEqual({ "grpc-status": "0" });
  });

  it("ends a header block of more than 8 CONTINUATION frames with GOAWAY(ENHANCE_YOUR_CALM)", async () => {
    const events: Http2Event[] = [];
    const server = await start({}, { onEvent: (e) => events.push(e) });
    const client = await open(server.port);
    const block = headerBlock(grpcRequestFields());
    const frames = [frame(FrameType.headers, 0, 1, block.subarray(0, 1))];
    for (let i = 0; i < 9; i++)
      frames.push(frame(FrameType.continuation, 0, 1, Buffer.alloc(0)));
    client.send(Buffer.concat(frames));
    expect(await client.goawayCode()).toBe(ErrorCode.enhanceYourCalm);
    expect(events).toEqual(["enhance_your_calm"]);
  });

  it("accepts a header block in 8 CONTINUATION frames", async () => {
    const server = await start();
    const client = await open(server.port);
    const block = headerBlock(grpcRequestFields());
    const step = Math.ceil(block.length / 9);
    const frames = [frame(FrameType.headers, 0, 1, block.subarray(0, step))];
    for (let i = 1; i < 9; i++)
      frames.push(
        frame(
          FrameType.continuation,
          i === 8 ? Flag.endHeaders : 0,
          1,
          block.subarray(i * step, (i + 1) * step),
        ),
      );
    frames.push(frame(FrameType.data, Flag.endStream, 1, requestBody("a")));
    client.send(Buffer.concat(frames));
    expect((await response(client, 1)).trailers).toEqual({
      "grpc-status": "0",
    });
  });

  it("ends a header block that does not end in time with GOAWAY(ENHANCE_YOUR_CALM)", async () => {
    const server = await start({ headerBlockTimeoutMs: 100 });
    const client = await open(server.port);
    // Our SETTINGS ACK must not fall inside the block.
    await client.waitFor((f) => f.type === FrameType.settings);
    client.send(
      frame(FrameType.headers, 0, 1, headerBlock(grpcRequestFields())),
    );
    expect(await client.goawayCode()).toBe(ErrorCode.enhanceYourCalm);
  });

  it("closes a connection that sends nothing, or half a preface, after the handshake timeout", async () => {
    const events: Http2Event[] = [];
    const server = await start(
      { handshakeTimeoutMs: 150 },
      { onEvent: (e) => events.push(e) },
    );
    const silent = await open(server.port, { preface: false });
    const half = await open(server.port, { preface: false });
    half.send(Buffer.from("PRI * HTTP/2.0\r\n"));
    await closedWithin(silent, 3000);
    await closedWithin(half, 3000);
    expect(events).toEqual(["handshake_timeout", "handshake_timeout"]);
  });

  it("answers GOAWAY(SETTINGS_TIMEOUT) when its SETTINGS are never acknowledged", async () => {
    const server = await start({ handshakeTimeoutMs: 150 });
    const client = await open(server.port, { ackSettings: false });
    expect(await client.goawayCode()).toBe(ErrorCode.settingsTimeout);
    await closedWithin(client, 3000);
  });

  it("sends GOAWAY(NO_ERROR) to a connection idle past the idle timeout, not to a busy one", async () => {
    const events: Http2Event[] = [];
    const server = await start(
      { idleTimeoutMs: 300 },
      { onEvent: (e) => events.push(e) },
    );
    const idle = await open(server.port);
    const busy = await open(server.port);
    busy.send(unaryCall(1, "hang"));
    expect(await idle.goawayCode()).toBe(ErrorCode.noError);
    await closedWithin(idle, 3000);
    await new Promise((resolve) => setTimeout(resolve, 400));
    expect(busy.frames.some((f) => f.type === FrameType.goaway)).toBe(false);
    expect(events).toEqual(["idle_timeout"]);
  });

  it("ends a connection on the third early PING strike (grpc-go's too_many_pings), not when responses come between", async () => {
    const server = await start();
    const patient = await open(server.port);
    for (let i = 0; i < 5; i++) {
      const id = 2 * i + 1;
      patient.send(unaryCall(id, "a"));
      await response(patient, id);
      patient.send(frame(FrameType.ping, 0, 0, Buffer.alloc(8, i)));
      await patient.waitFor(
        (f) => f.type === FrameType.ping && f.payload[0] === i,
      );
    }
    const flooder = await open(server.port);
    for (let i = 0; i < 4; i++)
      flooder.send(frame(FrameType.ping, 0, 0, Buffer.alloc(8, i)));
    const goaway = await flooder.waitFor((f) => f.type === FrameType.goaway);
    expect(goaway.payload.readUInt32BE(4)).toBe(ErrorCode.enhanceYourCalm);
    expect(goaway.payload.subarray(8).toString()).toBe("too_many_pings");
    expect(flooder.frames.filter((f) => f.type === FrameType.ping).length).toBe(
      3,
    );
    expect(patient.frames.some((f) => f.type === FrameType.goaway)).toBe(false);
  });

  for (const [what, junk] of [
    ["WINDOW_UPDATE", () => frame(FrameType.windowUpdate, 0, 0, u32(1))],
    [
      "PRIORITY",
      () => frame(FrameType.priority, 0, 3, Buffer.from([0, 0, 0, 0, 16])),
    ],
    [
      "SETTINGS",
      () =>
        frame(
          FrameType.settings,
          0,
          0,
          settingsPayload([[SettingId.initialWindowSize, 70_000]]),
        ),
    ],
    ["unknown-type", () => frame(0x42, 0, 0, Buffer.alloc(3))],
  ] as const)
    it(`ends a ${what} flood with GOAWAY(ENHANCE_YOUR_CALM) within the flood limit`, async () => {
      const server = await start();
      const client = await open(server.port);
      const frames: Buffer[] = [];
      for (let i = 0; i < 1100; i++) frames.push(junk());
      client.send(Buffer.concat(frames));
      expect(await client.goawayCode()).toBe(ErrorCode.enhanceYourCalm);
      await closedWithin(client, 3000);
    });

  it("ends a flood of empty DATA frames on an open stream", async () => {
    const server = await start();
    const client = await open(server.port);
    const frames = [
      frame(
        FrameType.headers,
        Flag.endHeaders,
        1,
        headerBlock(grpcRequestFields()),
      ),
    ];
    for (let i = 0; i < 1100; i++) frames.push(frame(FrameType.data, 0, 1));
    client.send(Buffer.concat(frames));
    expect(await client.goawayCode()).toBe(ErrorCode.enhanceYourCalm);
  });

  it("keeps a reset stream's concurrency slot until its decision is done (rapid reset)", async () => {
    const server = await start({ maxConcurrentStreams: 2 });
    const client = await open(server.port);
    client.send(
      Buffer.concat([
        unaryCall(1, "hang"),
        frame(FrameType.rstStream, 0, 1, u32(ErrorCode.cancel)),
        unaryCall(3, "hang"),
        frame(FrameType.rstStream, 0, 3, u32(ErrorCode.cancel)),
        unaryCall(5, "a"),
      ]),
    );
    const refused = await client.waitFor((f) => f.type === FrameType.rstStream);
    expect([refused.streamId, refused.payload.readUInt32BE(0)]).toEqual([
      5,
      ErrorCode.refusedStream,
    ]);
    for (const release of pending.splice(0)) release();
    await new Promise((resolve) => setTimeout(resolve, 20));
    client.send(unaryCall(7, "a"));
    expect((await response(client, 7)).trailers).toEqual({
      "grpc-status": "0",
    });
  });

  it("ends a connection that keeps opening streams beyond the limit (refused streams count)", async () => {
    const server = await start({ maxConcurrentStreams: 1 });
    const client = await open(server.port);
    const frames = [unaryCall(1, "hang")];
    for (let id = 3; id < 3 + 2 * 120; id += 2)
      frames.push(
        frame(
          FrameType.headers,
          Flag.endHeaders,
          id,
          headerBlock(grpcRequestFields()),
        ),
      );
    client.send(Buffer.concat(frames));
    expect(await client.goawayCode()).toBe(ErrorCode.enhanceYourCalm);
  });

  it("refuses a stream whose header list would exceed the header share (a quarter) of the connection's memory budget (RST_STREAM ENHANCE_YOUR_CALM)", async () => {
    const server = await start({ maxConnectionMemoryBytes: 16_000 });
    const client = await open(server.port);
    const big: [string, string][] = [];
    for (let i = 0; i < 20; i++) big.push([`x-h${String(i)}`, "v".repeat(100)]);
    client.send(
      Buffer.concat([
        frame(
          FrameType.headers,
          Flag.endHeaders,
          1,
          headerBlock(grpcRequestFields(big)),
        ),
        frame(
          FrameType.headers,
          Flag.endHeaders,
          3,
          headerBlock(grpcRequestFields(big)),
        ),
      ]),
    );
    const rst = await client.waitFor((f) => f.type === FrameType.rstStream);
    expect([rst.streamId, rst.payload.readUInt32BE(0)]).toEqual([
      3,
      ErrorCode.enhanceYourCalm,
    ]);
  });

  it("answers 404 for an unknown path only once the request has ended, discarding its body", async () => {
    const server = await start();
    const client = await open(server.port);
    client.send(
      frame(
        FrameType.headers,
        Flag.endHeaders,
        1,
        headerBlock([
          [":method", "POST"],
          [":scheme", "http"],
          [":path", "/nowhere"],
          [":authority", "localhost"],
        ]),
      ),
    );
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(client.on(1)).toEqual([]);
    client.send(frame(FrameType.data, Flag.endStream, 1, Buffer.alloc(100)));
    const r = await response(client, 1);
    expect(r.headers[":status"]).toBe("404");
    expect(client.frames.some((f) => f.type === FrameType.rstStream)).toBe(
      false,
    );
  });

  it("closes connections beyond the process's maximum at once, counted", async () => {
    const events: Http2Event[] = [];
    const server = await startBuiltinHttp2Server({
      dispatcher: createConnectDispatcher({
        routes: () => undefined,
        logger: silentLogger(),
      }),
      logger: silentLogger(),
      target: { host: "127.0.0.1", port: 0 },
      maxConnections: 2,
      onEvent: (e) => events.push(e),
    });
    servers.push(server);
    const a = await open(server.port);
    const b = await open(server.port);
    await a.waitFor((f) => f.type === FrameType.settings);
    await b.waitFor((f) => f.type === FrameType.settings);
    const c = await open(server.port);
    await closedWithin(c, 3000);
    expect(c.frames).toEqual([]);
    expect(events).toEqual(["connection_limit"]);
  });
});
