import {
  constants,
  type Http2SecureServer,
  type Http2Server,
  type Http2Session,
  type IncomingHttpHeaders,
  type ServerHttp2Stream,
} from "node:http2";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Logger } from "pino";
import type { RateLimitRequest } from "../../proto.js";
import type { Http2Event } from "../../http2/limits.js";
import { decodeRateLimitRequest } from "./rate-limit-request-decoder.js";
import { encodeRateLimitResponseFrame } from "./rate-limit-response-encoder.js";
import type { ShouldRateLimitHandler } from "../should-rate-limit-handler.js";

/** Options of {@link installGrpcFastPath}. */
export interface GrpcFastPathOptions {
  /** The shared ShouldRateLimit entry point (the Connect router calls the same one). */
  readonly handler: ShouldRateLimitHandler;
  /** Largest accepted request message, in bytes (gRPC default 4 MiB). */
  readonly readMaxBytes: number;
  readonly logger: Logger;
  /** Told when serving a stream throws (`internal_error`). */
  readonly onEvent?: (event: Http2Event) => void;
}

/**
 * What a connection's open streams hold in memory (request header lists and bodies), kept
 * by the node engine's session limits on the session under {@link connectionMemoryOf}; the
 * fast path adds the body bytes it buffers and takes them off when the stream closes.
 */
export interface ConnectionMemory {
  /**
   * Takes a new stream's header list into account before it is served; false when the
   * stream was refused instead (RST_STREAM ENHANCE_YOUR_CALM) to stay within the budget.
   */
  admit(stream: ServerHttp2Stream, rawHeaders: readonly string[]): boolean;
  /** Adds body bytes (negative to release); over the budget the connection is ended. */
  add(bytes: number): void;
}

/** Property of a node:http2 session holding its {@link ConnectionMemory}. */
export const connectionMemoryOf = Symbol("ratelimit.connectionMemory");

/** A node:http2 session, maybe with its {@link ConnectionMemory}. */
export type MeteredSession = Http2Session & {
  [connectionMemoryOf]?: ConnectionMemory;
};

/** Options of {@link containStreamListeners}. */
export type StreamGuardOptions = Pick<
  GrpcFastPathOptions,
  "logger" | "onEvent"
>;

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
  takeOverStreams(server, options, (stream, headers) => {
    if (!isFastPathCall(headers)) return false;
    serveUnary(stream, headers, options);
    return true;
  });
}

/**
 * Makes the server's `"stream"` listeners (the compat layer that feeds the Connect router)
 * contained, as {@link installGrpcFastPath} does, for a server without the fast path: an
 * exception while serving one stream closes that stream's connection (GOAWAY
 * INTERNAL_ERROR, `internal_error`) instead of reaching the process.
 */
export function containStreamListeners(
  server: Http2Server | Http2SecureServer,
  options: StreamGuardOptions,
): void {
  takeOverStreams(server, options, () => false);
}

/**
 * Replaces the server's `"stream"` listeners by one that admits each stream against its
 * connection's {@link ConnectionMemory}, offers it to `serve` first and passes the rest to
 * the listeners it replaced (the compat layer, which builds req/res objects for Connect),
 * with any exception contained by {@link failSession}.
 */
function takeOverStreams(
  server: Http2Server | Http2SecureServer,
  options: StreamGuardOptions,
  serve: (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => boolean,
): void {
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
      try {
        const memory = (stream.session as MeteredSession | undefined)?.[
          connectionMemoryOf
        ];
        if (memory !== undefined && !memory.admit(stream, rawHeaders)) return;
        if (serve(stream, headers)) return;
        for (const listener of fallback)
          listener.call(server, stream, headers, flags, rawHeaders);
      } catch (err) {
        failSession(stream, err, options);
      }
    },
  );
}

/** Sessions already closed by {@link failSession} (one warning per connection). */
const failedSessions = new WeakSet<Http2Session>();

/**
 * Contains an exception thrown while serving `stream`: logs it once per connection at warn
 * with the peer address, reports `internal_error`, and destroys the stream's session with
 * GOAWAY INTERNAL_ERROR. The process keeps serving every other connection.
 */
function failSession(
  stream: ServerHttp2Stream,
  err: unknown,
  options: StreamGuardOptions,
): void {
  // Destroying the session errors its streams; this one may have no listener yet.
  if (stream.listenerCount("error") === 0) stream.on("error", ignoreError);
  const session = stream.session;
  if (session !== undefined && failedSessions.has(session)) return;
  if (session !== undefined) failedSessions.add(session);
  const socket = session?.socket;
  options.logger.warn(
    {
      err,
      peer:
        socket === undefined
          ? undefined
          : `${socket.remoteAddress ?? ""}:${String(socket.remotePort ?? "")}`,
    },
    "error while serving an http/2 stream; closing the connection",
  );
  options.onEvent?.("internal_error");
  if (session !== undefined && !session.destroyed) {
    // (destroy(undefined, code) would send NO_ERROR: an undefined error defaults to code 0.)
    session.goaway(constants.NGHTTP2_INTERNAL_ERROR);
    // After the current node:http2 callback (see destroySoon in grpc-server.ts).
    setImmediate(() => {
      if (!session.destroyed) session.destroy();
    });
  } else if (!stream.destroyed) stream.destroy();
}

function ignoreError(): void {
  // The error is the session's end, already logged by failSession.
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

/**
 * State of one unary call, kept on its stream: the stream's listeners are the shared
 * module-level functions below (called with the stream as `this`), so a call allocates this
 * one object instead of a closure per listener.
 */
interface UnaryCall {
  readonly stream: ServerHttp2Stream;
  readonly headers: IncomingHttpHeaders;
  readonly options: GrpcFastPathOptions;
  readonly contentType: string;
  answered: boolean;
  deadline: NodeJS.Timeout | undefined;
  /** The first chunk of the body; later ones (rare: large requests) go to `more`. */
  first: Buffer | undefined;
  more: Buffer[] | undefined;
  received: number;
  /** The session's memory account, and the body bytes added to it. */
  readonly memory: ConnectionMemory | undefined;
  held: number;
}

const callOf = Symbol("ratelimit.fastPathCall");
type CallStream = ServerHttp2Stream & { [callOf]?: UnaryCall };

/** One unary call on one stream: read the envelope, decide, answer once. */
function serveUnary(
  stream: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
  options: GrpcFastPathOptions,
): void {
  const call: UnaryCall = {
    stream,
    headers,
    options,
    contentType: headers["content-type"] ?? "application/grpc",
    answered: false,
    deadline: undefined,
    first: undefined,
    more: undefined,
    received: 0,
    memory: (stream.session as MeteredSession | undefined)?.[
      connectionMemoryOf
    ],
    held: 0,
  };
  (stream as CallStream)[callOf] = call;
  // Before any early answer: a stream still open for reading can be destroyed with an error
  // later (a client GOAWAY with an error code), and an unhandled "error" ends the process.
  stream.on("error", onError);
  const timeoutMs = parseGrpcTimeoutMs(headers["grpc-timeout"]);
  if (timeoutMs !== undefined) {
    if (Number.isNaN(timeoutMs)) {
      fail(
        call,
        Code.InvalidArgument,
        `protocol error: invalid grpc timeout value: ${String(headers["grpc-timeout"])}`,
      );
      stream.resume();
      return;
    }
    call.deadline = setTimeout(onDeadline, timeoutMs, call);
  }
  // The client cancelled or the connection went away: there is nobody to answer.
  stream.on("aborted", onAborted);
  stream.on("close", onClose);
  stream.on("data", onData);
  stream.on("end", onEnd);
}

/** Answers with a trailers-only error response (status in the only header block), once. */
function fail(call: UnaryCall, code: Code, message: string): void {
  if (call.answered) return;
  call.answered = true;
  clearTimeout(call.deadline);
  const stream = call.stream;
  if (stream.destroyed || stream.closed) return;
  stream.respond(
    {
      ":status": 200,
      "content-type": call.contentType,
      "grpc-status": String(code),
      "grpc-message": encodeURIComponent(message),
    },
    { endStream: true },
  );
}

/** Answers with one response message and OK trailers, once. */
function succeed(call: UnaryCall, frame: Buffer): void {
  if (call.answered) return;
  call.answered = true;
  clearTimeout(call.deadline);
  const stream = call.stream;
  if (stream.destroyed || stream.closed) return;
  stream.respond(
    { ":status": 200, "content-type": call.contentType },
    { waitForTrailers: true },
  );
  stream.on("wantTrailers", onWantTrailers);
  stream.end(frame);
}

function onWantTrailers(this: ServerHttp2Stream): void {
  this.sendTrailers({ "grpc-status": "0" });
}

function onDeadline(call: UnaryCall): void {
  fail(call, Code.DeadlineExceeded, "the operation timed out");
}

function onAborted(this: CallStream): void {
  const call = this[callOf];
  if (call === undefined) return;
  call.answered = true;
  clearTimeout(call.deadline);
}

function onClose(this: CallStream): void {
  const call = this[callOf];
  if (call === undefined) return;
  clearTimeout(call.deadline);
  if (call.held > 0) {
    call.memory?.add(-call.held);
    call.held = 0;
  }
}

function onError(this: CallStream, err: Error): void {
  this[callOf]?.options.logger.debug({ err }, "grpc stream error");
}

function onData(this: CallStream, chunk: Buffer): void {
  const call = this[callOf];
  if (call === undefined || call.answered) return;
  call.received += chunk.length;
  const maxBytes = call.options.readMaxBytes;
  if (call.received > maxBytes + 5) {
    contained(
      call,
      fail,
      Code.ResourceExhausted,
      `message size is larger than configured readMaxBytes ${maxBytes}`,
    );
    return;
  }
  if (call.first === undefined) call.first = chunk;
  else (call.more ??= [call.first]).push(chunk);
  if (call.memory !== undefined) {
    call.held += chunk.length;
    // Over the connection's budget this ends the connection, this stream included.
    call.memory.add(chunk.length);
  }
}

function onEnd(this: CallStream): void {
  const call = this[callOf];
  if (call === undefined || call.answered) return;
  try {
    decide(call);
  } catch (err) {
    failSession(call.stream, err, call.options);
  }
}

/** Decodes the request and answers with the handler's decision (or its error). */
function decide(call: UnaryCall): void {
  let request: RateLimitRequest;
  try {
    request = decodeUnaryEnvelope(
      call.more !== undefined
        ? Buffer.concat(call.more)
        : (call.first ?? emptyBody),
      call.options.readMaxBytes,
    );
  } catch (err) {
    const e = ConnectError.from(err);
    fail(call, e.code, e.rawMessage);
    return;
  }
  // The headers carry the caller's trace context (read only when tracing is on).
  call.options.handler(request, call.headers).then(
    (response) => {
      try {
        succeed(call, encodeRateLimitResponseFrame(response));
      } catch (err) {
        failSession(call.stream, err, call.options);
      }
    },
    (err: unknown) => {
      const e = ConnectError.from(err);
      contained(call, fail, e.code, e.rawMessage);
    },
  );
}

/**
 * Runs `answer` (a listener or promise callback's last step) so that an exception closes the
 * call's connection ({@link failSession}) instead of reaching the process.
 */
function contained(
  call: UnaryCall,
  answer: (call: UnaryCall, code: Code, message: string) => void,
  code: Code,
  message: string,
): void {
  try {
    answer(call, code, message);
  } catch (err) {
    failSession(call.stream, err, call.options);
  }
}

const emptyBody = Buffer.alloc(0);

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
    return decodeRateLimitRequest(body, 5, 5 + length);
  } catch (err) {
    throw new ConnectError(
      `parse binary: ${err instanceof Error ? err.message : String(err)}`,
      Code.InvalidArgument,
    );
  }
}
