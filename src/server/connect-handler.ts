import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import {
  Code,
  ConnectError,
  createConnectRouter,
  createContextValues,
  type ConnectRouter,
  type ContextValues,
} from "@connectrpc/connect";
import {
  createAsyncIterable,
  type UniversalHandler,
  type UniversalServerRequest,
  type UniversalServerResponse,
} from "@connectrpc/connect/protocol";
import {
  compressionBrotli,
  compressionGzip,
  universalRequestFromNodeRequest,
  universalResponseToNodeResponse,
} from "@connectrpc/connect-node";
import type { Logger } from "pino";
import { peerIdentityKey } from "../service/peer-identity.js";
import { peerIdentityOf } from "./peer-identity-cache.js";
import { dropDeadlinesBeyondTimerRange } from "./grpc/envelope.js";

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
 * The Connect router as the HTTP front ends use it: find the handler of a path, run it with
 * our error mapping, report its failures to our logger. Shared by the Node adapter
 * ({@link createConnectHandler}) and the built-in HTTP/2 engine (`src/http2/`).
 */
export interface ConnectDispatcher {
  /** The handler serving `pathname` (no query string), or `undefined`: answer 404. */
  handlerFor(pathname: string): UniversalHandler | undefined;
  /**
   * Runs `handler` on `request`; an undecodable request message comes back as
   * INVALID_ARGUMENT (see {@link remapDecodeErrors}).
   */
  serve(
    handler: UniversalHandler,
    request: UniversalServerRequest,
  ): Promise<UniversalServerResponse>;
  /**
   * Logs a failure of serving or writing a call, unless it is the client going away
   * (cancel, reset: nothing is wrong).
   */
  reportFailure(reason: unknown, handler: UniversalHandler): void;
}

/**
 * Builds the {@link ConnectDispatcher} over a new Connect router: gRPC, gRPC-web and Connect,
 * gzip and brotli accepted, request messages up to `readMaxBytes`.
 */
export function createConnectDispatcher(
  options: ConnectHandlerOptions,
): ConnectDispatcher {
  const router = createConnectRouter({
    readMaxBytes: options.readMaxBytes ?? 4 * 1024 * 1024,
    acceptCompression: [compressionGzip, compressionBrotli],
  });
  options.routes(router);
  const handlers = new Map(router.handlers.map((h) => [h.requestPath, h]));
  const { logger } = options;
  return {
    handlerFor: (pathname) => handlers.get(pathname),
    serve: (handler, request) => handler(request).then(remapDecodeErrors),
    reportFailure(reason, handler) {
      if (ConnectError.from(reason).code === Code.Aborted) return;
      logger.error(
        { err: reason, procedure: handler.requestPath },
        "rpc handler failed",
      );
    },
  };
}

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
  const dispatcher = createConnectDispatcher(options);
  return (req, res) => {
    const handler = dispatcher.handlerFor(
      (req.url ?? "").split("?", 1)[0] ?? "",
    );
    if (handler === undefined) {
      res.statusCode = 404;
      res.end();
      return;
    }
    dropDeadlinesBeyondTimerRange(req.headers);
    const universalRequest = universalRequestFromNodeRequest(
      req,
      res,
      undefined,
      peerContext(req),
    );
    dispatcher
      .serve(handler, universalRequest)
      .then((universalResponse) => {
        // Answered before the request body was read to its end (an error found early: a
        // second message, an oversize envelope). Connect stops reading by destroying the
        // request, which on HTTP/1.1 destroys the socket: say so, or a keep-alive client
        // would send its next request into a closed connection (ECONNRESET).
        if (!req.complete && req.httpVersionMajor === 1)
          res.setHeader("connection", "close");
        return universalResponseToNodeResponse(universalResponse, res);
      })
      .catch((reason: unknown) => {
        dispatcher.reportFailure(reason, handler);
      });
  };
}

/**
 * The context values of a call from a Node request: the caller's verified client-certificate
 * identity (`peerIdentityKey`) on a TLS connection that has one, else none.
 */
function peerContext(
  req: IncomingMessage | Http2ServerRequest,
): ContextValues | undefined {
  // An HTTP/2 request's `socket` is a proxy; the session's socket is the TLS socket itself.
  const socket: object | undefined =
    "stream" in req ? req.stream.session?.socket : req.socket;
  if (socket === undefined || !("encrypted" in socket)) return undefined;
  const identity = peerIdentityOf(socket);
  return identity === undefined
    ? undefined
    : createContextValues().set(peerIdentityKey, identity);
}

// Connect reports an undecodable request message as INTERNAL "parse binary: …" (grpc-go does
// the same); for our callers it is bad input. Where the status travels depends on the protocol:
// gRPC in the trailers (or, for trailers-only responses, the headers), which Connect writes
// after the body, so the check runs once the body is done; gRPC-web in a trailer frame at the
// end of the body; the Connect protocol in the HTTP status (500) and a JSON error body.
const decodeErrorPrefix = encodeURIComponent("parse binary").toLowerCase();
const internalStatus = String(Code.Internal);
const invalidArgumentStatus = String(Code.InvalidArgument);

function isDecodeErrorMessage(message: string | null | undefined): boolean {
  return message?.toLowerCase().startsWith(decodeErrorPrefix) === true;
}

function remapStatus(headers: Headers | undefined): void {
  if (headers?.get("grpc-status") !== internalStatus) return;
  if (!isDecodeErrorMessage(headers.get("grpc-message"))) return;
  headers.set("grpc-status", invalidArgumentStatus);
}

/** gRPC-web trailer frame: flag 0x80, then `name: value\r\n` lines (uncompressed). */
const grpcWebTrailerFlag = 0x80;
const textDecoder = new TextDecoder();
const textEncoder = new TextEncoder();

function remapGrpcWebTrailer(chunk: Uint8Array): Uint8Array {
  if (chunk.length < 5 || chunk[0] !== grpcWebTrailerFlag) return chunk;
  const view = new DataView(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  if (view.getUint32(1) !== chunk.length - 5) return chunk;
  const headers = new Headers();
  for (const line of textDecoder.decode(chunk.subarray(5)).split("\r\n")) {
    const colon = line.indexOf(":");
    if (colon > 0)
      headers.append(line.slice(0, colon).trim(), line.slice(colon + 1).trim());
  }
  if (headers.get("grpc-status") !== internalStatus) return chunk;
  if (!isDecodeErrorMessage(headers.get("grpc-message"))) return chunk;
  headers.set("grpc-status", invalidArgumentStatus);
  let text = "";
  headers.forEach((value, name) => {
    text += `${name}: ${value}\r\n`;
  });
  const payload = textEncoder.encode(text);
  const frame = new Uint8Array(5 + payload.length);
  frame[0] = grpcWebTrailerFlag;
  new DataView(frame.buffer).setUint32(1, payload.length);
  frame.set(payload, 5);
  return frame;
}

/** Connect unary error: HTTP 500, JSON `{code: "internal", message: "parse binary: …"}`. */
async function remapConnectError(
  response: UniversalServerResponse,
  body: AsyncIterable<Uint8Array>,
): Promise<UniversalServerResponse> {
  const chunks: Uint8Array[] = [];
  for await (const chunk of body) chunks.push(chunk);
  const bytes = Buffer.concat(chunks);
  const unchanged = { ...response, body: createAsyncIterable([bytes]) };
  let error: unknown;
  try {
    error = JSON.parse(bytes.toString("utf8"));
  } catch {
    return unchanged;
  }
  if (
    typeof error !== "object" ||
    error === null ||
    !("code" in error) ||
    error.code !== "internal" ||
    !("message" in error) ||
    typeof error.message !== "string" ||
    !error.message.startsWith("parse binary")
  )
    return unchanged;
  const remapped = textEncoder.encode(
    JSON.stringify({ ...error, code: "invalid_argument" }),
  );
  response.header?.set("content-length", String(remapped.length));
  return { ...response, status: 400, body: createAsyncIterable([remapped]) };
}

/**
 * Rewrites Connect's INTERNAL "parse binary: …" answer (an undecodable request message) to
 * INVALID_ARGUMENT in each protocol: gRPC status header/trailer, gRPC-web trailer frame,
 * Connect HTTP status and JSON error code. Any other response is returned as it is.
 */
export async function remapDecodeErrors(
  response: UniversalServerResponse,
): Promise<UniversalServerResponse> {
  const body = response.body;
  const contentType = response.header?.get("content-type") ?? "";
  if (contentType.startsWith("application/grpc-web")) {
    if (body === undefined) {
      remapStatus(response.header);
      return response;
    }
    return {
      ...response,
      body: (async function* () {
        for await (const chunk of body) yield remapGrpcWebTrailer(chunk);
      })(),
    };
  }
  if (contentType.startsWith("application/grpc")) {
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
  if (response.status === 500 && body !== undefined)
    return remapConnectError(response, body);
  return response;
}
