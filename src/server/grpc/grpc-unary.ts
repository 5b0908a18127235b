import { Code, ConnectError } from "@connectrpc/connect";
import type { RateLimitRequest } from "../../proto.js";
import { decodeUnaryEnvelope, parseGrpcTimeoutMs } from "./grpc-fast-path.js";
import { encodeRateLimitResponseFrame } from "./rate-limit-response-encoder.js";
import type { ShouldRateLimitHandler } from "../should-rate-limit-handler.js";
import type { H2Stream, StreamSink } from "../../http2/h2-stream.js";
import { encodeHeaderBlock } from "../../http2/hpack.js";

// Unary gRPC ShouldRateLimit served inline on the built-in HTTP/2 engine: the same semantics,
// codes and messages as the node:http2 fast path (grpc-fast-path.ts), with one state object
// per call, no closures, and precomputed header blocks.

/** Options of {@link serveShouldRateLimit}. */
export interface GrpcUnaryOptions {
  /** The shared ShouldRateLimit entry point (the Connect router calls the same one). */
  readonly handler: ShouldRateLimitHandler;
  /** Largest accepted request message, in bytes (gRPC default 4 MiB). */
  readonly readMaxBytes: number;
}

const shouldRateLimitPath =
  "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

const contentTypes = ["application/grpc", "application/grpc+proto"] as const;

/** `:status 200` + content-type, per accepted content type (same index as contentTypes). */
const okHeaders = contentTypes.map((contentType) =>
  encodeHeaderBlock([
    [":status", "200"],
    ["content-type", contentType],
  ]),
);
const okTrailers = encodeHeaderBlock([["grpc-status", "0"]]);

/**
 * Index into the accepted content types when `stream` is a call the fast path serves:
 * `POST` ShouldRateLimit, `application/grpc` or `application/grpc+proto`, no or identity
 * `grpc-encoding`; -1 otherwise.
 */
export function fastPathContentType(stream: H2Stream): number {
  if (stream.path !== shouldRateLimitPath || stream.method !== "POST")
    return -1;
  let contentType = -1;
  let encoding: string | undefined;
  const fields = stream.headerFields;
  for (let i = 0; i < fields.length; i += 2) {
    const name = fields[i];
    if (name === "content-type") {
      const value = fields[i + 1];
      contentType =
        value === contentTypes[0] ? 0 : value === contentTypes[1] ? 1 : -1;
    } else if (name === "grpc-encoding") {
      encoding = fields[i + 1];
    }
  }
  return encoding === undefined || encoding === "identity" ? contentType : -1;
}

/**
 * State of one unary call; also the stream's sink (its methods are the shared prototype's,
 * so a call allocates this one object).
 */
class UnaryCall implements StreamSink {
  readonly stream: H2Stream;
  readonly options: GrpcUnaryOptions;
  readonly contentType: number;
  answered = false;
  deadline: NodeJS.Timeout | undefined = undefined;
  /** The first chunk of the body; later ones (rare: large requests) go to `more`. */
  first: Buffer | undefined = undefined;
  more: Buffer[] | undefined = undefined;
  received = 0;

  constructor(
    stream: H2Stream,
    options: GrpcUnaryOptions,
    contentType: number,
  ) {
    this.stream = stream;
    this.options = options;
    this.contentType = contentType;
  }

  onData(stream: H2Stream, chunk: Buffer): void {
    stream.consumed(chunk.length);
    if (this.answered) return;
    this.received += chunk.length;
    const maxBytes = this.options.readMaxBytes;
    if (this.received > maxBytes + 5) {
      fail(
        this,
        Code.ResourceExhausted,
        `message size is larger than configured readMaxBytes ${maxBytes}`,
      );
      return;
    }
    if (this.first === undefined) this.first = chunk;
    else (this.more ??= [this.first]).push(chunk);
  }

  onEnd(): void {
    if (this.answered) return;
    let request: RateLimitRequest;
    try {
      request = decodeUnaryEnvelope(
        this.more !== undefined
          ? Buffer.concat(this.more)
          : (this.first ?? emptyBody),
        this.options.readMaxBytes,
      );
    } catch (err) {
      const e = ConnectError.from(err);
      fail(this, e.code, e.rawMessage);
      return;
    }
    this.first = undefined;
    this.more = undefined;
    this.stream.beginWork();
    void decide(this, request);
  }

  onAbort(): void {
    // The client cancelled or the connection went away: there is nobody to answer.
    this.answered = true;
    clearTimeout(this.deadline);
  }
}

/**
 * Serves `stream`, a call {@link fastPathContentType} accepted (`contentType` is its result):
 * reads the envelope, honours `grpc-timeout`, calls the handler, answers once.
 */
export function serveShouldRateLimit(
  stream: H2Stream,
  contentType: number,
  options: GrpcUnaryOptions,
): void {
  const call = new UnaryCall(stream, options, contentType);
  stream.sink = call;
  const timeout = stream.header("grpc-timeout");
  if (timeout === undefined) return;
  const timeoutMs = parseGrpcTimeoutMs(timeout);
  if (timeoutMs === undefined) return;
  if (Number.isNaN(timeoutMs)) {
    fail(
      call,
      Code.InvalidArgument,
      `protocol error: invalid grpc timeout value: ${timeout}`,
    );
    return;
  }
  call.deadline = setTimeout(onDeadline, timeoutMs, call);
}

/**
 * Runs the decision; `async` rather than `.then` callbacks: no closures per call. The stream
 * holds its concurrency slot until the decision is done, even if the client resets it. Never
 * rejects: an exception while answering (a bug) is contained by the stream's connection.
 */
async function decide(
  call: UnaryCall,
  request: RateLimitRequest,
): Promise<void> {
  const stream = call.stream;
  try {
    let frame: Buffer;
    try {
      // The stream carries the header fields (read only for trace context).
      frame = encodeRateLimitResponseFrame(
        await call.options.handler(request, stream),
      );
    } catch (err) {
      stream.endWork();
      const e = ConnectError.from(err);
      fail(call, e.code, e.rawMessage);
      return;
    }
    stream.endWork();
    succeed(call, frame);
  } catch (err) {
    stream.endWork();
    stream.fail(err);
  }
}

function onDeadline(call: UnaryCall): void {
  try {
    fail(call, Code.DeadlineExceeded, "the operation timed out");
  } catch (err) {
    call.stream.fail(err);
  }
}

/** Answers with a trailers-only error response (status in the only header block), once. */
function fail(call: UnaryCall, code: Code, message: string): void {
  if (call.answered) return;
  call.answered = true;
  clearTimeout(call.deadline);
  const stream = call.stream;
  if (stream.isClosed()) return;
  stream.respond(
    encodeHeaderBlock([
      [":status", "200"],
      ["content-type", contentTypes[call.contentType] ?? contentTypes[0]],
      ["grpc-status", String(code)],
      ["grpc-message", encodeURIComponent(message)],
    ]),
    true,
  );
}

/** Answers with one response message and OK trailers, once. */
function succeed(call: UnaryCall, frame: Buffer): void {
  if (call.answered) return;
  call.answered = true;
  clearTimeout(call.deadline);
  const stream = call.stream;
  if (stream.isClosed()) return;
  stream.respond(
    okHeaders[call.contentType] ?? okHeaders[0] ?? emptyBody,
    false,
  );
  stream.write(frame);
  stream.end(okTrailers);
}

const emptyBody = Buffer.alloc(0);
