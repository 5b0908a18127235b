import type { IncomingMessage, ServerResponse } from "node:http";
import {
  context,
  SpanKind,
  SpanStatusCode,
  trace,
  type Span,
} from "@opentelemetry/api";
import {
  fromJson,
  toJson,
  type JsonObject,
  type JsonValue,
} from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import type { Logger } from "pino";
import {
  RateLimitRequestSchema,
  RateLimitResponseSchema,
  RateLimitResponse_Code,
  type RateLimitRequest,
} from "../proto.js";
import { RequestError, toConnectError } from "../service/errors.js";
import type { RateLimitService } from "../service/rate-limit-service.js";
import type { StatsManager } from "../stats/stats-manager.js";
import {
  extractTraceContext,
  overallCodeName,
  spanAttributes,
} from "./should-rate-limit-handler.js";
import { readBoundedBody, sendJson } from "./read-body.js";

/** Options of {@link createJsonHandler}. */
export interface JsonHandlerOptions {
  readonly service: RateLimitService;
  readonly statsManager: StatsManager;
  readonly logger: Logger;
  /** Largest accepted request body, in bytes; larger bodies get 413. @defaultValue 1 MiB */
  readonly maxBodyBytes?: number;
  /**
   * One SERVER span per request (`TRACING_ENABLED`). Read once: without it no span or context
   * is created. @defaultValue false
   */
  readonly tracing?: boolean;
}

const tracer = trace.getTracer("ratelimit.server");

/** Methods that name the `/json` span as themselves; others are `HTTP /json`, `_OTHER`. */
const knownMethods = new Set([
  "GET",
  "HEAD",
  "POST",
  "PUT",
  "DELETE",
  "CONNECT",
  "OPTIONS",
  "TRACE",
  "PATCH",
]);

// Connect-protocol code words and HTTP statuses for the codes the decision path produces.
const httpStatusByCode: Partial<Record<Code, number>> = {
  [Code.InvalidArgument]: 400,
  [Code.Unavailable]: 503,
  [Code.ResourceExhausted]: 413,
  [Code.NotFound]: 404,
};
const codeWord = (code: Code): string =>
  Code[code].replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase();

const utf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * Returns the `/json` handler: proto3 JSON `RateLimitRequest` in, proto3 JSON
 * `RateLimitResponse` out, 200 when OK and 429 when over limit (upstream `server_impl.go`
 * `NewJsonHandler`). Any method and content type are accepted, as upstream does (so `curl -d`
 * works). Errors answer `{"code": "<connect code>", "message": "..."}` with 400 (bad input),
 * 413 (body too large), 503 (no config / backend down) or 500 (bug) instead of upstream's
 * plain `Bad Request`, and are counted in the `should_rate_limit` error stats. With tracing on,
 * each request whose body was read is one SERVER span `POST /json` (see docs/tracing.md).
 */
export function createJsonHandler(
  options: JsonHandlerOptions,
): (req: IncomingMessage, res: ServerResponse) => void {
  const { service, statsManager, logger } = options;
  const maxBodyBytes = options.maxBodyBytes ?? 1024 * 1024;
  const tracing = options.tracing === true;

  function sendError(res: ServerResponse, err: unknown, span?: Span): void {
    const connectError = toConnectError(err, statsManager, logger);
    const status = httpStatusByCode[connectError.code] ?? 500;
    if (span !== undefined) {
      span.setAttribute("http.response.status_code", status);
      if (status >= 500) {
        span.setStatus({
          code: SpanStatusCode.ERROR,
          message: connectError.rawMessage,
        });
      }
    }
    sendJson(
      res,
      status,
      JSON.stringify({
        code: codeWord(connectError.code),
        message: connectError.rawMessage,
      }),
    );
  }

  function decode(body: Buffer): RateLimitRequest {
    if (body.length === 0)
      throw new RequestError(
        "request body must be a JSON RateLimitRequest, got an empty body",
      );
    let json: JsonValue;
    try {
      json = JSON.parse(utf8.decode(body)) as JsonValue;
    } catch (err) {
      throw new RequestError(
        `request body is not valid JSON: ${(err as Error).message}`,
      );
    }
    try {
      return fromJson(RateLimitRequestSchema, json);
    } catch (err) {
      throw new RequestError((err as Error).message);
    }
  }

  /** Decides one request; `span` (tracing only) receives the attributes. */
  async function handle(
    body: Buffer,
    res: ServerResponse,
    span?: Span,
  ): Promise<void> {
    try {
      const request = decode(body);
      span?.setAttributes({
        [spanAttributes.domain]: request.domain,
        [spanAttributes.descriptorCount]: request.descriptors.length,
      });
      const response = await service.shouldRateLimit(request);
      const json = toJson(RateLimitResponseSchema, response) as JsonObject;
      reorderLimitName(json);
      const status =
        response.overallCode === RateLimitResponse_Code.OVER_LIMIT
          ? 429
          : response.overallCode === RateLimitResponse_Code.OK
            ? 200
            : 500;
      if (span !== undefined) {
        span.setAttribute(
          spanAttributes.overallCode,
          overallCodeName(response.overallCode),
        );
        span.setAttribute("http.response.status_code", status);
      }
      sendJson(res, status, JSON.stringify(json));
    } catch (err) {
      sendError(res, err, span);
    }
  }

  /** {@link handle} in a server span that continues the caller's trace. */
  async function handleTraced(
    body: Buffer,
    req: IncomingMessage,
    res: ServerResponse,
  ): Promise<void> {
    const parent = extractTraceContext(req.headers);
    const method = req.method ?? "";
    const known = knownMethods.has(method);
    const span = tracer.startSpan(
      `${known ? method : "HTTP"} /json`,
      { kind: SpanKind.SERVER },
      parent,
    );
    if (span.isRecording()) {
      span.setAttributes({
        "http.request.method": known ? method : "_OTHER",
        "http.route": "/json",
      });
    }
    try {
      await context.with(
        trace.setSpan(parent, span),
        handle,
        undefined,
        body,
        res,
        span,
      );
    } finally {
      span.end();
    }
  }

  return (req, res) => {
    readBoundedBody(
      req,
      maxBodyBytes,
      (body) => {
        if (tracing) void handleTraced(body, req, res);
        else void handle(body, res);
      },
      (err) => {
        sendError(res, err);
      },
      (err) => {
        logger.debug({ err }, "json request stream failed");
      },
    );
  };
}

/**
 * Puts `name` first in every `currentLimit`, as the reference's Go JSON writer does (it uses
 * declaration order; protobuf-es uses field-number order, wire-contract.md §11.3).
 */
function reorderLimitName(json: JsonObject): void {
  const statuses = json["statuses"];
  if (!Array.isArray(statuses)) return;
  for (const status of statuses) {
    if (status === null || typeof status !== "object" || Array.isArray(status))
      continue;
    const limit = status["currentLimit"];
    if (limit === null || typeof limit !== "object" || Array.isArray(limit))
      continue;
    if (limit["name"] === undefined) continue;
    const { name, ...rest } = limit;
    status["currentLimit"] = { name, ...rest };
  }
}
