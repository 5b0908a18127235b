import { connect, type IncomingHttpHeaders } from "node:http2";
import { connect as tcpConnect, type Socket } from "node:net";
import { Writable } from "node:stream";
import { create, toBinary } from "@bufbuild/protobuf";
import { pino, type Logger } from "pino";
import { silentLogger } from "../helpers/silent-logger.js";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import {
  RateLimitRequestSchema,
  RateLimitResponse_Code,
  RateLimitResponseSchema,
  RateLimitService,
  type RateLimitRequest,
  type RateLimitResponse,
} from "../../src/proto.js";
import { ErrorCode, Flag, FrameType } from "../../src/http2/frames.js";
import type { Http2Event } from "../../src/http2/limits.js";
import {
  startGrpcServer,
  type GrpcServerOptions,
} from "../../src/server/grpc/grpc-server.js";
import type { Listening } from "../../src/server/listen.js";
import { TestPki } from "../helpers/certs.js";
import { startTestApp } from "../helpers/rls-app.js";
import {
  frame,
  grpcRequestFields,
  headerBlock,
  RawH2Client,
} from "../helpers/h2-raw-client.js";
import { envelope } from "../helpers/raw-grpc.js";

// The node:http2 engine (GRPC_HTTP2_ENGINE=node) against hostile clients: a client must not
// crash the process, and PING and SETTINGS floods, idle connections, silent connections and
// connections past the maximum are ended by the limits, each counted by an event. Every call
// goes through the Connect router, as in the service.

const path = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

const servers: Listening[] = [];
const clients: RawH2Client[] = [];
const sockets: Socket[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  for (const s of sockets.splice(0)) s.destroy();
  for (const s of servers.splice(0)) await s.close(0);
});

/** Answers domain `slow` after 600 ms and anything else at once, OK. */
function shouldRateLimit(req: RateLimitRequest): Promise<RateLimitResponse> {
  const ok = create(RateLimitResponseSchema, {
    overallCode: RateLimitResponse_Code.OK,
  });
  return req.domain === "slow"
    ? new Promise((resolve) => setTimeout(resolve, 600, ok))
    : Promise.resolve(ok);
}

/**
 * A node-engine server whose Connect router serves ShouldRateLimit with
 * {@link shouldRateLimit}; its events go to `events`.
 */
async function start(
  events: Http2Event[] = [],
  extra: Partial<GrpcServerOptions> = {},
): Promise<Listening> {
  const server = await startGrpcServer({
    engine: "node",
    routes: (router) => {
      router.service(RateLimitService, { shouldRateLimit });
    },
    logger: silentLogger(),
    host: "127.0.0.1",
    port: 0,
    onEvent: (event) => {
      events.push(event);
    },
    ...extra,
  });
  servers.push(server);
  return server;
}

async function open(
  port: number,
  options: { preface?: boolean } = {},
): Promise<RawH2Client> {
  const client = await RawH2Client.open(port, options);
  clients.push(client);
  return client;
}

/** A TCP connection that sends nothing. */
async function silent(port: number): Promise<{ closed: Promise<void> }> {
  const socket = tcpConnect({ host: "127.0.0.1", port });
  sockets.push(socket);
  socket.on("error", () => undefined);
  socket.resume(); // read, to see the server's FIN
  const closed = new Promise<void>((resolve) => socket.on("close", resolve));
  await new Promise((resolve) => socket.once("connect", resolve));
  return { closed };
}

function requestBody(domain = "d"): Buffer {
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

/** One ShouldRateLimit call with node's client on a new connection: its gRPC status. */
async function call(port: number): Promise<string> {
  const session = connect(`http://127.0.0.1:${port}`);
  session.on("error", () => undefined);
  try {
    return await new Promise<string>((resolve) => {
      const stream = session.request({
        ":method": "POST",
        ":path": path,
        "content-type": "application/grpc",
        te: "trailers",
      });
      let status = "none";
      stream.on("response", (h) => {
        status = String(h["grpc-status"] ?? status);
      });
      stream.on("trailers", (t: IncomingHttpHeaders) => {
        status = String(t["grpc-status"] ?? status);
      });
      stream.on("error", () => {
        resolve("failed");
      });
      stream.on("close", () => {
        resolve(status);
      });
      stream.resume();
      stream.end(requestBody());
    });
  } finally {
    session.close();
  }
}

/** Sends a whole ShouldRateLimit call on `streamId` of a raw connection. */
function sendCall(client: RawH2Client, streamId: number, domain = "d"): void {
  client.send(
    Buffer.concat([
      frame(
        FrameType.headers,
        Flag.endHeaders,
        streamId,
        headerBlock(grpcRequestFields()),
      ),
      frame(FrameType.data, Flag.endStream, streamId, requestBody(domain)),
    ]),
  );
}

/** Waits for the frame that ends the response on `streamId` (trailers). */
function responseEnd(client: RawH2Client, streamId: number, timeoutMs = 2000) {
  return client.waitFor(
    (f) =>
      f.streamId === streamId &&
      f.type === FrameType.headers &&
      (f.flags & Flag.endStream) !== 0,
    timeoutMs,
  );
}

/** A GOAWAY payload: last stream id, error code. */
function goaway(code: number): Buffer {
  const out = Buffer.alloc(8);
  out.writeUInt32BE(0, 0);
  out.writeUInt32BE(code, 4);
  return out;
}

function ping(n: number): Buffer {
  const payload = Buffer.alloc(8);
  payload.writeUInt32BE(n, 4);
  return frame(FrameType.ping, 0, 0, payload);
}

describe("gRPC server (node engine) against hostile clients", () => {
  it("survives a client GOAWAY after a call with a malformed grpc-timeout", async () => {
    const server = await start();
    for (let round = 0; round < 3; round++) {
      const client = await open(server.port);
      // HEADERS without END_STREAM: the call is answered (INVALID_ARGUMENT) while the
      // request side stays open, then the client's GOAWAY with an error destroys the stream.
      client.send(
        frame(
          FrameType.headers,
          Flag.endHeaders,
          1,
          headerBlock(grpcRequestFields([["grpc-timeout", "x"]])),
        ),
      );
      // (The Connect router answers it in the trailers: decode every block, in order.)
      await responseEnd(client, 1);
      const fields = client
        .on(1)
        .filter((f) => f.type === FrameType.headers)
        .map((f) => client.decodeHeaders(f));
      expect(fields.at(-1)?.["grpc-status"]).toBe("3");
      client.send(
        frame(FrameType.goaway, 0, 0, goaway(ErrorCode.protocolError)),
      );
      await client.closed;
      expect(await call(server.port)).toBe("0");
    }
  });

  it("closes only the connection of a call whose serving throws, logged once", async () => {
    // Connect's Node adapter throws synchronously for a request whose :authority makes no URL
    // (nghttp2 accepts "a:b:c", `new URL` does not): contained, as any exception in serving.
    const lines: string[] = [];
    const logger: Logger = pino(
      { level: "warn" },
      new Writable({
        write(chunk: Buffer, _encoding, done) {
          lines.push(chunk.toString());
          done();
        },
      }),
    );
    const events: Http2Event[] = [];
    const server = await start(events, { logger });
    const client = await open(server.port);
    const badAuthority = headerBlock(
      grpcRequestFields().map(([name, value]): [string, string] => [
        name,
        name === ":authority" ? "a:b:c" : value,
      ]),
    );
    for (const id of [1, 3])
      client.send(
        Buffer.concat([
          frame(FrameType.headers, Flag.endHeaders, id, badAuthority),
          frame(FrameType.data, Flag.endStream, id, requestBody()),
        ]),
      );
    expect(await client.goawayCode()).toBe(ErrorCode.internalError);
    await client.closed;
    expect(events).toEqual(["internal_error"]);
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0] ?? "{}")).toMatchObject({
      level: 40,
      peer: expect.stringMatching(/^127\.0\.0\.1:\d+$/) as unknown,
      err: {
        message: expect.stringContaining("Invalid URL") as unknown,
      },
    });
    expect(await call(server.port)).toBe("0");
  });

  it("ends a PING flood with GOAWAY ENHANCE_YOUR_CALM within a few frames, serving others", async () => {
    const events: Http2Event[] = [];
    const server = await start(events);
    const flooder = await open(server.port);
    for (let i = 0; i < 20; i++) flooder.send(ping(i));
    const away = await flooder.waitFor((f) => f.type === FrameType.goaway);
    expect(away.payload.readUInt32BE(4)).toBe(ErrorCode.enhanceYourCalm);
    expect(away.payload.subarray(8).toString()).toBe("too_many_pings");
    // grpc-go's rule ends the connection on the third strike. nghttp2 acknowledges PINGs by
    // itself, and the session is destroyed only after the callback that decided it (Node can
    // abort when a session is destroyed from inside one), so the PINGs already read are
    // acknowledged; the flood then stops: the 20 sent here, not an endless stream.
    const acks = flooder.frames.filter((f) => f.type === FrameType.ping);
    expect(acks.length).toBeLessThanOrEqual(20);
    await flooder.closed;
    expect(events.filter((e) => e === "enhance_your_calm")).toHaveLength(1);
    expect(await call(server.port)).toBe("0");
  });

  it("forgives PINGs that each follow a response", async () => {
    const server = await start();
    const client = await open(server.port);
    for (let i = 0; i < 5; i++) {
      const id = 2 * i + 1;
      sendCall(client, id);
      await responseEnd(client, id);
      // Let the stream close on the server before the PING.
      await new Promise((resolve) => setTimeout(resolve, 20));
      client.send(ping(i));
      await client.waitFor(
        (f) =>
          f.type === FrameType.ping &&
          (f.flags & Flag.ack) !== 0 &&
          f.payload.readUInt32BE(4) === i,
      );
    }
    expect(client.frames.some((f) => f.type === FrameType.goaway)).toBe(false);
  });

  it("ends a SETTINGS flood with GOAWAY ENHANCE_YOUR_CALM", async () => {
    const events: Http2Event[] = [];
    const server = await start(events);
    const flooder = await open(server.port);
    flooder.send(
      Buffer.concat(
        Array.from({ length: 150 }, () => frame(FrameType.settings, 0, 0)),
      ),
    );
    expect(await flooder.goawayCode()).toBe(ErrorCode.enhanceYourCalm);
    await flooder.closed;
    expect(events).toContain("enhance_your_calm");
    expect(await call(server.port)).toBe("0");
  });

  it("refuses streams past the header share of the memory budget, then ends a connection that keeps trying", async () => {
    const events: Http2Event[] = [];
    // Header lists may take a quarter of the budget: 16 KiB.
    const server = await start(events, { maxConnectionMemoryBytes: 65_536 });
    const client = await open(server.port);
    // ~10 KiB header lists (10 fields of 1,000 bytes, one frame) on streams that never end.
    const pad = Array.from({ length: 10 }, (_, i): [string, string] => [
      `x-pad-${i}`,
      "p".repeat(1000),
    ]);
    const block = headerBlock(grpcRequestFields(pad));
    client.send(frame(FrameType.headers, Flag.endHeaders, 1, block));
    client.send(frame(FrameType.headers, Flag.endHeaders, 3, block));
    const refused = await client.waitFor(
      (f) => f.type === FrameType.rstStream && f.streamId === 3,
    );
    expect(refused.payload.readUInt32BE(0)).toBe(ErrorCode.enhanceYourCalm);
    expect(client.on(1)).toEqual([]);
    expect(events).toEqual([]);
    // A small call still fits beside the held list.
    sendCall(client, 5);
    await responseEnd(client, 5);
    for (let id = 7; id < 7 + 2 * 101; id += 2)
      client.send(frame(FrameType.headers, Flag.endHeaders, id, block));
    const away = await client.waitFor((f) => f.type === FrameType.goaway);
    expect(away.payload.readUInt32BE(4)).toBe(ErrorCode.enhanceYourCalm);
    expect(away.payload.subarray(8).toString()).toBe("memory_budget");
    await client.closed;
    expect(events).toEqual(["enhance_your_calm"]);
    expect(await call(server.port)).toBe("0");
  });

  it("ends a connection whose open calls buffer more body bytes than its budget", async () => {
    const events: Http2Event[] = [];
    const server = await start(events, { maxConnectionMemoryBytes: 65_536 });
    const client = await open(server.port);
    // 16 KiB of a larger message on each stream, never ended: the router buffers it.
    const body = Buffer.alloc(16 * 1024);
    body.writeUInt32BE(100_000, 1);
    for (let id = 1; id <= 11 && !client.socket.destroyed; id += 2) {
      client.send(
        Buffer.concat([
          frame(
            FrameType.headers,
            Flag.endHeaders,
            id,
            headerBlock(grpcRequestFields()),
          ),
          frame(FrameType.data, 0, id, body),
        ]),
      );
      // Let the server read it and open the connection window again.
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(await client.goawayCode()).toBe(ErrorCode.enhanceYourCalm);
    await client.closed;
    expect(events).toEqual(["enhance_your_calm"]);
    // Calls that end keep their memory only while open: 10 in turn fit the same budget.
    const calls = await Promise.all(
      Array.from({ length: 10 }, () => call(server.port)),
    );
    expect(calls).toEqual(Array.from({ length: 10 }, () => "0"));
  });

  it("sends GOAWAY to a connection idle for the idle time, not while a call is open", async () => {
    const events: Http2Event[] = [];
    const server = await start(events, { maxConnectionIdleMs: 300 });
    const idle = await open(server.port);
    const busy = await open(server.port);
    const openedAt = Date.now();
    sendCall(busy, 1, "slow");
    expect(await idle.goawayCode()).toBe(ErrorCode.noError);
    expect(Date.now() - openedAt).toBeGreaterThanOrEqual(250);
    await idle.closed;
    // The slow call (600 ms) outlives the idle time: its connection stays until after it.
    await responseEnd(busy, 1);
    expect(busy.frames.some((f) => f.type === FrameType.goaway)).toBe(false);
    const answeredAt = Date.now();
    expect(await busy.goawayCode()).toBe(ErrorCode.noError);
    expect(Date.now() - answeredAt).toBeGreaterThanOrEqual(250);
    expect(events).toEqual(["idle_timeout", "idle_timeout"]);
  });

  it("closes a cleartext connection that sends nothing within the handshake timeout", async () => {
    const events: Http2Event[] = [];
    const server = await start(events, { handshakeTimeoutMs: 300 });
    const talker = await open(server.port);
    const openedAt = Date.now();
    const { closed } = await silent(server.port);
    await closed;
    expect(Date.now() - openedAt).toBeGreaterThanOrEqual(250);
    expect(events).toEqual(["handshake_timeout"]);
    // A client that sent its preface and SETTINGS is served as before.
    sendCall(talker, 1);
    await responseEnd(talker, 1);
  });

  describe("over TLS", () => {
    const pki = new TestPki();
    afterAll(() => {
      pki.remove();
    });

    it("closes a connection that does not complete the TLS handshake in time", async () => {
      const ca = pki.ca("ca");
      const leaf = pki.leaf("server", ca, "DNS:localhost,IP:127.0.0.1");
      const events: Http2Event[] = [];
      const server = await start(events, {
        handshakeTimeoutMs: 300,
        tls: { certFile: leaf.cert, keyFile: leaf.key },
      });
      const openedAt = Date.now();
      const { closed } = await silent(server.port);
      await closed;
      expect(Date.now() - openedAt).toBeGreaterThanOrEqual(250);
      expect(events).toEqual(["handshake_timeout"]);
    });
  });

  it("closes connections past the maximum on accept", async () => {
    const events: Http2Event[] = [];
    const server = await start(events, { maxConnections: 2 });
    const first = await open(server.port);
    await open(server.port);
    const { closed } = await silent(server.port);
    await closed;
    expect(events).toEqual(["connection_limit"]);
    sendCall(first, 1);
    await responseEnd(first, 1);
  });

  it("counts events as ratelimit.server.http2.<event> in the service, none before one happens", async () => {
    const t = await startTestApp(
      { "rl.yaml": "domain: rl\n" },
      { GRPC_HTTP2_ENGINE: "node", GRPC_KEEPALIVE_MIN_TIME: "1m" },
    );
    try {
      const http2Counters = () =>
        t.app.statsManager.store
          .snapshot()
          .counters.filter((c) => c.name.startsWith("ratelimit.server.http2"))
          .map((c) => [c.name, c.value()]);
      const port = Number(t.addresses.grpc.split(":").pop());
      expect(await call(port)).toBe("0");
      expect(http2Counters()).toEqual([]);
      const flooder = await open(port);
      for (let i = 0; i < 10; i++) flooder.send(ping(i));
      expect(await flooder.goawayCode()).toBe(ErrorCode.enhanceYourCalm);
      await flooder.closed;
      expect(http2Counters()).toEqual([
        ["ratelimit.server.http2.enhance_your_calm", 1],
      ]);
    } finally {
      await t.stop();
    }
  });
});
