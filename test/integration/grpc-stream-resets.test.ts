import {
  connect,
  constants,
  type ClientHttp2Session,
  type ClientHttp2Stream,
  type IncomingHttpHeaders,
} from "node:http2";
import { create, toBinary } from "@bufbuild/protobuf";
import { silentLogger } from "../helpers/silent-logger.js";
import { afterEach, describe, expect, it } from "vitest";
import {
  RateLimitRequestSchema,
  RateLimitResponse_Code,
  RateLimitResponseSchema,
  RateLimitService,
  type RateLimitRequest,
  type RateLimitResponse,
} from "../../src/proto.js";
import {
  startGrpcServer,
  type GrpcServerOptions,
} from "../../src/server/grpc/grpc-server.js";
import { http2ServerOptions } from "../../src/server/grpc/node-listener.js";
import type { Listening } from "../../src/server/listen.js";
import { envelope } from "../helpers/raw-grpc.js";
import { request } from "../helpers/requests.js";

// Envoy resets (RST_STREAM) every call that misses its rate-limit filter's timeout. Under a
// burst of late answers that is hundreds of resets a second on one connection, for seconds;
// within the reset limit (GRPC_STREAM_RESET_BURST, GRPC_STREAM_RESET_RATE: 1000 at once,
// 1000/s after, far above Node's 33/s) the service must keep that connection (no GOAWAY) and
// keep answering on it.

const path = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/** One framed gRPC message: a request of `domain` with the descriptor `k=v`. */
function framedRequest(domain: string): Buffer {
  return envelope(
    toBinary(RateLimitRequestSchema, request(domain, [["k", "v"]])),
  );
}

const servers: Listening[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await s.close(0);
});

/**
 * Answers domain `late` after 100 ms (a store stall: Envoy has reset the call by then) and
 * anything else at once, OK.
 */
function shouldRateLimit(req: RateLimitRequest): Promise<RateLimitResponse> {
  const ok = create(RateLimitResponseSchema, {
    overallCode: RateLimitResponse_Code.OK,
  });
  return req.domain === "late"
    ? new Promise((resolve) => setTimeout(resolve, 100, ok))
    : Promise.resolve(ok);
}

/**
 * A server wired as the service wires it: {@link shouldRateLimit} on the Connect router, and
 * inline on the built-in engine (the node engine serves every call through the router).
 */
async function start(
  extra: Partial<GrpcServerOptions> = {},
): Promise<Listening> {
  const server = await startGrpcServer({
    routes: (router) => {
      router.service(RateLimitService, { shouldRateLimit });
    },
    logger: silentLogger(),
    host: "127.0.0.1",
    port: 0,
    fastPath: shouldRateLimit,
    ...extra,
  });
  servers.push(server);
  return server;
}

function open(session: ClientHttp2Session, domain: string): ClientHttp2Stream {
  const stream = session.request({
    ":method": "POST",
    ":path": path,
    "content-type": "application/grpc",
    te: "trailers",
  });
  stream.on("error", () => undefined);
  stream.end(framedRequest(domain));
  return stream;
}

/**
 * Opens `total` calls the server answers late and cancels each, `batch` at a time, at
 * least `periodMs` apart.
 */
async function cancelCalls(
  session: ClientHttp2Session,
  total: number,
  batch: number,
  periodMs = 10,
): Promise<void> {
  for (let done = 0; done < total && !session.closed; done += batch) {
    const started = Date.now();
    const streams = Array.from({ length: batch }, () => open(session, "late"));
    // Let the server receive the calls, as Envoy's timeout fires after sending them.
    await new Promise((resolve) => setTimeout(resolve, 5));
    for (const s of streams) s.close(constants.NGHTTP2_CANCEL);
    // (After a GOAWAY the streams' close callbacks may never run: wait a moment instead.)
    await new Promise((resolve) => setTimeout(resolve, 5));
    const left = periodMs - (Date.now() - started);
    if (left > 0) await new Promise((resolve) => setTimeout(resolve, left));
  }
}

/** One call on `session`: its gRPC status, or `"failed"` when the stream errored. */
function call(session: ClientHttp2Session): Promise<string> {
  return new Promise((resolve) => {
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
    stream.end(framedRequest("ok"));
  });
}

describe.each(["builtin", "node"] as const)(
  "gRPC server (%s engine) under client stream resets",
  (engine) => {
    it("keeps the connection through 3000 cancelled calls at 800/s and answers on it", async () => {
      const server = await start({ engine });
      const session = connect(`http://127.0.0.1:${server.port}`);
      session.on("error", () => undefined);
      let goaway = false;
      session.on("goaway", () => {
        goaway = true;
      });
      // 3000 resets (three times the burst) over ~3.75 s, below the default rate.
      await cancelCalls(session, 3000, 100, 125);
      expect(goaway).toBe(false);
      expect(session.closed || session.destroyed).toBe(false);
      expect(await call(session)).toBe("0");
      session.close();
    });

    it("still sends GOAWAY to a peer beyond a configured limit", async () => {
      const server = await start({
        engine,
        streamResetLimit: { burst: 50, ratePerSecond: 1 },
      });
      const session = connect(`http://127.0.0.1:${server.port}`);
      session.on("error", () => undefined);
      const goaway = new Promise<number>((resolve) => {
        session.on("goaway", (code: number) => {
          resolve(code);
        });
      });
      await cancelCalls(session, 1000, 100);
      // nghttp2 answers an exceeded reset limit with GOAWAY(INTERNAL_ERROR), the built-in
      // engine with ENHANCE_YOUR_CALM (RFC 9113 §7's code for a peer generating excess load).
      expect(await goaway).toBe(
        engine === "builtin"
          ? constants.NGHTTP2_ENHANCE_YOUR_CALM
          : constants.NGHTTP2_INTERNAL_ERROR,
      );
      session.destroy();
    });
  },
);

describe("gRPC server stream reset limit", () => {
  it("passes the default limit to node:http2", () => {
    expect(http2ServerOptions({})).toMatchObject({
      streamResetBurst: 1000,
      streamResetRate: 1000,
    });
    expect(
      http2ServerOptions({ streamResetLimit: { burst: 7, ratePerSecond: 3 } }),
    ).toMatchObject({ streamResetBurst: 7, streamResetRate: 3 });
  });
});
