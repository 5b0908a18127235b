import type {
  Http2SecureServer,
  Http2Server,
  IncomingHttpHeaders,
  ServerHttp2Stream,
} from "node:http2";
import { fromBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Logger } from "pino";
import { RateLimitRequestSchema, type RateLimitRequest } from "../proto.js";
import { encodeRateLimitResponseFrame } from "./rate-limit-response-encoder.js";
import type { ShouldRateLimitHandler } from "./should-rate-limit-handler.js";

/** Options of {@link installGrpcFastPath}. */
export interface GrpcFastPathOptions {
  /** The shared ShouldRateLimit entry point (the Connect router calls the same one). */
  readonly handler: ShouldRateLimitHandler;
  /** Largest accepted request message, in bytes (gRPC default 4 MiB). */
  readonly readMaxBytes: number;
  readonly logger: Logger;
}

const shouldRateLimitPath =
  "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

type StreamListener = (
  stream: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
  flags: number,
  rawHeaders: string[],
) => void;

/**
 * Puts a direct HTTP/2 handler for the common call in front of the Connect router: unary gRPC
 * `ShouldRateLimit` with `application/grpc` or `application/grpc+proto` and identity encoding
 * is decoded with the generated protobuf-es types and answered from the stream, calling the
 * same {@link ShouldRateLimitHandler}. Everything else (other methods, gRPC-web, Connect,
 * compressed requests, JSON codecs) goes to the router untouched.
 *
 * Why: Connect's per-call async-iterable pipeline, abort controllers and header objects cost
 * about 10× the decision itself (stack-facts.md). What a gRPC server must do is done here too:
 * `grpc-timeout` deadlines (DEADLINE_EXCEEDED), the compressed flag (INTERNAL: identity
 * encoding was announced), messages over `readMaxBytes` (RESOURCE_EXHAUSTED), malformed
 * envelopes (INTERNAL) and messages (INVALID_ARGUMENT), client cancellation (nothing is
 * written), trailers-only error responses. The codes and messages match what the Connect path
 * answers for the same request (test/integration/fast-path-equivalence.test.ts).
 */
export function installGrpcFastPath(
  server: Http2Server | Http2SecureServer,
  options: GrpcFastPathOptions,
): void {
  // The compat layer (which builds req/res objects for Connect) is itself a "stream"
  // listener; take it over and call it only for what the fast path does not serve.
  const fallback = server.listeners("stream") as StreamListener[];
  server.removeAllListeners("stream");
  server.on(
    "stream",
    (
      stream: ServerHttp2Stream,
      headers: IncomingHttpHeaders,
      flags: number,
      rawHeaders: string[],
    ) => {
      if (isFastPathCall(headers)) {
        serveUnary(stream, headers, options);
        return;
      }
      for (const listener of fallback)
        listener.call(server, stream, headers, flags, rawHeaders);
    },
  );
}

function isFastPathCall(headers: IncomingHttpHeaders): boolean {
  if (headers[":path"] !== shouldRateLimitPath || headers[":method"] !== "POST")
    return false;
  const contentType = headers["content-type"];
  if (
    contentType !== "application/grpc" &&
    contentType !== "application/grpc+proto"
  )
    return false;
  const encoding = headers["grpc-encoding"];
  return encoding === undefined || encoding === "identity";
}

/**
 * Parses a `grpc-timeout` header (`<1-8 digits><H|M|S|m|u|n>`) into milliseconds.
 *
 * @returns the timeout in ms, `undefined` when absent, `NaN` when malformed
 */
export function parseGrpcTimeoutMs(
  value: string | string[] | undefined,
): number | undefined {
  if (value === undefined) return undefined;
  const text = Array.isArray(value) ? value[0] : value;
  const match = /^(\d{1,8})([HMSmun])$/.exec(text ?? "");
  if (match === null) return Number.NaN;
  const amount = Number(match[1]);
  return amount * (msPerTimeoutUnit[match[2] ?? ""] ?? Number.NaN);
}

const msPerTimeoutUnit: Readonly<Record<string, number>> = {
  H: 3_600_000,
  M: 60_000,
  S: 1000,
  m: 1,
  u: 0.001,
  n: 0.000001,
};

/** One unary call on one stream: read the envelope, decide, answer once. */
function serveUnary(
  stream: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
  options: GrpcFastPathOptions,
): void {
  const contentType = headers["content-type"] ?? "application/grpc";
  const maxBytes = options.readMaxBytes;
  let answered = false;
  let deadline: NodeJS.Timeout | undefined;
  const chunks: Buffer[] = [];
  let received = 0;

  const fail = (code: Code, message: string): void => {
    if (answered) return;
    answered = true;
    clearTimeout(deadline);
    if (stream.destroyed || stream.closed) return;
    // Trailers-only response: status in the only header block.
    stream.respond(
      {
        ":status": 200,
        "content-type": contentType,
        "grpc-status": String(code),
        "grpc-message": encodeURIComponent(message),
      },
      { endStream: true },
    );
  };

  const succeed = (frame: Buffer): void => {
    if (answered) return;
    answered = true;
    clearTimeout(deadline);
    if (stream.destroyed || stream.closed) return;
    stream.respond(
      { ":status": 200, "content-type": contentType },
      { waitForTrailers: true },
    );
    stream.once("wantTrailers", () => {
      stream.sendTrailers({ "grpc-status": "0" });
    });
    stream.end(frame);
  };

  const timeoutMs = parseGrpcTimeoutMs(headers["grpc-timeout"]);
  if (timeoutMs !== undefined) {
    if (Number.isNaN(timeoutMs)) {
      fail(
        Code.InvalidArgument,
        `protocol error: invalid grpc timeout value: ${String(headers["grpc-timeout"])}`,
      );
      stream.resume();
      return;
    }
    deadline = setTimeout(() => {
      fail(Code.DeadlineExceeded, "the operation timed out");
    }, timeoutMs);
  }

  // The client cancelled or the connection went away: there is nobody to answer.
  stream.once("aborted", () => {
    answered = true;
    clearTimeout(deadline);
  });
  stream.once("close", () => {
    clearTimeout(deadline);
  });
  stream.on("error", (err) => {
    options.logger.debug({ err }, "grpc stream error");
  });

  stream.on("data", (chunk: Buffer) => {
    if (answered) return;
    received += chunk.length;
    if (received > maxBytes + 5) {
      fail(
        Code.ResourceExhausted,
        `message size is larger than configured readMaxBytes ${maxBytes}`,
      );
      return;
    }
    chunks.push(chunk);
  });

  stream.once("end", () => {
    if (answered) return;
    let request: RateLimitRequest;
    try {
      request = decodeUnaryEnvelope(Buffer.concat(chunks), maxBytes);
    } catch (err) {
      const e = ConnectError.from(err);
      fail(e.code, e.rawMessage);
      return;
    }
    // The headers carry the caller's trace context (read only when tracing is on).
    options.handler(request, headers).then(
      (response) => {
        succeed(encodeRateLimitResponseFrame(response));
      },
      (err: unknown) => {
        const e = ConnectError.from(err);
        fail(e.code, e.rawMessage);
      },
    );
  });
}

/**
 * Decodes the body of a unary gRPC call: exactly one uncompressed envelope
 * (`flags:u8 length:u32be message`) holding a `RateLimitRequest`.
 *
 * @throws {@link ConnectError} (codes as Connect's gRPC handler answers them) UNIMPLEMENTED
 *   for zero or several messages (gRPC's cardinality rule), INVALID_ARGUMENT for a truncated
 *   envelope or an undecodable message, INTERNAL for a compressed flag without an encoding,
 *   RESOURCE_EXHAUSTED when the message is larger than `maxBytes`
 */
export function decodeUnaryEnvelope(
  body: Buffer,
  maxBytes: number,
): RateLimitRequest {
  if (body.length === 0) {
    throw new ConnectError(
      "protocol error: missing input message for unary method",
      Code.Unimplemented,
    );
  }
  if (body.length < 5)
    throw new ConnectError(
      "protocol error: incomplete envelope",
      Code.InvalidArgument,
    );
  const flags = body.readUInt8(0);
  const length = body.readUInt32BE(1);
  if (length > maxBytes) {
    throw new ConnectError(
      `message size ${length} is larger than configured readMaxBytes ${maxBytes}`,
      Code.ResourceExhausted,
    );
  }
  if (body.length < 5 + length)
    throw new ConnectError(
      "protocol error: incomplete envelope",
      Code.InvalidArgument,
    );
  if (body.length > 5 + length) {
    throw new ConnectError(
      "protocol error: received extra input message for unary method",
      Code.Unimplemented,
    );
  }
  if ((flags & 0b1) === 0b1) {
    throw new ConnectError(
      "received compressed envelope, but do not know how to decompress",
      Code.Internal,
    );
  }
  if (flags !== 0)
    throw new ConnectError(
      `protocol error: invalid envelope flags ${flags}`,
      Code.Internal,
    );
  try {
    return fromBinary(RateLimitRequestSchema, body.subarray(5));
  } catch (err) {
    throw new ConnectError(
      `parse binary: ${err instanceof Error ? err.message : String(err)}`,
      Code.InvalidArgument,
    );
  }
}
