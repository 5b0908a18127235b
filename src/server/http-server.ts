import {
  createServer,
  type IncomingMessage,
  type ServerResponse,
} from "node:http";
import type { ConnectRouter } from "@connectrpc/connect";
import type { Logger } from "pino";
import { createConnectHandler } from "./connect-handler.js";
import type { HealthChecker } from "../health/health.js";
import { listen, type Listening } from "./listen.js";

/** Options of {@link startHttpServer}. */
export interface HttpServerOptions {
  /** Route registration (see `createRoutes`), served as gRPC-web and Connect on HTTP/1.1. */
  readonly routes: (router: ConnectRouter) => void;
  /** The `/json` handler (see `createJsonHandler`). */
  readonly jsonHandler: (req: IncomingMessage, res: ServerResponse) => void;
  readonly health: HealthChecker;
  readonly logger: Logger;
  /** Bind host (`HOST`). */
  readonly host: string;
  /** Bind port (`PORT`); 0 picks a free one. */
  readonly port: number;
}

/**
 * Starts the HTTP/1.1 server: `/json` (decision as proto3 JSON), `/healthcheck` (200 `OK`
 * when healthy, 200 `degraded: <components>` while serving without a tolerated component,
 * 500 with the failing components otherwise), and the Connect router for
 * everything else (gRPC-web and Connect-protocol clients).
 *
 * @throws the listen error when the address cannot be bound
 */
export function startHttpServer(
  options: HttpServerOptions,
): Promise<Listening> {
  const connect = createConnectHandler({
    routes: options.routes,
    logger: options.logger,
  });
  const { health, jsonHandler } = options;
  const server = createServer((req, res) => {
    const path = (req.url ?? "/").split("?", 1)[0];
    if (path === "/json") {
      jsonHandler(req, res);
      return;
    }
    if (path === "/healthcheck") {
      if (health.isHealthy()) {
        // Serving without a component (BACKEND_FAILURE_MODE): still 200, says so in the body.
        const degraded = health.degradedComponents();
        res.writeHead(200, { "content-type": "text/plain; charset=utf-8" });
        res.end(
          degraded.length === 0 ? "OK" : `degraded: ${degraded.join(", ")}`,
        );
      } else {
        const failing = Object.entries(health.components())
          .filter(([, ok]) => !ok)
          .map(([name]) => name);
        res.writeHead(500, { "content-type": "text/plain; charset=utf-8" });
        res.end(`unhealthy: ${failing.join(", ")}`);
      }
      return;
    }
    connect(req, res);
  });
  return listen(server, { host: options.host, port: options.port });
}
