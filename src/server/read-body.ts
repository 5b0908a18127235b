import type { IncomingMessage, ServerResponse } from "node:http";
import { Code, ConnectError } from "@connectrpc/connect";

// The request-body and response plumbing shared by the proto3-JSON routes (`/json`,
// `/explain`): one bound on the body, one way to answer with a JSON body.

/**
 * Collects the body of `req`, at most `maxBodyBytes` bytes, and passes it to `onBody` once the
 * request ends. A larger body calls `onTooLarge` once with a RESOURCE_EXHAUSTED error naming
 * the bound (HTTP 413 through the routes' error mapping) and drains the rest unread. A stream
 * error (the client went away) calls `onError`; nothing can be answered then.
 *
 * @param maxBodyBytes - largest accepted body in bytes (`REQUEST_MAX_JSON_BYTES`)
 */
export function readBoundedBody(
  req: IncomingMessage,
  maxBodyBytes: number,
  onBody: (body: Buffer) => void,
  onTooLarge: (err: ConnectError) => void,
  onError: (err: Error) => void,
): void {
  const chunks: Buffer[] = [];
  let size = 0;
  let tooLarge = false;
  req.on("data", (chunk: Buffer) => {
    if (tooLarge) return;
    size += chunk.length;
    if (size > maxBodyBytes) {
      tooLarge = true;
      onTooLarge(
        new ConnectError(
          `request body exceeds ${maxBodyBytes} bytes`,
          Code.ResourceExhausted,
        ),
      );
      req.resume();
      return;
    }
    chunks.push(chunk);
  });
  req.on("end", () => {
    if (!tooLarge) onBody(Buffer.concat(chunks));
  });
  req.on("error", onError);
}

/** Answers `status` with a JSON `body` (already serialized), unless headers went out already. */
export function sendJson(
  res: ServerResponse,
  status: number,
  body: string,
): void {
  if (res.headersSent) return;
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(body),
  });
  res.end(body);
}
