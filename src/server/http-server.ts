import {
  createServer,
  type IncomingMessage,
  type ServerResponse,
} from "node:http";
import type { ConnectRouter } from "@connectrpc/connect";
import type { Logger } from "pino";
import { createConnectHandler } from "./connect-handler.js";
import { createCors } from "./cors.js";
import type { HealthChecker, HealthComponent } from "../health/health.js";
import {
  failedReloadLine,
  type ConfigReloadStatus,
} from "../config/reload-status.js";
import { listen, type Listening } from "./listen.js";

/** Options of {@link startHttpServer}. */
export interface HttpServerOptions {
  /** Route registration (see `createRoutes`), served as gRPC-web and Connect on HTTP/1.1. */
  readonly routes: (router: ConnectRouter) => void;
  /** The `/json` handler (see `createJsonHandler`). */
  readonly jsonHandler: (req: IncomingMessage, res: ServerResponse) => void;
  /**
   * The `POST /explain` handler (see `createExplainJsonHandler`; it answers 404 itself while
   * Explain is disabled). @defaultValue `/explain` goes to the Connect router (404)
   */
  readonly explainJsonHandler?: (
    req: IncomingMessage,
    res: ServerResponse,
  ) => void;
  /**
   * Origins allowed to call from a browser (`CORS_ALLOWED_ORIGINS`; `*` for any); empty
   * disables CORS. See `createCors`. @defaultValue []
   */
  readonly corsAllowedOrigins?: readonly string[];
  readonly health: HealthChecker;
  /**
   * Returns the last failed config load, appended to the `/healthcheck` body as
   * `\nlast config reload failed at <time>: <file>:<line>: <message>` (status unchanged).
   * @defaultValue no such line
   */
  readonly reloadStatus?: () => ConfigReloadStatus;
  readonly logger: Logger;
  /** Bind host (`HOST`). */
  readonly host: string;
  /** Bind port (`PORT`); 0 picks a free one. */
  readonly port: number;
  /**
   * Largest accepted gRPC-web / Connect request message, in bytes (RESOURCE_EXHAUSTED beyond).
   * @defaultValue 4 MiB (gRPC's default)
   */
  readonly readMaxBytes?: number;
}

/**
 * Starts the HTTP/1.1 server: `/json` (decision as proto3 JSON), `/explain` (Explain as proto3
 * JSON), `/healthcheck` (200 `OK` when healthy, 200 `degraded: <components>` while serving
 * without a tolerated component, 500 with the failing components otherwise; after a failed
 * config load a second line says so, the status unchanged), and the Connect
 * router for everything else (gRPC-web and Connect-protocol clients); with
 * `corsAllowedOrigins`, CORS headers and preflight answers for browsers on those origins.
 *
 * @throws the listen error when the address cannot be bound
 */
export function startHttpServer(
  options: HttpServerOptions,
): Promise<Listening> {
  const connect = createConnectHandler({
    routes: options.routes,
    logger: options.logger,
    ...(options.readMaxBytes !== undefined
      ? { readMaxBytes: options.readMaxBytes }
      : {}),
  });
  const { health, jsonHandler, explainJsonHandler } = options;
  const cors = createCors(options.corsAllowedOrigins ?? []);
  const server = createServer((req, res) => {
    if (cors(req, res)) return;
    const path = (req.url ?? "/").split("?", 1)[0];
    if (path === "/explain" && explainJsonHandler !== undefined) {
      explainJsonHandler(req, res);
      return;
    }
    if (path === "/json") {
      jsonHandler(req, res);
      return;
    }
    if (path === "/healthcheck") {
      // The status is the reference's; a failed config load only adds a line to the body.
      const failed = options.reloadStatus?.().lastFailedReload ?? null;
      const reloadLine = failed === null ? "" : `\n${failedReloadLine(failed)}`;
      if (health.isHealthy()) {
        // Serving without a component (BACKEND_FAILURE_MODE): still 200, says so in the body.
        const degraded = health.degradedComponents();
        res.writeHead(200, { "content-type": "text/plain; charset=utf-8" });
        res.end(
          (degraded.length === 0 ? "OK" : `degraded: ${degraded.join(", ")}`) +
            reloadLine,
        );
      } else {
        const failing = Object.entries(health.components())
          .filter(([, ok]) => !ok)
          .map(([name]) => {
            const reason = health.reason(name as HealthComponent);
            return reason === undefined ? name : `${name} (${reason})`;
          });
        res.writeHead(500, { "content-type": "text/plain; charset=utf-8" });
        res.end(`unhealthy: ${failing.join(", ")}${reloadLine}`);
      }
      return;
    }
    connect(req, res);
  });
  return listen(server, { host: options.host, port: options.port });
}
