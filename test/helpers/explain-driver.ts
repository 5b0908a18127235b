// Drives a whole in-process service (createApp, memory backend, default settings) through its
// public surfaces only: ShouldRateLimit over gRPC on the gRPC port, Explain over Connect on the
// debug port (which always serves it), and the `ratelimit-client -explain` tree text. The
// Explain golden test and the per-algorithm component tests use it, so they keep working
// unchanged while the limiter and Explain are restructured behind those surfaces (issue 32).

import {
  create,
  toJson,
  type JsonObject,
  type JsonValue,
} from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import {
  createConnectTransport,
  createGrpcTransport,
} from "@connectrpc/connect-node";
import { formatExplanation } from "../../src/cli/explain-format.js";
import {
  ExplainRequestSchema,
  ExplainResponseSchema,
  ExplainService,
  RateLimitRequestSchema,
  RateLimitResponseSchema,
  RateLimitService,
  type ExplainResponse,
  type RateLimitRequest,
  type RateLimitResponse,
} from "../../src/proto.js";
import type { Clock } from "../../src/util/clock.js";
import { startTestApp, type TestApp } from "./rls-app.js";
import { silentLogger } from "./silent-logger.js";

/**
 * A clock the test moves by hand, in milliseconds (token buckets decide on `nowMs`, windows on
 * whole seconds); `nowSeconds` rounds down as the {@link Clock} contract says.
 */
export class ManualMsClock implements Clock {
  ms: number;
  constructor(ms: number) {
    this.ms = ms;
  }
  nowMs(): number {
    return this.ms;
  }
  nowSeconds(): number {
    return Math.floor(this.ms / 1000);
  }
  /** Moves the clock forward by `ms` milliseconds. */
  advance(ms: number): void {
    this.ms += ms;
  }
}

/** A failed call as recorded: the Connect code's name and the message. */
export interface CallError {
  readonly code: string;
  readonly message: string;
}

/** What one ShouldRateLimit call gave: the response, or the error. */
export type ChargeResult =
  | { readonly ok: true; readonly response: RateLimitResponse }
  | { readonly ok: false; readonly error: CallError };

/** What one Explain call gave: the answer and its tree text, or the error. */
export type ExplainResult =
  | {
      readonly ok: true;
      readonly response: ExplainResponse;
      /** `formatExplanation` of the answer: what `ratelimit-client -explain` prints. */
      readonly text: string;
    }
  | { readonly ok: false; readonly error: CallError };

/** A running service and the two clients that call it. */
export interface ExplainDriver {
  readonly clock: ManualMsClock;
  /** ShouldRateLimit over gRPC (the gRPC port, as Envoy calls it). */
  shouldRateLimit(request: RateLimitRequest): Promise<ChargeResult>;
  /** Explain over Connect on the debug port; `charge` also counts the request. */
  explain(request: RateLimitRequest, charge?: boolean): Promise<ExplainResult>;
  /**
   * The debug port's `/stats` lines of the decision's statistics (`ratelimit.service.*` but
   * the config loads, `ratelimit_server.*`), counters and gauges only, sorted by name as
   * `/stats` sorts them.
   */
  statistics(): Promise<readonly string[]>;
  stop(): Promise<void>;
}

function callError(err: unknown): CallError {
  const e = ConnectError.from(err);
  return { code: Code[e.code], message: e.rawMessage };
}

/**
 * Starts the service on loopback (port 0) with the memory backend, the default settings, the
 * config `files` (file name → YAML text) and a {@link ManualMsClock} at `startMs`.
 */
export async function startExplainDriver(
  files: Record<string, string>,
  startMs: number,
): Promise<ExplainDriver> {
  const clock = new ManualMsClock(startMs);
  const t: TestApp = await startTestApp(files, {}, silentLogger(), { clock });
  const rls = createClient(
    RateLimitService,
    createGrpcTransport({ baseUrl: `http://${t.addresses.grpc}` }),
  );
  const explainClient = createClient(
    ExplainService,
    createConnectTransport({
      baseUrl: `http://${t.addresses.debug}`,
      httpVersion: "1.1",
    }),
  );
  return {
    clock,
    async shouldRateLimit(request) {
      try {
        return { ok: true, response: await rls.shouldRateLimit(request) };
      } catch (err) {
        return { ok: false, error: callError(err) };
      }
    },
    async explain(request, charge = false) {
      try {
        const response = await explainClient.explain(
          create(ExplainRequestSchema, { request, charge }),
        );
        return {
          ok: true,
          response,
          text: formatExplanation(response, request),
        };
      } catch (err) {
        return { ok: false, error: callError(err) };
      }
    },
    async statistics() {
      const text = await (
        await fetch(`http://${t.addresses.debug}/stats`)
      ).text();
      // Counters and gauges only: timers (`count=… sum_ms=…`) measure real time, and the
      // config loads follow the file watcher, not the requests.
      return text
        .split("\n")
        .filter(
          (line) =>
            /^ratelimit(\.service\.|_server\.)\S+: -?\d+$/.test(line) &&
            !line.startsWith("ratelimit.service.config_load_"),
        );
    },
    stop: () => t.stop(),
  };
}

/** The proto3 JSON of a request, as recorded. */
export function requestJson(request: RateLimitRequest): JsonValue {
  return toJson(RateLimitRequestSchema, request);
}

/** A charge as recorded: the response's proto3 JSON, or the error. */
export function chargeJson(result: ChargeResult): JsonObject {
  return result.ok
    ? { response: toJson(RateLimitResponseSchema, result.response) }
    : { error: { ...result.error } };
}

/** An Explain call as recorded: the answer's proto3 JSON and its tree text, or the error. */
export function explainJson(result: ExplainResult): JsonObject {
  return result.ok
    ? {
        response: toJson(ExplainResponseSchema, result.response),
        text: result.text,
      }
    : { error: { ...result.error } };
}
