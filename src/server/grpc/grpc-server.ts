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
import type { ConnectRouter } from "@connectrpc/connect";
import type { Logger } from "pino";
import {
  createConnectDispatcher,
  createConnectHandler,
} from "../connect-handler.js";
import {
  headerShareOfMemory,
  http2LimitDefaults,
  type Http2Event,
} from "../../http2/limits.js";
import { startBuiltinHttp2Server } from "./builtin-listener.js";
import {
  connectionMemoryOf,
  containStreamListeners,
  installGrpcFastPath,
  type ConnectionMemory,
  type MeteredSession,
} from "./grpc-fast-path.js";
import { http2ConnectionDefaults } from "../../http2/connection-options.js";
import { limitConnectionAge } from "./connection-age.js";
import { listen, type ListenTarget, type Listening } from "../listen.js";
import type { ShouldRateLimitHandler } from "../should-rate-limit-handler.js";
import {
  hasDnsSan,
  loadTlsCredentials,
  type TlsCredentials,
} from "../tls-credentials.js";

/** TLS settings of the gRPC listener. */
export interface GrpcTlsOptions {
  /** Certificate chain file (`GRPC_SERVER_TLS_CERT`); watched and reloaded. */
  readonly certFile: string;
  /** Private key file (`GRPC_SERVER_TLS_KEY`); watched and reloaded. */
  readonly keyFile: string;
  /** Require client certificates signed by this CA (`GRPC_CLIENT_TLS_CACERT`). */
  readonly clientCaFile?: string;
  /** Also require this DNS SAN in the client certificate (`GRPC_CLIENT_TLS_SAN`). */
  readonly clientSan?: string;
}

/**
 * HTTP/2 implementation of the gRPC listener (`GRPC_HTTP2_ENGINE`): `builtin` is this
 * service's own (src/server/h2/, see docs/performance.md), `node` is node:http2 with the
 * fast path of grpc-fast-path.ts.
 */
export type GrpcHttp2Engine = "builtin" | "node";

/** Options of {@link startGrpcServer}. */
export interface GrpcServerOptions {
  /** HTTP/2 implementation (`GRPC_HTTP2_ENGINE`). @defaultValue "builtin" */
  readonly engine?: GrpcHttp2Engine;
  /** Route registration (see `createRoutes`). */
  readonly routes: (router: ConnectRouter) => void;
  readonly logger: Logger;
  /** Bind host (`GRPC_HOST`); ignored when `udsPath` is set. */
  readonly host: string;
  /** Bind port (`GRPC_PORT`); 0 picks a free one; ignored when `udsPath` is set. */
  readonly port: number;
  /** Serve on this unix socket instead of host:port (`GRPC_UDS`). @defaultValue none */
  readonly udsPath?: string;
  /** Serve TLS (`GRPC_SERVER_USE_TLS`). @defaultValue cleartext HTTP/2 */
  readonly tls?: GrpcTlsOptions;
  /**
   * Age after which a connection is sent GOAWAY, in ms, with ±10 % random jitter per
   * connection (`GRPC_MAX_CONNECTION_AGE`); 0 disables. @defaultValue 0
   */
  readonly maxConnectionAgeMs?: number;
  /**
   * Time after the GOAWAY before the connection is closed even with calls in flight, in ms
   * (`GRPC_MAX_CONNECTION_AGE_GRACE`). @defaultValue 0
   */
  readonly maxConnectionAgeGraceMs?: number;
  /** Largest accepted request message, in bytes. @defaultValue 4 MiB (gRPC's default) */
  readonly readMaxBytes?: number;
  /** Random source in [0, 1) for the age jitter. @defaultValue Math.random */
  readonly random?: () => number;
  /**
   * Serve unary gRPC ShouldRateLimit directly on the HTTP/2 stream with this handler, in
   * front of the Connect router (see `installGrpcFastPath`). @defaultValue off
   */
  readonly fastPath?: ShouldRateLimitHandler;
  /**
   * HTTP/2 stream reset (RST_STREAM) rate limit of each connection, a token bucket: `burst`
   * resets from the peer are accepted at once, refilled at `ratePerSecond`; beyond it the
   * connection is sent GOAWAY (rapid reset, CVE-2023-44487) (`GRPC_STREAM_RESET_BURST`,
   * `GRPC_STREAM_RESET_RATE`). Node's own default rate (33/s) is far below what a healthy
   * Envoy sends: Envoy resets every call that misses its rate-limit filter's `timeout` (often
   * 20 ms). @defaultValue {@link http2LimitDefaults}
   */
  readonly streamResetLimit?: {
    readonly burst: number;
    readonly ratePerSecond: number;
  };
  /**
   * Most gRPC connections open at once in this process; more are closed on accept
   * (`GRPC_MAX_CONNECTIONS`). @defaultValue {@link http2LimitDefaults}
   */
  readonly maxConnections?: number;
  /**
   * Time for the TLS handshake, client preface and first SETTINGS, in ms; a connection that
   * takes longer is closed (`GRPC_HANDSHAKE_TIMEOUT`). @defaultValue {@link http2LimitDefaults}
   */
  readonly handshakeTimeoutMs?: number;
  /**
   * Time a connection may stay with no open stream before GOAWAY, in ms; 0 disables
   * (`GRPC_MAX_CONNECTION_IDLE`). @defaultValue {@link http2LimitDefaults}
   */
  readonly maxConnectionIdleMs?: number;
  /**
   * PING enforcement, in ms (grpc-go's keepalive `MinTime`): a PING sooner than this after the
   * previous one, with no response sent in between, is a strike; the third ends the
   * connection with GOAWAY ENHANCE_YOUR_CALM. 0 disables (`GRPC_KEEPALIVE_MIN_TIME`).
   * @defaultValue {@link http2LimitDefaults}
   */
  readonly keepaliveMinTimeMs?: number;
  /**
   * Request header lists and bodies one connection's open streams may hold, in bytes
   * (`GRPC_MAX_CONNECTION_MEMORY`; node:http2 rounds it up to whole megabytes).
   * @defaultValue {@link http2LimitDefaults}
   */
  readonly maxConnectionMemoryBytes?: number;
  /** Told when a limit acts or handling fails (statistics). @defaultValue none */
  readonly onEvent?: (event: Http2Event) => void;
}

/**
 * Defaults of {@link GrpcServerOptions}: the stream reset limit of {@link http2LimitDefaults}
 * (1,000 resets at once, 1,000 per second after that).
 */
export const grpcServerDefaults = {
  streamResetLimit: http2LimitDefaults.streamResetLimit,
} as const;

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
  const limit = options.streamResetLimit ?? grpcServerDefaults.streamResetLimit;
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
 * Starts the gRPC server (HTTP/2, cleartext or TLS, on TCP or a unix socket). The Connect
 * router answers gRPC, and also gRPC-web and Connect over HTTP/2. With TLS the certificate
 * files are watched and a rotated pair serves new handshakes without a restart; open
 * connections keep theirs.
 *
 * @throws the listen error when the address cannot be bound, or the TLS file error when the
 *   initial certificate or key cannot be loaded
 */
export async function startGrpcServer(
  options: GrpcServerOptions,
): Promise<Listening> {
  const { logger } = options;
  const readMaxBytes = options.readMaxBytes ?? 4 * 1024 * 1024;
  let credentials: TlsCredentials | undefined;
  const tls = options.tls;
  if (tls !== undefined) {
    credentials = loadTlsCredentials({
      certFile: tls.certFile,
      keyFile: tls.keyFile,
      ...(tls.clientCaFile !== undefined
        ? { clientCaFile: tls.clientCaFile }
        : {}),
      logger,
    });
  }
  const target =
    options.udsPath !== undefined && options.udsPath !== ""
      ? { path: options.udsPath }
      : { host: options.host, port: options.port };
  let listening: Listening;
  try {
    listening =
      (options.engine ?? "builtin") === "builtin"
        ? await startBuiltin(options, readMaxBytes, target, credentials)
        : await startNode(options, readMaxBytes, target, credentials);
  } catch (err) {
    await credentials?.close();
    throw err;
  }
  return {
    address: listening.address,
    port: listening.port,
    async close(graceMs) {
      await listening.close(graceMs);
      await credentials?.close();
    },
  };
}

/** The built-in engine (src/server/h2/). */
function startBuiltin(
  options: GrpcServerOptions,
  readMaxBytes: number,
  target: ListenTarget,
  credentials: TlsCredentials | undefined,
): Promise<Listening> {
  const tls = options.tls;
  const d = http2LimitDefaults;
  return startBuiltinHttp2Server({
    dispatcher: createConnectDispatcher({
      routes: options.routes,
      logger: options.logger,
      readMaxBytes,
    }),
    ...(options.fastPath !== undefined
      ? { fastPath: { handler: options.fastPath, readMaxBytes } }
      : {}),
    logger: options.logger,
    target,
    ...(tls !== undefined && credentials !== undefined
      ? {
          tls: {
            context: credentials.current(),
            mutual: tls.clientCaFile !== undefined,
            ...(tls.clientSan !== undefined
              ? { clientSan: tls.clientSan }
              : {}),
            onReload: (listener) => {
              credentials.onReload(listener);
            },
          },
        }
      : {}),
    maxConnectionAgeMs: options.maxConnectionAgeMs ?? 0,
    maxConnectionAgeGraceMs: options.maxConnectionAgeGraceMs ?? 0,
    ...(options.random !== undefined ? { random: options.random } : {}),
    maxConnections: options.maxConnections ?? d.maxConnections,
    handshakeTimeoutMs: options.handshakeTimeoutMs ?? d.handshakeTimeoutMs,
    ...(options.onEvent !== undefined ? { onEvent: options.onEvent } : {}),
    connection: {
      streamResetLimit:
        options.streamResetLimit ?? grpcServerDefaults.streamResetLimit,
      idleTimeoutMs: options.maxConnectionIdleMs ?? d.maxConnectionIdleMs,
      keepaliveMinTimeMs: options.keepaliveMinTimeMs ?? d.keepaliveMinTimeMs,
      maxConnectionMemoryBytes:
        options.maxConnectionMemoryBytes ?? d.maxConnectionMemoryBytes,
    },
  });
}

/** The node:http2 engine: http2 server + Connect's Node adapter + the node fast path. */
async function startNode(
  options: GrpcServerOptions,
  readMaxBytes: number,
  target: ListenTarget,
  credentials: TlsCredentials | undefined,
): Promise<Listening> {
  const { logger } = options;
  const d = http2LimitDefaults;
  const onEvent = options.onEvent ?? ignoreEvent;
  const handshakeTimeoutMs = options.handshakeTimeoutMs ?? d.handshakeTimeoutMs;
  const handler = createConnectHandler({
    routes: options.routes,
    logger,
    readMaxBytes,
  });
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
  const guard = { logger, onEvent };
  if (options.fastPath !== undefined) {
    installGrpcFastPath(server, {
      handler: options.fastPath,
      readMaxBytes,
      ...guard,
    });
  } else {
    containStreamListeners(server, guard);
  }
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
 * itself, see h2/limits.ts):
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
 *   {@link maxRefusedStreams} refusals in a row the session ends the same way), and the
 *   bodies the fast path buffers (beyond the budget the session ends). Node's
 *   `maxSessionMemory` counts neither once a stream's headers and data reach JavaScript.
 *
 * Per call it costs a stream listener, a counter update and, when the session turns idle, a
 * clock read: the idle timer is set only when none is pending, and when it fires early it is
 * set again for the time left.
 */
function limitNodeSession(
  session: ServerHttp2Session,
  limits: NodeSessionLimits,
): void {
  const { onEvent } = limits;
  let open = 0;
  /** Bytes of header lists and fast-path bodies the open streams hold, and the lists' part. */
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
      return true;
    },
    add(bytes) {
      held += bytes;
      if (bytes > 0 && held > limits.maxConnectionMemoryBytes)
        calm("memory_budget");
    },
  };
  (session as MeteredSession)[connectionMemoryOf] = memory;
  const onStreamClose = function (this: HeldStream): void {
    const bytes = this[heldHeaderBytes] ?? 0;
    held -= bytes;
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
type HeldStream = ServerHttp2Stream & { [heldHeaderBytes]?: number };

/** Size of a header list as RFC 9113 §6.5.2 counts it: name + value + 32 per field. */
function headerListBytes(rawHeaders: readonly string[]): number {
  let bytes = 0;
  for (let i = 0; i + 1 < rawHeaders.length; i += 2)
    bytes +=
      (rawHeaders[i]?.length ?? 0) + (rawHeaders[i + 1]?.length ?? 0) + 32;
  return bytes;
}
