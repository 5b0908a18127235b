import {
  constants,
  createSecureServer,
  createServer,
  type Http2SecureServer,
  type Http2Server,
  type Http2Session,
  type ServerHttp2Session,
  type ServerHttp2Stream,
} from "node:http2";
import { performance } from "node:perf_hooks";
import type { TLSSocket } from "node:tls";
import {
  headerShareOfMemory,
  http2LimitDefaults,
  type Http2Event,
} from "../../http2/limits.js";
import { http2ConnectionDefaults } from "../../http2/connection-options.js";
import { createConnectHandler } from "../connect-handler.js";
import { listen, type ListenTarget, type Listening } from "../listen.js";
import { hasDnsSan } from "../dns-san.js";
import type { TlsCredentials } from "../tls-credentials.js";
import { limitConnectionAge } from "./connection-age.js";
import {
  connectionMemoryOf,
  containStreamListeners,
  serveOpenStreams,
  type ConnectionMemory,
  type MeteredSession,
} from "./contain-stream-listeners.js";
import type { GrpcServerOptions } from "./grpc-server.js";

// The node:http2 engine of the gRPC listener (`GRPC_HTTP2_ENGINE=node`), the conservative
// fallback: an http2 server whose every call, ShouldRateLimit included, goes through node's
// compat layer to the Connect router (no hand-written path: its cost is measured in
// docs/performance.md "The node engine"), plus the limits node:http2 lacks, enforced per
// session as the built-in engine enforces them itself.

/** node:http2's `maxSessionMemory` over the connection memory budget. */
const nodeSessionMemoryMargin = 1.25;
/** Invalid frames a node:http2 session may receive before it is closed (Node's default). */
const nodeMaxInvalidFrames = 1000;
/** Streams refused on a node:http2 session before it is closed (Node's default). */
const nodeMaxRejectedStreams = 100;

/**
 * HTTP/2 options shared by the cleartext and TLS listeners of the node engine.
 *
 * @internal exported for tests
 */
export function http2ServerOptions(
  options: Pick<
    GrpcServerOptions,
    "streamResetLimit" | "maxConnectionMemoryBytes"
  >,
): {
  streamResetBurst: number;
  streamResetRate: number;
  maxSessionMemory: number;
  maxSessionInvalidFrames: number;
  maxSessionRejectedStreams: number;
  settings: { maxConcurrentStreams: number };
} {
  const limit = options.streamResetLimit ?? http2LimitDefaults.streamResetLimit;
  const memoryBytes =
    options.maxConnectionMemoryBytes ??
    http2LimitDefaults.maxConnectionMemoryBytes;
  return {
    streamResetBurst: limit.burst,
    streamResetRate: limit.ratePerSecond,
    // In megabytes of 1,000,000 bytes, at least 1. Node also counts nghttp2's own buffers and
    // per-stream state, and refuses streams past it without ending the session: a quarter
    // more than the budget lets the session's own count (limitNodeSession, the builtin
    // engine's measure) act first and end the connection; Node's stays the backstop.
    maxSessionMemory: Math.max(
      1,
      Math.ceil((memoryBytes * nodeSessionMemoryMargin) / 1_000_000),
    ),
    maxSessionInvalidFrames: nodeMaxInvalidFrames,
    maxSessionRejectedStreams: nodeMaxRejectedStreams,
    // As the builtin engine (Node announces no limit): streams beyond it are refused, and
    // refusals count towards maxSessionRejectedStreams.
    settings: {
      maxConcurrentStreams: http2ConnectionDefaults.maxConcurrentStreams,
    },
  };
}

/**
 * Starts the node:http2 engine: an http2 server serving every call through the Connect router
 * (`options.routes`; `options.fastPath` is the built-in engine's and is not used here), with
 * the session limits of {@link limitNodeSession}. `readMaxBytes` and `target` as
 * {@link startGrpcServer} resolved them; `credentials` when `options.tls` is set.
 *
 * @throws the listen error when the address cannot be bound
 */
export async function startNodeListener(
  options: GrpcServerOptions,
  readMaxBytes: number,
  target: ListenTarget,
  credentials: TlsCredentials | undefined,
): Promise<Listening> {
  const { logger } = options;
  const d = http2LimitDefaults;
  const onEvent = options.onEvent ?? ignoreEvent;
  const handshakeTimeoutMs = options.handshakeTimeoutMs ?? d.handshakeTimeoutMs;
  const handler = serveOpenStreams(
    createConnectHandler({ routes: options.routes, logger, readMaxBytes }),
    { logger, onEvent },
  );
  let server: Http2Server | Http2SecureServer;
  const tls = options.tls;
  if (tls !== undefined && credentials !== undefined) {
    const mutual = tls.clientCaFile !== undefined;
    const secure = createSecureServer(
      {
        ...http2ServerOptions(options),
        ...credentials.current(),
        requestCert: mutual,
        rejectUnauthorized: mutual,
        allowHTTP1: false,
        handshakeTimeout: handshakeTimeoutMs,
      },
      handler,
    );
    credentials.onReload((context) => {
      secure.setSecureContext(context);
    });
    secure.on("tlsClientError", (err: NodeJS.ErrnoException) => {
      if (err.code === "ERR_TLS_HANDSHAKE_TIMEOUT")
        onEvent("handshake_timeout");
    });
    if (mutual && tls.clientSan !== undefined && tls.clientSan !== "") {
      const wanted = tls.clientSan;
      secure.on("secureConnection", (socket: TLSSocket) => {
        if (!hasDnsSan(socket, wanted)) {
          logger.warn(
            { san: wanted },
            "client certificate lacks the required DNS SAN; closing",
          );
          socket.destroy();
        }
      });
    }
    server = secure;
  } else {
    server = createServer(http2ServerOptions(options), handler);
  }
  containStreamListeners(server, { logger, onEvent });
  server.maxConnections = options.maxConnections ?? d.maxConnections;
  // net.Server emits "drop" for each connection refused past maxConnections.
  server.on("drop", () => {
    onEvent("connection_limit");
  });
  const limits: NodeSessionLimits = {
    handshakeTimeoutMs,
    maxConnectionMemoryBytes:
      options.maxConnectionMemoryBytes ?? d.maxConnectionMemoryBytes,
    idleTimeoutMs: options.maxConnectionIdleMs ?? d.maxConnectionIdleMs,
    keepaliveMinTimeMs: options.keepaliveMinTimeMs ?? d.keepaliveMinTimeMs,
    onEvent,
  };
  server.on("session", (session: ServerHttp2Session) => {
    limitNodeSession(session, limits);
  });
  const ageMs = options.maxConnectionAgeMs ?? 0;
  if (ageMs > 0) {
    const graceMs = options.maxConnectionAgeGraceMs ?? 0;
    const random = options.random ?? Math.random;
    server.on("session", (session: Http2Session) => {
      limitConnectionAge(
        {
          isClosed: () => session.closed || session.destroyed,
          goAway: () => {
            session.close();
          },
          destroy: () => {
            if (!session.destroyed) session.destroy();
          },
          onceClosed: (listener) => session.once("close", listener),
        },
        ageMs,
        graceMs,
        random,
      );
    });
  }
  return listen(server, target);
}

function ignoreEvent(): void {
  // No statistics asked for.
}

function ignoreStreamError(): void {
  // A refused stream's RST_STREAM surfaces as its error: nothing to report.
}

/** What {@link limitNodeSession} enforces on each node:http2 session; times in ms. */
interface NodeSessionLimits {
  /** From the session's start (after TLS) to the client's first SETTINGS; 0 disables. */
  readonly handshakeTimeoutMs: number;
  /** With no open stream; 0 disables. */
  readonly idleTimeoutMs: number;
  /** grpc-go's keepalive enforcement `MinTime`; 0 disables. */
  readonly keepaliveMinTimeMs: number;
  /** Request header lists and bodies the session's open streams may hold, in bytes. */
  readonly maxConnectionMemoryBytes: number;
  readonly onEvent: (event: Http2Event) => void;
}

/** PING strikes tolerated (grpc-go's `maxPingStrikes`): the next one ends the connection. */
const maxPingStrikes = 2;
/** SETTINGS frames a peer may send within one second. */
const maxSettingsPerSecond = 100;
/** Streams refused in a row for memory before the connection is ended (as Node's 100). */
const maxRefusedStreams = nodeMaxRejectedStreams;

/**
 * Destroys `session` once the current node:http2 callback has returned: destroying it from
 * inside one of its own event handlers (while nghttp2 is still processing the received
 * bytes) made Node abort in ~Http2Session (`current_nghttp2_memory_ == 0`) under the frame
 * fuzzer (test/fuzz/h2-frames.test.ts).
 */
export function destroySoon(session: ServerHttp2Session): void {
  setImmediate(() => {
    if (!session.destroyed) session.destroy();
  });
}

/**
 * The limits node:http2 lacks, on one session (the built-in engine enforces the same ones
 * itself, see src/http2/limits.ts):
 *
 * - handshake: a session whose client sends no SETTINGS within `handshakeTimeoutMs` is
 *   destroyed (`handshake_timeout`);
 * - idle: a session with no open stream for `idleTimeoutMs` gets GOAWAY NO_ERROR
 *   (`idle_timeout`);
 * - PING strikes, grpc-go's rule: a PING sooner than `keepaliveMinTimeMs` after the previous
 *   one is a strike, unless a response was sent since (approximated by a stream of the
 *   session closing); the third strike ends the session with GOAWAY ENHANCE_YOUR_CALM
 *   "too_many_pings" (`enhance_your_calm`);
 * - SETTINGS flood: more than {@link maxSettingsPerSecond} SETTINGS frames within a second
 *   end the session the same way;
 * - memory ({@link ConnectionMemory}), as the builtin engine counts it: the header lists of
 *   the open streams (RFC 9113 §6.5.2 sizes), at most a quarter of `maxConnectionMemoryBytes`
 *   (a new stream beyond is refused with RST_STREAM ENHANCE_YOUR_CALM; after
 *   {@link maxRefusedStreams} refusals in a row the session ends the same way), and the body
 *   bytes each open stream has delivered to JavaScript since node's compat layer started
 *   reading it (the Connect router buffers a unary message whole; beyond the budget the
 *   session ends). Node's `maxSessionMemory` counts neither once a stream's headers and data
 *   reach JavaScript; body bytes not yet read stay within the stream's flow-control window.
 *
 * Per call it costs three stream listeners, counter updates and, when the session turns idle,
 * a clock read: the idle timer is set only when none is pending, and when it fires early it
 * is set again for the time left.
 */
function limitNodeSession(
  session: ServerHttp2Session,
  limits: NodeSessionLimits,
): void {
  const { onEvent } = limits;
  let open = 0;
  /** Bytes of header lists and bodies the open streams hold, and the lists' part. */
  let held = 0;
  let headerHeld = 0;
  let refusedInARow = 0;
  let idleSince = performance.now();
  let idleTimer: NodeJS.Timeout | undefined;
  let responded = false;
  let lastPingAt: number | undefined;
  let pingStrikes = 0;
  let settingsWindowStart = Number.NEGATIVE_INFINITY;
  let settingsInWindow = 0;
  let handshakeTimer: NodeJS.Timeout | undefined;

  const ended = (): boolean => session.closed || session.destroyed;
  /** Set once the session is being ended by a limit (destroyed after the callback). */
  let calmed = false;
  const calm = (reason: string): void => {
    if (calmed || session.destroyed) return;
    calmed = true;
    onEvent("enhance_your_calm");
    session.goaway(constants.NGHTTP2_ENHANCE_YOUR_CALM, 0, Buffer.from(reason));
    destroySoon(session);
  };
  const checkIdle = (): void => {
    idleTimer = undefined;
    if (open > 0 || ended()) return; // re-armed when the last stream closes
    const left = limits.idleTimeoutMs - (performance.now() - idleSince);
    if (left > 1) {
      armIdle(left);
      return;
    }
    onEvent("idle_timeout");
    session.close();
  };
  const armIdle = (ms: number): void => {
    idleTimer = setTimeout(checkIdle, ms);
    idleTimer.unref();
  };
  const maxHeaderBytes = limits.maxConnectionMemoryBytes * headerShareOfMemory;
  const memory: ConnectionMemory = {
    admit(stream: HeldStream, rawHeaders) {
      const bytes = headerListBytes(rawHeaders);
      if (
        held + bytes > limits.maxConnectionMemoryBytes ||
        headerHeld + bytes > maxHeaderBytes
      ) {
        // Refused as the builtin engine does; a peer that keeps trying loses the connection.
        stream.on("error", ignoreStreamError);
        stream.close(constants.NGHTTP2_ENHANCE_YOUR_CALM);
        refusedInARow += 1;
        if (refusedInARow > maxRefusedStreams) calm("memory_budget");
        return false;
      }
      refusedInARow = 0;
      stream[heldHeaderBytes] = bytes;
      held += bytes;
      headerHeld += bytes;
      stream.on("newListener", onStreamListener);
      return true;
    },
  };
  (session as MeteredSession)[connectionMemoryOf] = memory;
  // The body is counted once the compat layer reads it: it adds its "data" listener only
  // when the Connect router starts reading (a "data" listener of ours before that would set
  // the stream flowing and lose the chunks).
  const onStreamListener = function (
    this: HeldStream,
    event: string | symbol,
  ): void {
    if (event !== "data" || this[heldBodyBytes] !== undefined) return;
    this[heldBodyBytes] = 0;
    this.removeListener("newListener", onStreamListener);
    this.on("data", onStreamData);
  };
  const onStreamData = function (this: HeldStream, chunk: Buffer): void {
    this[heldBodyBytes] = (this[heldBodyBytes] ?? 0) + chunk.length;
    held += chunk.length;
    // Over the connection's budget this ends the connection, this stream included.
    if (held > limits.maxConnectionMemoryBytes) calm("memory_budget");
  };
  const onStreamClose = function (this: HeldStream): void {
    const bytes = this[heldHeaderBytes] ?? 0;
    held -= bytes + (this[heldBodyBytes] ?? 0);
    headerHeld -= bytes;
    open -= 1;
    responded = true;
    if (open === 0 && limits.idleTimeoutMs > 0) {
      idleSince = performance.now();
      if (idleTimer === undefined && !ended()) armIdle(limits.idleTimeoutMs);
    }
  };

  // (Runs after the server's "stream" listeners, which admitted the stream.)
  session.on("stream", (stream: HeldStream) => {
    open += 1;
    stream.on("close", onStreamClose);
  });
  if (limits.idleTimeoutMs > 0) armIdle(limits.idleTimeoutMs);
  if (limits.handshakeTimeoutMs > 0) {
    handshakeTimer = setTimeout(() => {
      if (ended()) return;
      onEvent("handshake_timeout");
      destroySoon(session);
    }, limits.handshakeTimeoutMs);
    handshakeTimer.unref();
  }
  session.on("remoteSettings", () => {
    clearTimeout(handshakeTimer);
    const now = performance.now();
    if (now - settingsWindowStart >= 1000) {
      settingsWindowStart = now;
      settingsInWindow = 0;
    }
    settingsInWindow += 1;
    if (settingsInWindow > maxSettingsPerSecond) calm("too_many_settings");
  });
  if (limits.keepaliveMinTimeMs > 0) {
    session.on("ping", () => {
      const now = performance.now();
      const previous = lastPingAt;
      lastPingAt = now;
      if (responded) {
        responded = false;
        pingStrikes = 0;
        return;
      }
      if (
        previous !== undefined &&
        now - previous < limits.keepaliveMinTimeMs
      ) {
        pingStrikes += 1;
        if (pingStrikes > maxPingStrikes) calm("too_many_pings");
      }
    });
  }
  session.once("close", () => {
    clearTimeout(handshakeTimer);
    clearTimeout(idleTimer);
  });
}

const heldHeaderBytes = Symbol("ratelimit.heldHeaderBytes");
const heldBodyBytes = Symbol("ratelimit.heldBodyBytes");
type HeldStream = ServerHttp2Stream & {
  [heldHeaderBytes]?: number;
  /** Set once the body is counted (the compat layer reads it). */
  [heldBodyBytes]?: number;
};

/** Size of a header list as RFC 9113 §6.5.2 counts it: name + value + 32 per field. */
function headerListBytes(rawHeaders: readonly string[]): number {
  let bytes = 0;
  for (let i = 0; i + 1 < rawHeaders.length; i += 2)
    bytes +=
      (rawHeaders[i]?.length ?? 0) + (rawHeaders[i + 1]?.length ?? 0) + 32;
  return bytes;
}
