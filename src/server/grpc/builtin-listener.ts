import { createServer as createNetServer, type Socket } from "node:net";
import type { SecureContextOptions, TLSSocket } from "node:tls";
import type { Logger } from "pino";
import type { ConnectDispatcher } from "../connect-handler.js";
import { limitConnectionAge } from "./connection-age.js";
import { listen, type ListenTarget, type Listening } from "../listen.js";
import { hasDnsSan } from "../dns-san.js";
import { nodeTls } from "../../util/lazy-tls.js";
import { Http2Connection } from "../../http2/connection.js";
import type { Http2ConnectionOptions } from "../../http2/connection-options.js";
import type { H2Stream } from "../../http2/h2-stream.js";
import {
  fastPathContentType,
  serveShouldRateLimit,
  type GrpcUnaryOptions,
} from "./grpc-unary.js";
import { type Http2Event, http2LimitDefaults } from "../../http2/limits.js";
import { serveWithConnect } from "./universal-adapter.js";

/** TLS of {@link startBuiltinHttp2Server}. */
export interface BuiltinTlsOptions {
  /** Key, certificate and CA, as `loadTlsCredentials` returns them. */
  readonly context: SecureContextOptions;
  /** Require a client certificate signed by the CA (mutual TLS). */
  readonly mutual: boolean;
  /** Also require this DNS SAN in the client certificate; empty: any. */
  readonly clientSan?: string;
  /** Registers a listener for rotated credentials (new handshakes use them). */
  readonly onReload?: (
    listener: (context: SecureContextOptions) => void,
  ) => void;
}

/** Options of {@link startBuiltinHttp2Server}. */
export interface BuiltinHttp2ServerOptions {
  /** Serves every stream the fast path does not. */
  readonly dispatcher: ConnectDispatcher;
  /** Serve unary gRPC ShouldRateLimit inline. @defaultValue off */
  readonly fastPath?: GrpcUnaryOptions;
  readonly logger: Logger;
  readonly target: ListenTarget;
  /** @defaultValue cleartext (h2c with prior knowledge) */
  readonly tls?: BuiltinTlsOptions;
  /**
   * Age after which a connection is sent GOAWAY, in ms, with ±10 % random jitter per
   * connection; 0 disables. @defaultValue 0
   */
  readonly maxConnectionAgeMs?: number;
  /** Time after that GOAWAY before the connection is destroyed, in ms. @defaultValue 0 */
  readonly maxConnectionAgeGraceMs?: number;
  /** Random source in [0, 1) for the age jitter. @defaultValue Math.random */
  readonly random?: () => number;
  /**
   * Most connections served at once by this process; more are closed on accept.
   * @defaultValue {@link http2LimitDefaults}
   */
  readonly maxConnections?: number;
  /**
   * Time for the TLS handshake, client preface and first SETTINGS, in ms.
   * @defaultValue {@link http2LimitDefaults}
   */
  readonly handshakeTimeoutMs?: number;
  /** Told when a limit acts or handling fails (statistics). */
  readonly onEvent?: (event: Http2Event) => void;
  /** HTTP/2 limits of each connection (see {@link Http2ConnectionOptions}). */
  readonly connection?: Omit<
    Http2ConnectionOptions,
    "onStream" | "onClose" | "logger" | "handshakeTimeoutMs" | "onEvent"
  >;
}

/**
 * Starts the built-in HTTP/2 server (`GRPC_HTTP2_ENGINE=builtin`): a `net` or `tls` server
 * whose connections are {@link Http2Connection}s. Unary gRPC ShouldRateLimit is answered
 * inline (`grpc-unary.ts`), everything else by the Connect router (`universal-adapter.ts`).
 * TLS negotiates `h2` by ALPN only (no HTTP/1.1). Close sends GOAWAY to every connection,
 * lets open streams finish for up to the grace, then destroys what is left.
 *
 * @throws the listen error when the address cannot be bound
 */
export async function startBuiltinHttp2Server(
  options: BuiltinHttp2ServerOptions,
): Promise<Listening> {
  const { logger, dispatcher, fastPath } = options;
  const connections = new Set<Http2Connection>();
  const onStream = (stream: H2Stream): void => {
    if (fastPath !== undefined) {
      const contentType = fastPathContentType(stream);
      if (contentType >= 0) {
        serveShouldRateLimit(stream, contentType, fastPath);
        return;
      }
    }
    serveWithConnect(stream, dispatcher);
  };
  const ageMs = options.maxConnectionAgeMs ?? 0;
  const graceMs = options.maxConnectionAgeGraceMs ?? 0;
  const random = options.random ?? Math.random;
  const limits = http2LimitDefaults;
  const handshakeTimeoutMs =
    options.handshakeTimeoutMs ?? limits.handshakeTimeoutMs;
  const onEvent = options.onEvent;
  const connectionOptions: Http2ConnectionOptions = {
    ...options.connection,
    handshakeTimeoutMs,
    ...(onEvent !== undefined ? { onEvent } : {}),
    logger,
    onStream,
    onClose: (connection) => {
      connections.delete(connection);
    },
  };
  const serve = (socket: Socket): void => {
    const connection = new Http2Connection(socket, connectionOptions);
    connections.add(connection);
    if (ageMs > 0)
      limitConnectionAge(
        {
          isClosed: () => connection.isClosed(),
          goAway: () => {
            connection.shutdown();
          },
          destroy: () => {
            connection.destroy();
          },
          onceClosed: (listener) => socket.once("close", listener),
        },
        ageMs,
        graceMs,
        random,
      );
  };

  const tls = options.tls;
  let server;
  if (tls === undefined) {
    server = createNetServer(serve);
  } else {
    const secure = nodeTls().createServer({
      ...tls.context,
      handshakeTimeout: handshakeTimeoutMs,
      ALPNProtocols: ["h2"],
      requestCert: tls.mutual,
      rejectUnauthorized: tls.mutual,
    });
    tls.onReload?.((context) => {
      secure.setSecureContext(context);
    });
    const wanted = tls.mutual ? (tls.clientSan ?? "") : "";
    secure.on("secureConnection", (socket: TLSSocket) => {
      if (socket.alpnProtocol !== "h2") {
        // gRPC is HTTP/2 only; node:http2 refuses such clients as well.
        logger.debug(
          { alpn: socket.alpnProtocol },
          "TLS client did not negotiate h2; closing",
        );
        socket.destroy();
        return;
      }
      if (wanted !== "" && !hasDnsSan(socket, wanted)) {
        logger.warn(
          { san: wanted },
          "client certificate lacks the required DNS SAN; closing",
        );
        socket.destroy();
        return;
      }
      serve(socket);
    });
    secure.on("tlsClientError", (err: Error) => {
      logger.debug({ err }, "TLS handshake failed");
    });
    server = secure;
  }
  // Beyond the cap, node:net closes new sockets at once and says so with "drop".
  server.maxConnections = options.maxConnections ?? limits.maxConnections;
  server.on("drop", () => {
    onEvent?.("connection_limit");
  });
  return listen(server, options.target, {
    onClose: () => {
      for (const connection of connections) connection.shutdown();
    },
  });
}
