import type { IncomingHttpHeaders } from "node:http";
import {
  context,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Context,
  type SpanOptions,
  type TextMapGetter,
} from "@opentelemetry/api";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Logger } from "pino";
import {
  RateLimitResponse_Code,
  type RateLimitRequest,
  type RateLimitResponse,
} from "../proto.js";
import { toConnectError } from "../service/errors.js";
import type { RateLimitService } from "../service/rate-limit-service.js";
import type { StatsManager } from "../stats/stats-manager.js";

/**
 * Header fields as a flat list `[name0, value0, name1, value1, …]` with lower-case names:
 * how the built-in HTTP/2 engine's streams carry them (`H2Stream`), handed over as they are
 * so that a call that is not traced builds no header object.
 */
export interface HeaderFieldList {
  readonly headerFields: readonly string[];
}

/**
 * Headers of an incoming call, read only for the caller's W3C trace context (`traceparent`,
 * `tracestate`, `baggage`): node's header object (`/json`), a fetch
 * `Headers` (the Connect router's `requestHeader`) or a {@link HeaderFieldList} (the built-in
 * HTTP/2 engine's fast path).
 */
export type RequestHeaders = IncomingHttpHeaders | Headers | HeaderFieldList;

/**
 * The gRPC `ShouldRateLimit` method as both the Connect router and the HTTP/2 fast path call
 * it: counts `ratelimit_server.ShouldRateLimit.total_requests` and `.response_time` and maps
 * every failure to a `ConnectError` (rejects with nothing else). With tracing on, the call is
 * one SERVER span that continues the trace of `headers` (see docs/tracing.md); `headers` is
 * not read otherwise. `deadlineAtMs` is the caller's deadline on the `performance.now()`
 * clock in milliseconds (`grpc-timeout`), handed to the service (the backend guard answers by
 * the failure mode before it passes).
 */
export type ShouldRateLimitHandler = (
  request: RateLimitRequest,
  headers?: RequestHeaders,
  deadlineAtMs?: number,
) => Promise<RateLimitResponse>;

/** Options of {@link createShouldRateLimitHandler}. */
export interface ShouldRateLimitHandlerOptions {
  readonly service: RateLimitService;
  readonly statsManager: StatsManager;
  readonly logger: Logger;
  /**
   * One SERVER span per call (`TRACING_ENABLED`). Read once: without it the handler contains
   * no tracing code at all. @defaultValue false
   */
  readonly tracing?: boolean;
}

/** Name of the gRPC server span (the reference's otelgrpc name). */
export const shouldRateLimitSpanName =
  "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/** Attribute names of the ShouldRateLimit server spans (gRPC and `/json`). */
export const spanAttributes = Object.freeze({
  domain: "ratelimit.domain",
  descriptorCount: "ratelimit.descriptor_count",
  overallCode: "ratelimit.overall_code",
});

const tracer = trace.getTracer("ratelimit.server");
const serverKind: SpanOptions = { kind: SpanKind.SERVER };

/** Builds the one {@link ShouldRateLimitHandler} shared by every gRPC entry point. */
export function createShouldRateLimitHandler(
  options: ShouldRateLimitHandlerOptions,
): ShouldRateLimitHandler {
  const { service, statsManager, logger } = options;
  const totalRequests = statsManager.serverTotalRequests("ShouldRateLimit");
  const responseTime = statsManager.serverResponseTime("ShouldRateLimit");
  const handler: ShouldRateLimitHandler = async (
    request,
    _headers,
    deadlineAtMs,
  ) => {
    const startMs = performance.now();
    totalRequests.add(1);
    try {
      return await service.shouldRateLimit(request, deadlineAtMs);
    } catch (err) {
      throw toConnectError(err, statsManager, logger);
    } finally {
      responseTime.recordMs(performance.now() - startMs);
    }
  };
  return options.tracing === true ? traced(handler) : handler;
}

/** Wraps `inner` in a server span whose context is active while `inner` runs. */
function traced(inner: ShouldRateLimitHandler): ShouldRateLimitHandler {
  return async (request, headers, deadlineAtMs) => {
    const parent = extractTraceContext(headers);
    const span = tracer.startSpan(shouldRateLimitSpanName, serverKind, parent);
    // After sampling: the SDK would check attributes given at start even for dropped spans.
    if (span.isRecording()) {
      span.setAttributes({
        "rpc.system": "grpc",
        "rpc.service": "envoy.service.ratelimit.v3.RateLimitService",
        "rpc.method": "ShouldRateLimit",
        [spanAttributes.domain]: request.domain,
        [spanAttributes.descriptorCount]: request.descriptors.length,
      });
    }
    try {
      const response = await context.with(
        trace.setSpan(parent, span),
        inner,
        undefined,
        request,
        headers,
        deadlineAtMs,
      );
      span.setAttribute(
        spanAttributes.overallCode,
        overallCodeName(response.overallCode),
      );
      span.setAttribute("rpc.grpc.status_code", 0); // OK (Connect's Code has no OK)
      return response;
    } catch (err) {
      const e = ConnectError.from(err);
      span.setAttribute("rpc.grpc.status_code", e.code);
      if (isServerFault(e.code))
        span.setStatus({ code: SpanStatusCode.ERROR, message: e.rawMessage });
      throw err;
    } finally {
      span.end();
    }
  };
}

/**
 * Codes that mean the server failed (OpenTelemetry's gRPC conventions); the others (bad
 * request, not found, …) leave the span status unset.
 */
function isServerFault(code: Code): boolean {
  return (
    code === Code.Unknown ||
    code === Code.DeadlineExceeded ||
    code === Code.Unimplemented ||
    code === Code.Internal ||
    code === Code.Unavailable ||
    code === Code.DataLoss
  );
}

/** `OK`, `OVER_LIMIT` or `UNKNOWN`: the value of `ratelimit.overall_code`. */
export function overallCodeName(code: RateLimitResponse_Code): string {
  return code === RateLimitResponse_Code.OK
    ? "OK"
    : code === RateLimitResponse_Code.OVER_LIMIT
      ? "OVER_LIMIT"
      : "UNKNOWN";
}

const fetchHeadersGetter: TextMapGetter<Headers> = {
  get: (carrier, key) => carrier.get(key) ?? undefined,
  keys: (carrier) => [...carrier.keys()],
};
const nodeHeadersGetter: TextMapGetter<IncomingHttpHeaders> = {
  get: (carrier, key) => carrier[key],
  keys: (carrier) => Object.keys(carrier),
};

const fieldListGetter: TextMapGetter<HeaderFieldList> = {
  get: (carrier, key) => {
    const fields = carrier.headerFields;
    for (let i = 0; i < fields.length; i += 2)
      if (fields[i] === key) return fields[i + 1];
    return undefined;
  },
  keys: (carrier) =>
    carrier.headerFields.filter((_, i) => i % 2 === 0 && !_.startsWith(":")),
};

/** Node lower-cases header names, so a node header object never has this camel-case key. */
function isHeaderFieldList(
  headers: IncomingHttpHeaders | HeaderFieldList,
): headers is HeaderFieldList {
  return Array.isArray(headers.headerFields);
}

/**
 * The caller's trace context from `headers` with the registered propagators (W3C
 * `traceparent` by default), or the root context when there is none.
 */
export function extractTraceContext(
  headers: RequestHeaders | undefined,
): Context {
  if (headers === undefined) return ROOT_CONTEXT;
  if (headers instanceof Headers)
    return propagation.extract(ROOT_CONTEXT, headers, fetchHeadersGetter);
  return isHeaderFieldList(headers)
    ? propagation.extract(ROOT_CONTEXT, headers, fieldListGetter)
    : propagation.extract(ROOT_CONTEXT, headers, nodeHeadersGetter);
}
