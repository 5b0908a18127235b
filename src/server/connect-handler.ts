import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import {
  Code,
  ConnectError,
  createConnectRouter,
  type ConnectRouter,
} from "@connectrpc/connect";
import type { UniversalServerResponse } from "@connectrpc/connect/protocol";
import {
  compressionBrotli,
  compressionGzip,
  universalRequestFromNodeRequest,
  universalResponseToNodeResponse,
} from "@connectrpc/connect-node";
import type { Logger } from "pino";

/** Options of {@link createConnectHandler}. */
export interface ConnectHandlerOptions {
  /** Route registration (see `createRoutes`). */
  readonly routes: (router: ConnectRouter) => void;
  readonly logger: Logger;
  /** Largest accepted request message, in bytes. @defaultValue 4 MiB (gRPC's default) */
  readonly readMaxBytes?: number;
}

/** A Node request listener for HTTP/1.1 and HTTP/2 servers. */
export type NodeHandler = (
  req: IncomingMessage | Http2ServerRequest,
  res: ServerResponse | Http2ServerResponse,
) => void;

/**
 * Returns a Node request handler serving the Connect router (gRPC, gRPC-web, Connect). It
 * replaces `connectNodeAdapter` for two reasons: handler failures go to our logger instead of
 * `console.error`, and a request message that does not decode is answered with
 * INVALID_ARGUMENT (the caller sent bad bytes) rather than Connect's INTERNAL. Unknown paths
 * get 404.
 */
export function createConnectHandler(
  options: ConnectHandlerOptions,
): NodeHandler {
  const router = createConnectRouter({
    readMaxBytes: options.readMaxBytes ?? 4 * 1024 * 1024,
    acceptCompression: [compressionGzip, compressionBrotli],
  });
  options.routes(router);
  const handlers = new Map(router.handlers.map((h) => [h.requestPath, h]));
  const { logger } = options;
  return (req, res) => {
    const handler = handlers.get((req.url ?? "").split("?", 1)[0] ?? "");
    if (handler === undefined) {
      res.statusCode = 404;
      res.end();
      return;
    }
    const universalRequest = universalRequestFromNodeRequest(
      req,
      res,
      undefined,
      undefined,
    );
    handler(universalRequest)
      .then((universalResponse) =>
        universalResponseToNodeResponse(
          remapDecodeErrors(universalResponse),
          res,
        ),
      )
      .catch((reason: unknown) => {
        // The client went away (cancel, reset): nothing to answer, nothing wrong.
        if (ConnectError.from(reason).code === Code.Aborted) return;
        logger.error(
          { err: reason, procedure: handler.requestPath },
          "rpc handler failed",
        );
      });
  };
}

// Connect reports an undecodable request message as INTERNAL "parse binary: …" (grpc-go does
// the same); for our callers it is bad input. The status is in the trailers (or, for
// trailers-only responses, the headers), which Connect writes after the body, so the check runs
// once the body is done.
const decodeErrorPrefix = encodeURIComponent("parse binary").toLowerCase();

function remapStatus(headers: Headers | undefined): void {
  if (headers?.get("grpc-status") !== String(Code.Internal)) return;
  if (
    headers.get("grpc-message")?.toLowerCase().startsWith(decodeErrorPrefix) !==
    true
  )
    return;
  headers.set("grpc-status", String(Code.InvalidArgument));
}

function remapDecodeErrors(
  response: UniversalServerResponse,
): UniversalServerResponse {
  const body = response.body;
  if (body === undefined) {
    remapStatus(response.header);
    remapStatus(response.trailer);
    return response;
  }
  return {
    ...response,
    body: (async function* () {
      yield* body;
      remapStatus(response.header);
      remapStatus(response.trailer);
    })(),
  };
}
