import { AsyncLocalStorage } from "node:async_hooks";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  context,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Context,
  type ContextManager,
} from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import {
  AlwaysOnSampler,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  TracerProvider,
} from "@opentelemetry/sdk-trace";
import { silentLogger } from "../../helpers/silent-logger.js";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { BackendError } from "../../../src/limiter/backend-error.js";
import { createDecider } from "../../../src/limiter/decide.js";
import type { RateLimitCache } from "../../../src/limiter/rate-limit-cache.js";
import { RateLimitRequestSchema } from "../../../src/proto.js";
import {
  createShouldRateLimitHandler,
  extractTraceContext,
  shouldRateLimitSpanName,
} from "../../../src/server/should-rate-limit-handler.js";
import {
  backendSpanName,
  subscribeDecisionSpans,
  type ServiceTracingOptions,
} from "../../../src/service/decision-spans.js";
import { createRateLimitService } from "../../../src/service/rate-limit-service.js";
import { createDecisionChannel } from "../../../src/limiter/decision-channel.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { FakeClock } from "../../helpers/fake-clock.js";
import { fakeConfig } from "../../helpers/fake-config.js";
import { testRateLimit } from "../../helpers/rate-limit.js";
import { memoryLimiter } from "../../helpers/limiters.js";

// The spans of the decision path with an in-memory SDK (this file's process only): what the
// handler and the service record, and that they record nothing when tracing is off.

/** A context manager over AsyncLocalStorage, as the Node SDK registers one. */
class LocalStorageContextManager implements ContextManager {
  private readonly storage = new AsyncLocalStorage<Context>();
  active(): Context {
    return this.storage.getStore() ?? ROOT_CONTEXT;
  }
  with<A extends unknown[], F extends (...args: A) => ReturnType<F>>(
    ctx: Context,
    fn: F,
    thisArg?: ThisParameterType<F>,
    ...args: A
  ): ReturnType<F> {
    return this.storage.run(ctx, () => fn.call(thisArg, ...args));
  }
  bind<T>(_ctx: Context, target: T): T {
    return target;
  }
  enable(): this {
    return this;
  }
  disable(): this {
    this.storage.disable();
    return this;
  }
}

const exporter = new InMemorySpanExporter();
const traceId = "0af7651916cd43dd8448eb211c80319c";
const callerSpanId = "b7ad6b7169203331";
const traceparent = `00-${traceId}-${callerSpanId}-01`;

const provider = new TracerProvider({
  sampler: new AlwaysOnSampler(),
  spanProcessors: [new SimpleSpanProcessor({ exporter })],
});

/** The spans ended so far (the simple processor exports asynchronously). */
async function finishedSpans() {
  await provider.forceFlush();
  return exporter.getFinishedSpans();
}

beforeAll(() => {
  context.setGlobalContextManager(new LocalStorageContextManager());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(provider);
});

afterEach(() => {
  exporter.reset();
});

const accountRequest = create(RateLimitRequestSchema, {
  domain: "rl",
  descriptors: [{ entries: [{ key: "category", value: "account" }] }],
});

function setup(tracing: boolean, cache?: RateLimitCache) {
  const clock = new FakeClock(2222);
  const statsManager = createStatsManager();
  const backend =
    cache ??
    memoryLimiter({
      decider: createDecider({ clock }),
      clock,
      stopCacheKeyIncrementWhenOverlimit: false,
    });
  const serviceTracing: ServiceTracingOptions = {
    backend: cache === undefined ? "memory" : "kv",
  };
  const logger = silentLogger();
  // As the app wires it: the backend span is a subscriber of the published decisions.
  const decisions = createDecisionChannel();
  if (tracing) subscribeDecisionSpans(decisions, serviceTracing);
  const service = createRateLimitService({
    cache: backend,
    statsManager,
    clock,
    logger,
    decisions,
  });
  service.applyConfigUpdate({
    ok: true,
    config: fakeConfig("rl", {
      "category=account": testRateLimit(statsManager, "rl.category", 4),
    }),
  });
  return createShouldRateLimitHandler({
    service,
    statsManager,
    logger,
    tracing,
  });
}

describe("decision spans", () => {
  it("records nothing when tracing is off, even for a traced caller", async () => {
    const handler = setup(false);
    await handler(accountRequest, new Headers({ traceparent }));
    expect(await finishedSpans()).toEqual([]);
  });

  it("records a server span continuing the caller and a backend child span", async () => {
    const handler = setup(true);
    await handler(accountRequest, { traceparent });
    const spans = await finishedSpans();
    const server = spans.find((s) => s.name === shouldRateLimitSpanName);
    const backend = spans.find((s) => s.name === backendSpanName);
    expect(server?.kind).toBe(SpanKind.SERVER);
    expect(server?.spanContext().traceId).toBe(traceId);
    expect(server?.parentSpanContext?.spanId).toBe(callerSpanId);
    expect(server?.attributes).toMatchObject({
      "ratelimit.domain": "rl",
      "ratelimit.descriptor_count": 1,
      "ratelimit.overall_code": "OK",
      "rpc.grpc.status_code": 0,
    });
    expect(backend?.kind).toBe(SpanKind.INTERNAL);
    expect(backend?.attributes).toEqual({ "ratelimit.backend": "memory" });
    expect(backend?.parentSpanContext?.spanId).toBe(
      server?.spanContext().spanId,
    );
  });

  it("marks both spans as errors when the backend fails", async () => {
    const failing: RateLimitCache = {
      doLimit: () => Promise.reject(new BackendError("kv", "connection lost")),
      flush: () => Promise.resolve(),
      close: () => Promise.resolve(),
    };
    const handler = setup(true, failing);
    const err = await handler(accountRequest).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.Unavailable);
    const spans = await finishedSpans();
    const server = spans.find((s) => s.name === shouldRateLimitSpanName);
    const backend = spans.find((s) => s.name === backendSpanName);
    expect(server?.parentSpanContext).toBeUndefined();
    expect(server?.status.code).toBe(SpanStatusCode.ERROR);
    expect(server?.attributes["rpc.grpc.status_code"]).toBe(Code.Unavailable);
    expect(backend?.kind).toBe(SpanKind.CLIENT);
    expect(backend?.status).toEqual({
      code: SpanStatusCode.ERROR,
      message: "connection lost",
    });
  });
});

describe("extractTraceContext", () => {
  it.each([
    ["a fetch Headers", new Headers({ traceparent })],
    ["a node header object", { traceparent }],
    ["a repeated node header", { traceparent: [traceparent] }],
  ])("reads traceparent from %s", (_what, headers) => {
    const span = trace.getSpanContext(extractTraceContext(headers));
    expect(span?.traceId).toBe(traceId);
    expect(span?.spanId).toBe(callerSpanId);
    expect(span?.isRemote).toBe(true);
  });

  it("gives the root context without headers or a valid traceparent", () => {
    expect(extractTraceContext(undefined)).toBe(ROOT_CONTEXT);
    expect(
      trace.getSpanContext(extractTraceContext({ traceparent: "garbage" })),
    ).toBeUndefined();
  });
});
