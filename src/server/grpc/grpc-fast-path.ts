import {
  constants,
  type Http2SecureServer,
  type Http2Server,
  type Http2Session,
  type IncomingHttpHeaders,
  type ServerHttp2Stream,
} from "node:http2";
import type { Code } from "@connectrpc/connect";
import type { Logger } from "pino";
import type { Http2Event } from "../../http2/limits.js";
import {
  grpcContentTypes,
  shouldRateLimitPath,
  UnaryCall,
  type UnaryCallOptions,
} from "./unary-call.js";

// How the node:http2 engine serves streams: unary ShouldRateLimit on the shared unary call
// state machine (unary-call.ts) answered on the `ServerHttp2Stream`, everything else handed
// to the Connect adapter, and any exception contained by closing that stream's session.

/** Options of {@link installGrpcFastPath}. */
export interface GrpcFastPathOptions extends UnaryCallOptions {
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
    // After the current node:http2 callback (see destroySoon in node-listener.ts).
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
    contentType !== grpcContentTypes[0] &&
    contentType !== grpcContentTypes[1]
  )
    return false;
  const encoding = headers["grpc-encoding"];
  return encoding === undefined || encoding === "identity";
}

/**
 * One unary call on a node:http2 stream, kept on the stream: the stream's listeners are the
 * shared module-level functions below (called with the stream as `this`), so a call
 * allocates this one object instead of a closure per listener.
 */
class NodeUnaryCall extends UnaryCall<GrpcFastPathOptions> {
  readonly stream: ServerHttp2Stream;
  readonly contentType: string;
  /** The session's memory account, and the body bytes added to it. */
  readonly memory: ConnectionMemory | undefined;
  held = 0;

  constructor(
    stream: ServerHttp2Stream,
    headers: IncomingHttpHeaders,
    options: GrpcFastPathOptions,
  ) {
    super(options, headers);
    this.stream = stream;
    this.contentType = headers["content-type"] ?? grpcContentTypes[0];
    this.memory = (stream.session as MeteredSession | undefined)?.[
      connectionMemoryOf
    ];
  }

  protected isGone(): boolean {
    return this.stream.destroyed || this.stream.closed;
  }

  protected respondError(code: Code, message: string): void {
    this.stream.respond(
      {
        ":status": 200,
        "content-type": this.contentType,
        "grpc-status": String(code),
        "grpc-message": encodeURIComponent(message),
      },
      { endStream: true },
    );
  }

  protected respondMessage(frame: Buffer): void {
    const stream = this.stream;
    stream.respond(
      { ":status": 200, "content-type": this.contentType },
      { waitForTrailers: true },
    );
    stream.on("wantTrailers", onWantTrailers);
    stream.end(frame);
  }

  protected contain(err: unknown): void {
    failSession(this.stream, err, this.options);
  }
}

const callOf = Symbol("ratelimit.fastPathCall");
type CallStream = ServerHttp2Stream & { [callOf]?: NodeUnaryCall };

/** One unary call on one stream: read the envelope, decide, answer once. */
function serveUnary(
  stream: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
  options: GrpcFastPathOptions,
): void {
  const call = new NodeUnaryCall(stream, headers, options);
  (stream as CallStream)[callOf] = call;
  // Before any early answer: a stream still open for reading can be destroyed with an error
  // later (a client GOAWAY with an error code), and an unhandled "error" ends the process.
  stream.on("error", onError);
  if (!call.startDeadline(headers["grpc-timeout"])) {
    stream.resume();
    return;
  }
  // The client cancelled or the connection went away: there is nobody to answer.
  stream.on("aborted", onAborted);
  stream.on("close", onClose);
  stream.on("data", onData);
  stream.on("end", onEnd);
}

function onWantTrailers(this: ServerHttp2Stream): void {
  this.sendTrailers({ "grpc-status": "0" });
}

function onAborted(this: CallStream): void {
  this[callOf]?.abort();
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
  if (call?.receive(chunk) !== true) return;
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
    call.end();
  } catch (err) {
    failSession(call.stream, err, call.options);
  }
}
