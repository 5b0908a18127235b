import { createServer } from "node:http2";
import type { ConnectRouter } from "@connectrpc/connect";
import type { Logger } from "pino";
import { createConnectHandler } from "./connect-handler.js";
import { listen, type Listening } from "./listen.js";

/** Options of {@link startGrpcServer}. */
export interface GrpcServerOptions {
  /** Route registration (see `createRoutes`). */
  readonly routes: (router: ConnectRouter) => void;
  readonly logger: Logger;
  /** Bind host (`GRPC_HOST`). */
  readonly host: string;
  /** Bind port (`GRPC_PORT`); 0 picks a free one. */
  readonly port: number;
  /** Largest accepted request message, in bytes. @defaultValue 4 MiB (gRPC's default) */
  readonly readMaxBytes?: number;
}

/**
 * Starts the cleartext HTTP/2 (h2c) gRPC server: the Connect router answers gRPC, and also
 * gRPC-web and Connect over HTTP/2.
 *
 * @throws the listen error when the address cannot be bound
 */
export function startGrpcServer(
  options: GrpcServerOptions,
): Promise<Listening> {
  const handler = createConnectHandler({
    routes: options.routes,
    logger: options.logger,
    readMaxBytes: options.readMaxBytes ?? 4 * 1024 * 1024,
  });
  const server = createServer(handler);
  return listen(server, options.host, options.port);
}
