// The suite's only ways to reach a server: RLS v3 ShouldRateLimit over gRPC (the generated
// types in gen/, a Connect gRPC transport), and HTTP/1.1 `/json` and `/healthcheck`. Answers
// from both are normalised to one `AnswerView`, so that a step can run over either.
import { create } from "@bufbuild/protobuf";
import { ConnectError, createClient, type Client } from "@connectrpc/connect";
import {
  Http2SessionManager,
  createGrpcTransport,
} from "@connectrpc/connect-node";
import {
  RateLimitDescriptorSchema,
  RateLimitDescriptor_EntrySchema,
} from "../../gen/envoy/extensions/common/ratelimit/v3/ratelimit_pb.js";
import {
  RateLimitRequestSchema,
  RateLimitResponse_Code,
  RateLimitResponse_RateLimit_Unit,
  RateLimitService,
  type RateLimitResponse,
} from "../../gen/envoy/service/ratelimit/v3/rls_pb.js";
import type {
  AnswerView,
  CallOutcome,
  CallRequest,
  CodeName,
  StatusView,
  UnitName,
  Via,
} from "./model.js";

/** Milliseconds one call may take before it counts as an error. */
const callTimeoutMs = 5_000;

/** A server under test, as the wire reaches it. */
export interface WireTarget {
  /** gRPC `host:port`. */
  readonly grpc: string;
  /** HTTP `host:port` (`/json`, `/healthcheck`), when known. */
  readonly http?: string;
}

/** One client of one server: gRPC and HTTP. Close it when done. */
export interface WireClient {
  readonly target: WireTarget;
  /** Sends one ShouldRateLimit call over `via` (gRPC by default). */
  call(request: CallRequest, via?: Via): Promise<CallOutcome>;
  /** One HTTP request; undefined when the target has no HTTP address. */
  http(
    method: string,
    path: string,
    body?: string,
  ): Promise<{ status: number; body: string; contentType: string } | undefined>;
  close(): void;
}

/**
 * Opens a client for `target`. No connection is made until the first call.
 *
 * @param target - addresses as `host:port` (IPv4 or a name; loopback in launch mode)
 */
export function openWireClient(target: WireTarget): WireClient {
  const baseUrl = `http://${target.grpc}`;
  const sessionManager = new Http2SessionManager(baseUrl);
  const transport = createGrpcTransport({ baseUrl, sessionManager });
  const rls: Client<typeof RateLimitService> = createClient(
    RateLimitService,
    transport,
  );
  return {
    target,
    async call(request, via = "grpc") {
      return via === "grpc"
        ? callGrpc(rls, request)
        : callJson(target.http, request);
    },
    async http(method, path, body) {
      if (target.http === undefined) return undefined;
      return httpRequest(target.http, method, path, body);
    },
    close() {
      sessionManager.abort();
    },
  };
}

async function callGrpc(
  rls: Client<typeof RateLimitService>,
  request: CallRequest,
): Promise<CallOutcome> {
  const message = create(RateLimitRequestSchema, {
    domain: request.domain,
    hitsAddend: request.hitsAddend ?? 0,
    descriptors: request.descriptors.map((d) =>
      create(RateLimitDescriptorSchema, {
        entries: d.entries.map(([key, value]) =>
          create(RateLimitDescriptor_EntrySchema, { key, value }),
        ),
        ...(d.hitsAddend !== undefined
          ? { hitsAddend: BigInt(d.hitsAddend) }
          : {}),
        isNegativeHits: d.refund ?? false,
      }),
    ),
  });
  try {
    const response = await rls.shouldRateLimit(message, {
      timeoutMs: callTimeoutMs,
    });
    return { kind: "answer", answer: fromProto(response) };
  } catch (error) {
    const e = ConnectError.from(error);
    return { kind: "error", error: `gRPC ${e.code}: ${e.rawMessage}` };
  }
}

const codeNames: Record<RateLimitResponse_Code, CodeName> = {
  [RateLimitResponse_Code.UNKNOWN]: "UNKNOWN",
  [RateLimitResponse_Code.OK]: "OK",
  [RateLimitResponse_Code.OVER_LIMIT]: "OVER_LIMIT",
};

const unitNames: Record<RateLimitResponse_RateLimit_Unit, UnitName> = {
  [RateLimitResponse_RateLimit_Unit.UNKNOWN]: "UNKNOWN",
  [RateLimitResponse_RateLimit_Unit.SECOND]: "SECOND",
  [RateLimitResponse_RateLimit_Unit.MINUTE]: "MINUTE",
  [RateLimitResponse_RateLimit_Unit.HOUR]: "HOUR",
  [RateLimitResponse_RateLimit_Unit.DAY]: "DAY",
  [RateLimitResponse_RateLimit_Unit.WEEK]: "WEEK",
  [RateLimitResponse_RateLimit_Unit.MONTH]: "MONTH",
  [RateLimitResponse_RateLimit_Unit.YEAR]: "YEAR",
};

function fromProto(response: RateLimitResponse): AnswerView {
  return {
    overallCode: codeNames[response.overallCode],
    statuses: response.statuses.map((s): StatusView => ({
      code: codeNames[s.code],
      currentLimit:
        s.currentLimit === undefined
          ? null
          : {
              requestsPerUnit: s.currentLimit.requestsPerUnit,
              unit: unitNames[s.currentLimit.unit],
            },
      limitRemaining: s.limitRemaining,
      durationUntilReset:
        s.durationUntilReset === undefined
          ? null
          : Number(s.durationUntilReset.seconds),
    })),
    headers: response.responseHeadersToAdd.map((h) => ({
      key: h.key,
      value: h.value,
    })),
  };
}

/**
 * The `/json` body of a request: the proto3 JSON mapping with lower-camel-case names, as the
 * spec's HTTP table gives them.
 */
export function jsonBody(request: CallRequest): string {
  return JSON.stringify({
    domain: request.domain,
    ...(request.hitsAddend !== undefined
      ? { hitsAddend: request.hitsAddend }
      : {}),
    descriptors: request.descriptors.map((d) => ({
      entries: d.entries.map(([key, value]) => ({ key, value })),
      ...(d.hitsAddend !== undefined
        ? { hitsAddend: String(d.hitsAddend) }
        : {}),
      ...(d.refund === true ? { isNegativeHits: true } : {}),
    })),
  });
}

async function callJson(
  http: string | undefined,
  request: CallRequest,
): Promise<CallOutcome> {
  if (http === undefined)
    return { kind: "error", error: "no HTTP address given (--http)" };
  let reply: { status: number; body: string; contentType: string };
  try {
    reply = await httpRequest(http, "POST", "/json", jsonBody(request));
  } catch (error) {
    return { kind: "error", error: `HTTP: ${String(error)}` };
  }
  if (reply.status !== 200 && reply.status !== 429)
    return {
      kind: "error",
      error: `HTTP ${reply.status}: ${reply.body.slice(0, 200)}`,
      httpStatus: reply.status,
    };
  try {
    return {
      kind: "answer",
      answer: { ...fromJson(JSON.parse(reply.body)), httpStatus: reply.status },
    };
  } catch (error) {
    return {
      kind: "error",
      error: `HTTP ${reply.status} with a body that is not a RateLimitResponse: ${String(error)}`,
      httpStatus: reply.status,
    };
  }
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function codeOf(value: unknown): CodeName {
  if (value === undefined) return "UNKNOWN";
  if (value === "OK" || value === "OVER_LIMIT" || value === "UNKNOWN")
    return value;
  if (value === 1) return "OK";
  if (value === 2) return "OVER_LIMIT";
  throw new Error(`unknown code ${JSON.stringify(value)}`);
}

const unitWords = new Set<string>(Object.values(unitNames));

function unitOf(value: unknown): UnitName {
  if (value === undefined) return "UNKNOWN";
  if (typeof value === "string" && unitWords.has(value))
    return value as UnitName;
  if (typeof value === "number") {
    const name: unknown = (
      RateLimitResponse_RateLimit_Unit as Record<number, unknown>
    )[value];
    if (typeof name === "string" && unitWords.has(name))
      return name as UnitName;
  }
  throw new Error(`unknown unit ${JSON.stringify(value)}`);
}

/** Proto3 JSON duration (`"58s"`, `"1.5s"`) to whole seconds. */
function secondsOf(value: unknown): number {
  if (typeof value !== "string" || !/^-?\d+(\.\d+)?s$/.test(value))
    throw new Error(`not a proto3 JSON duration: ${JSON.stringify(value)}`);
  return Math.trunc(Number(value.slice(0, -1)));
}

/**
 * Reads a `/json` answer: proto3 JSON with lower-camel-case names; fields at their default
 * value may be omitted (that mapping omits them).
 *
 * @throws Error when the body is not a RateLimitResponse in that mapping (snake_case names
 *   included: the spec names camelCase)
 */
export function fromJson(body: unknown): AnswerView {
  if (!isRecord(body)) throw new Error("not a JSON object");
  const statuses = body["statuses"] ?? [];
  if (!Array.isArray(statuses)) throw new Error("statuses is not a list");
  const headers = body["responseHeadersToAdd"] ?? [];
  if (!Array.isArray(headers))
    throw new Error("responseHeadersToAdd is not a list");
  return {
    overallCode: codeOf(body["overallCode"]),
    statuses: statuses.map((s: unknown): StatusView => {
      if (!isRecord(s)) throw new Error("a status is not an object");
      const limit = s["currentLimit"];
      const remaining = s["limitRemaining"] ?? 0;
      if (typeof remaining !== "number")
        throw new Error("limitRemaining is not a number");
      let currentLimit: StatusView["currentLimit"] = null;
      if (limit !== undefined) {
        if (!isRecord(limit)) throw new Error("currentLimit is not an object");
        const rpu = limit["requestsPerUnit"] ?? 0;
        if (typeof rpu !== "number")
          throw new Error("requestsPerUnit is not a number");
        currentLimit = { requestsPerUnit: rpu, unit: unitOf(limit["unit"]) };
      }
      const reset = s["durationUntilReset"];
      return {
        code: codeOf(s["code"]),
        currentLimit,
        limitRemaining: remaining,
        durationUntilReset: reset === undefined ? null : secondsOf(reset),
      };
    }),
    headers: headers.map((h: unknown) => {
      if (!isRecord(h) || typeof h["key"] !== "string")
        throw new Error("a header is not {key, value}");
      const value = h["value"];
      return { key: h["key"], value: typeof value === "string" ? value : "" };
    }),
  };
}

async function httpRequest(
  hostPort: string,
  method: string,
  path: string,
  body?: string,
): Promise<{ status: number; body: string; contentType: string }> {
  const response = await fetch(`http://${hostPort}${path}`, {
    method,
    ...(body !== undefined
      ? { body, headers: { "content-type": "application/json" } }
      : {}),
    signal: AbortSignal.timeout(callTimeoutMs),
  });
  return {
    status: response.status,
    body: await response.text(),
    contentType: response.headers.get("content-type") ?? "",
  };
}
