import { inspect } from "node:util";
import { diag, DiagLogLevel, type DiagLogger } from "@opentelemetry/api";
import { OTLPTraceExporter as OtlpGrpcTraceExporter } from "@opentelemetry/exporter-trace-otlp-grpc";
import { OTLPTraceExporter as OtlpHttpTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import {
  defaultResource,
  detectResources,
  resourceAttributesEnvDetector,
  resourceFromAttributes,
} from "@opentelemetry/resources";
import { NodeSDK } from "@opentelemetry/sdk-node";
import {
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
} from "@opentelemetry/sdk-trace";
import {
  ATTR_SERVICE_INSTANCE_ID,
  ATTR_SERVICE_NAME,
  ATTR_SERVICE_NAMESPACE,
} from "@opentelemetry/semantic-conventions";
import type { Logger } from "pino";

// The only importer of the OpenTelemetry SDK and exporters (house style §3). Everything else
// uses @opentelemetry/api, whose calls are no-ops until startTracing registers the SDK.

/** OTLP transport of the span exporter (`TRACING_EXPORTER_PROTOCOL`). */
export type TracingProtocol = "http" | "grpc";

/** Options of {@link startTracing}; `main.ts` maps the `TRACING_*` settings onto them. */
export interface TracingOptions {
  /**
   * `http`: OTLP/HTTP with JSON bodies to `<endpoint>/v1/traces`; `grpc`: OTLP/gRPC
   * `TraceService/Export`. The destination comes from the standard `OTEL_EXPORTER_OTLP_*`
   * variables, which the exporter reads itself.
   */
  readonly protocol: TracingProtocol;
  /** `service.name` resource attribute (`TRACING_SERVICE_NAME`). */
  readonly serviceName: string;
  /** `service.namespace` resource attribute, left out when "" (`TRACING_SERVICE_NAMESPACE`). */
  readonly serviceNamespace: string;
  /** `service.instance.id` resource attribute (`TRACING_SERVICE_INSTANCE_ID`). */
  readonly serviceInstanceId: string;
  /**
   * Fraction of new traces sampled, 0–1 (`TRACING_SAMPLING_RATE`); a request that carries a
   * `traceparent` follows its caller's sampled flag instead.
   */
  readonly samplingRatio: number;
  /** Receives the start-up line and exporter errors (as `warn`/`error` lines). */
  readonly logger: Logger;
  /** Longest wait for the last spans to be exported on shutdown, in ms. @defaultValue 5000 */
  readonly shutdownTimeoutMs?: number;
}

/**
 * Flushes the spans still queued and stops the exporter; resolves within the shutdown timeout
 * even if the collector does not answer, and never rejects (failures are logged).
 */
export type StopTracing = () => Promise<void>;

/**
 * Starts the OpenTelemetry Node SDK for traces only and registers it with
 * `@opentelemetry/api`: batch span processor (the `OTEL_BSP_*` variables apply) over the OTLP
 * exporter of `protocol`, sampler `ParentBased(TraceIdRatioBased(samplingRatio))`, resource
 * `service.name` / `service.namespace` / `service.instance.id` (over `OTEL_RESOURCE_ATTRIBUTES`
 * and the SDK's `telemetry.sdk.*`), propagators from `OTEL_PROPAGATORS` (default W3C
 * `tracecontext` and `baggage`), no metrics, no logs, no auto-instrumentation. Export failures
 * are logged and never reach the caller.
 *
 * Call it before the app is built, and only when tracing is enabled: importing this module
 * loads the SDK (hundreds of ms and tens of MiB), so `main.ts` imports it dynamically.
 *
 * ```ts
 * const stopTracing = startTracing({ protocol: "http", serviceName: "RateLimit", … });
 * // … serve …
 * await app.close();
 * await stopTracing();
 * ```
 *
 * @returns the function that flushes and stops tracing
 */
export function startTracing(options: TracingOptions): StopTracing {
  const { logger } = options;
  const log = logger.child({ component: "tracing" });
  const exporter =
    options.protocol === "grpc"
      ? new OtlpGrpcTraceExporter()
      : new OtlpHttpTraceExporter();
  const sdk = new NodeSDK({
    // OTEL_RESOURCE_ATTRIBUTES may add attributes; the TRACING_* ones win.
    autoDetectResources: false,
    resource: defaultResource()
      .merge(detectResources({ detectors: [resourceAttributesEnvDetector] }))
      .merge(resourceFromAttributes(resourceAttributes(options))),
    sampler: new ParentBasedSampler({
      root: new TraceIdRatioBasedSampler(options.samplingRatio),
    }),
    // Wrapped in a batch span processor configured from OTEL_BSP_*.
    traceExporter: exporter,
    metricReaders: [],
    logRecordProcessors: [],
    instrumentations: [],
  });
  // After the SDK's constructor, which installs a console logger when OTEL_LOG_LEVEL is set.
  diag.setLogger(diagToPino(log), DiagLogLevel.WARN);
  sdk.start();
  log.info(
    {
      protocol: options.protocol,
      serviceName: options.serviceName,
      serviceNamespace: options.serviceNamespace,
      serviceInstanceId: options.serviceInstanceId,
      samplingRate: options.samplingRatio,
    },
    "tracer provider initialized",
  );

  const timeoutMs = options.shutdownTimeoutMs ?? 5000;
  let stopping: Promise<void> | undefined;
  return () => {
    stopping ??= new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        log.warn(
          { timeoutMs },
          "tracing shutdown timed out; unexported spans are dropped",
        );
        resolve();
      }, timeoutMs);
      timer.unref();
      sdk.shutdown().then(
        () => {
          clearTimeout(timer);
          resolve();
        },
        (err: unknown) => {
          clearTimeout(timer);
          log.error({ err }, "tracing shutdown failed");
          resolve();
        },
      );
    });
    return stopping;
  };
}

function resourceAttributes(options: TracingOptions): Record<string, string> {
  const attributes: Record<string, string> = {
    [ATTR_SERVICE_NAME]: options.serviceName,
    [ATTR_SERVICE_INSTANCE_ID]: options.serviceInstanceId,
  };
  if (options.serviceNamespace !== "")
    attributes[ATTR_SERVICE_NAMESPACE] = options.serviceNamespace;
  return attributes;
}

/**
 * Routes the SDK's diagnostics (export failures among them) to the service log. The SDK's
 * error handler passes an exception as its JSON text; that becomes `err` with its message.
 */
function diagToPino(log: Logger): DiagLogger {
  const emit =
    (level: "error" | "warn" | "info" | "debug" | "trace") =>
    (message: string, ...args: unknown[]): void => {
      const err = exceptionFromJson(message);
      if (err !== undefined) {
        log[level]({ err }, `tracing: ${err.message}`);
        return;
      }
      const text =
        args.length === 0
          ? message
          : `${message} ${args.map((a) => (typeof a === "string" ? a : inspect(a, { breakLength: Infinity }))).join(" ")}`;
      log[level](`tracing: ${text}`);
    };
  return {
    error: emit("error"),
    warn: emit("warn"),
    info: emit("info"),
    debug: emit("debug"),
    verbose: emit("trace"),
  };
}

/** The flattened exception the SDK's error handler logs as JSON, if `text` is one. */
function exceptionFromJson(
  text: string,
): { message: string; [key: string]: unknown } | undefined {
  if (!text.startsWith("{")) return undefined;
  try {
    const value: unknown = JSON.parse(text);
    if (
      typeof value === "object" &&
      value !== null &&
      "message" in value &&
      typeof value.message === "string"
    )
      return { ...value, message: value.message };
  } catch {
    // Not JSON after all: logged as text.
  }
  return undefined;
}
