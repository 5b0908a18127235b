import {
  createSecureServer,
  createServer,
  type Http2SecureServer,
  type Http2Server,
  type Http2Session,
} from "node:http2";
import type { TLSSocket } from "node:tls";
import type { ConnectRouter } from "@connectrpc/connect";
import type { Logger } from "pino";
import {
  createConnectDispatcher,
  createConnectHandler,
} from "./connect-handler.js";
import { startBuiltinHttp2Server } from "./h2/server.js";
import {
  containStreamListeners,
  installGrpcFastPath,
} from "./grpc-fast-path.js";
import { limitConnectionAge } from "./connection-age.js";
import { listen, type ListenTarget, type Listening } from "./listen.js";
import type { ShouldRateLimitHandler } from "./should-rate-limit-handler.js";
import {
  hasDnsSan,
  loadTlsCredentials,
  type TlsCredentials,
} from "./tls-credentials.js";

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
   * connection is sent GOAWAY (Node's rapid-reset protection, CVE-2023-44487). Node's own
   * default (1000, 33/s) is far below what a healthy Envoy sends: Envoy resets every call
   * that misses its rate-limit filter's `timeout` (often 20 ms), so a busy second would make
   * the service drop Envoy's connection and fail every call on it. @defaultValue
   * {@link grpcServerDefaults}
   */
  readonly streamResetLimit?: {
    readonly burst: number;
    readonly ratePerSecond: number;
  };
}

/**
 * Defaults of {@link GrpcServerOptions}: the stream reset limit allows 100,000 resets at once
 * and 20,000 per second after that (a peer that resets every call of a load this service
 * can carry stays below it; a client that only opens and resets streams is still stopped).
 */
export const grpcServerDefaults = {
  streamResetLimit: { burst: 100_000, ratePerSecond: 20_000 },
} as const;

/**
 * HTTP/2 options shared by the cleartext and TLS listeners.
 *
 * @internal exported for tests
 */
export function http2ServerOptions(
  options: Pick<GrpcServerOptions, "streamResetLimit">,
): { streamResetBurst: number; streamResetRate: number } {
  const limit = options.streamResetLimit ?? grpcServerDefaults.streamResetLimit;
  return {
    streamResetBurst: limit.burst,
    streamResetRate: limit.ratePerSecond,
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
  const limit = options.streamResetLimit ?? grpcServerDefaults.streamResetLimit;
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
    connection: { streamResetLimit: limit },
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
      },
      handler,
    );
    credentials.onReload((context) => {
      secure.setSecureContext(context);
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
  if (options.fastPath !== undefined) {
    installGrpcFastPath(server, {
      handler: options.fastPath,
      readMaxBytes,
      logger,
    });
  } else {
    containStreamListeners(server, { logger });
  }
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
