import type { IncomingMessage, ServerResponse } from "node:http";
import { cors as connectCors } from "@connectrpc/connect";

/**
 * Applies CORS for browser clients (`CORS_ALLOWED_ORIGINS`) with Connect's header lists
 * (`cors.allowedMethods`, `cors.allowedHeaders`, `cors.exposedHeaders` of `@connectrpc/connect`),
 * so a page on another origin can call ShouldRateLimit and Explain with gRPC-web or Connect.
 *
 * @param allowedOrigins - exact origins (`https://app.example.com`), or `*` for any; empty
 *   turns CORS off (no header is ever added, preflights get no CORS answer)
 * @returns a function to call first for every request: it sets the CORS headers when the
 *   request's `Origin` is allowed, and returns true when it answered the request itself (a
 *   preflight `OPTIONS`, 204)
 */
export function createCors(
  allowedOrigins: readonly string[],
): (req: IncomingMessage, res: ServerResponse) => boolean {
  const origins = new Set(allowedOrigins.map((o) => o.trim()).filter(Boolean));
  const any = origins.has("*");
  if (origins.size === 0) return () => false;
  const allowMethods = connectCors.allowedMethods.join(", ");
  const allowHeaders = connectCors.allowedHeaders.join(", ");
  const exposeHeaders = connectCors.exposedHeaders.join(", ");
  return (req, res) => {
    const origin = req.headers.origin;
    if (origin === undefined || (!any && !origins.has(origin))) return false;
    res.setHeader("access-control-allow-origin", any ? "*" : origin);
    if (!any) res.setHeader("vary", "Origin");
    if (
      req.method === "OPTIONS" &&
      req.headers["access-control-request-method"] !== undefined
    ) {
      res.setHeader("access-control-allow-methods", allowMethods);
      res.setHeader("access-control-allow-headers", allowHeaders);
      res.setHeader("access-control-max-age", "7200");
      res.writeHead(204);
      res.end();
      return true;
    }
    res.setHeader("access-control-expose-headers", exposeHeaders);
    return false;
  };
}
