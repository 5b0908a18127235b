import { connect, type IncomingHttpHeaders } from "node:http2";
import { create, toBinary } from "@bufbuild/protobuf";
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import {
  RateLimitRequestSchema,
  RateLimitResponse_Code,
  RateLimitResponseSchema,
} from "../../src/proto.js";
import { ErrorCode, Flag, FrameType } from "../../src/server/h2/frames.js";
import {
  startGrpcServer,
  type GrpcServerOptions,
} from "../../src/server/grpc-server.js";
import type { Listening } from "../../src/server/listen.js";
import {
  frame,
  grpcRequestFields,
  headerBlock,
  RawH2Client,
} from "../helpers/h2-raw-client.js";
import { envelope } from "../helpers/raw-grpc.js";

// The node:http2 engine (GRPC_HTTP2_ENGINE=node) against hostile clients: a client must not
// crash the process, and floods, idle and silent connections are ended by the limits.

const path = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

const servers: Listening[] = [];
const clients: RawH2Client[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  for (const s of servers.splice(0)) await s.close(0);
});

/** A node-engine server answering OK on the fast path. */
async function start(
  extra: Partial<GrpcServerOptions> = {},
): Promise<Listening> {
  const server = await startGrpcServer({
    engine: "node",
    routes: () => undefined,
    logger: pino({ level: "silent" }),
    host: "127.0.0.1",
    port: 0,
    fastPath: () =>
      Promise.resolve(
        create(RateLimitResponseSchema, {
          overallCode: RateLimitResponse_Code.OK,
        }),
      ),
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

function requestBody(): Buffer {
  return envelope(
    toBinary(
      RateLimitRequestSchema,
      create(RateLimitRequestSchema, {
        domain: "d",
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

/** A GOAWAY payload: last stream id, error code. */
function goaway(code: number): Buffer {
  const out = Buffer.alloc(8);
  out.writeUInt32BE(0, 0);
  out.writeUInt32BE(code, 4);
  return out;
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
      const response = await client.waitFor(
        (f) => f.type === FrameType.headers && f.streamId === 1,
      );
      expect(client.decodeHeaders(response)["grpc-status"]).toBe("3");
      client.send(
        frame(FrameType.goaway, 0, 0, goaway(ErrorCode.protocolError)),
      );
      await client.closed;
      expect(await call(server.port)).toBe("0");
    }
  });
});
