import {
  constants,
  type Http2SecureServer,
  type Http2Server,
  type Http2Session,
  type IncomingHttpHeaders,
  type ServerHttp2Stream,
} from "node:http2";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { Logger } from "pino";
import type { Http2Event } from "../../http2/limits.js";

// How the node:http2 engine hands streams to the Connect router: its `"stream"` listener
// admits each new stream against its connection's memory account before node's compat layer
// builds the req/res objects, and its request handler runs the Connect handler in the check
// phase, only for streams still open. Any exception on the way closes that stream's
// connection instead of reaching the process.

/**
 * What a connection's open streams hold in memory (request header lists and bodies), kept by
 * the node engine's session limits (node-listener.ts) on the session under
 * {@link connectionMemoryOf}.
 */
export interface ConnectionMemory {
  /**
   * Takes a new stream's header list into account, and from then on the body bytes it
   * delivers to JavaScript until it closes; false when the stream was refused instead
   * (RST_STREAM ENHANCE_YOUR_CALM) to stay within the budget.
   */
  admit(stream: ServerHttp2Stream, rawHeaders: readonly string[]): boolean;
}

/** Property of a node:http2 session holding its {@link ConnectionMemory}. */
export const connectionMemoryOf = Symbol("ratelimit.connectionMemory");

/** A node:http2 session, maybe with its {@link ConnectionMemory}. */
export type MeteredSession = Http2Session & {
  [connectionMemoryOf]?: ConnectionMemory;
};

/** Options of {@link containStreamListeners}. */
export interface StreamGuardOptions {
  readonly logger: Logger;
  /** Told when serving a stream throws (`internal_error`). */
  readonly onEvent?: (event: Http2Event) => void;
}

type StreamListener = (
  stream: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
  flags: number,
  rawHeaders: string[],
) => void;

/**
 * Replaces the server's `"stream"` listeners (node's compat layer, which builds the req/res
 * objects the Connect handler serves) by one that first admits each stream against its
 * session's {@link ConnectionMemory}, if it has one, then calls the listeners it replaced.
 * An exception thrown meanwhile (by the compat layer or the memory account; the Connect
 * handler itself runs later, under {@link serveOpenStreams}) closes that stream's connection:
 * logged once per connection at warn with the peer address, `internal_error` reported,
 * GOAWAY INTERNAL_ERROR. The process keeps serving every other connection.
 *
 * Call it after the server is created with its request handler.
 */
export function containStreamListeners(
  server: Http2Server | Http2SecureServer,
  options: StreamGuardOptions,
): void {
  const replaced = server.listeners("stream") as StreamListener[];
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
        for (const listener of replaced)
          listener.call(server, stream, headers, flags, rawHeaders);
      } catch (err) {
        failSession(stream, err, options);
      }
    },
  );
}

/** A node:http2 compat request handler (the Connect handler). */
export type Http2RequestHandler = (
  req: Http2ServerRequest,
  res: Http2ServerResponse,
) => void;

/**
 * Wraps `handler` to serve each request in the check phase of the event-loop turn that
 * received it (`setImmediate`), after the rest of the bytes read with it, and only if its
 * stream is still open: a stream the peer reset meanwhile (RST_STREAM right behind its
 * HEADERS and DATA, the rapid-reset pattern) costs no Connect call, so node:http2's reset
 * limit counts resets at the rate they arrive rather than at the router's rate. An exception
 * thrown by `handler` (Connect's Node adapter throws synchronously on a request it cannot
 * build a URL for, such as `:authority: a:b:c`) is contained as in
 * {@link containStreamListeners}.
 */
export function serveOpenStreams(
  handler: Http2RequestHandler,
  options: StreamGuardOptions,
): Http2RequestHandler {
  return (req, res) => {
    setImmediate(serveIfOpen, handler, options, req, res);
  };
}

function serveIfOpen(
  handler: Http2RequestHandler,
  options: StreamGuardOptions,
  req: Http2ServerRequest,
  res: Http2ServerResponse,
): void {
  const stream = req.stream;
  if (stream.destroyed || stream.closed) return;
  try {
    handler(req, res);
  } catch (err) {
    failSession(stream, err, options);
  }
}

/** Sessions already closed by {@link failSession} (one warning per connection). */
const failedSessions = new WeakSet<Http2Session>();

/**
 * Contains an exception thrown while serving `stream`: logs it once per connection at warn
 * with the peer address, reports `internal_error`, and destroys the stream's session with
 * GOAWAY INTERNAL_ERROR.
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
