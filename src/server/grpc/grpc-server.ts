import type { ConnectRouter } from "@connectrpc/connect";
import type { Logger } from "pino";
import { http2LimitDefaults, type Http2Event } from "../../http2/limits.js";
import { createConnectDispatcher } from "../connect-handler.js";
import type { ListenTarget, Listening } from "../listen.js";
import type { ShouldRateLimitHandler } from "../should-rate-limit-handler.js";
import type { TlsCredentials } from "../tls-credentials.js";
import { startBuiltinHttp2Server } from "./builtin-listener.js";

// The gRPC listener: its options, TLS credentials, and the choice of HTTP/2 engine (the
// built-in one on src/http2/, builtin-listener.ts; or node:http2, node-listener.ts).

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
 * service's own (src/http2/, see docs/performance.md), with unary ShouldRateLimit served
 * inline (grpc-unary.ts); `node` is node:http2 serving every call through the Connect router
 * (node-listener.ts), the conservative fallback.
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
   * Built-in engine only: serve unary gRPC ShouldRateLimit inline on the HTTP/2 stream with
   * this handler, in front of the Connect router (see `serveShouldRateLimit`). The node engine
   * ignores it: its calls all go through `routes`. @defaultValue off
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
  // TLS credentials (node:tls) and the node engine (node:http2) load only when configured: a
  // start without them does not pay their modules' memory (docs/performance.md).
  if (tls !== undefined) {
    const { loadTlsCredentials } = await import("../tls-credentials.js");
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
        : await (
            await import("./node-listener.js")
          ).startNodeListener(options, readMaxBytes, target, credentials);
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

/** The built-in engine (src/http2/, builtin-listener.ts). */
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
