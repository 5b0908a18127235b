// Tracing: OTLP span export.

import { oneOf, ratio, text } from "./codecs.js";
import { setting, settingsGroup } from "./define.js";

/** OTLP trace exporter transport (`TRACING_EXPORTER_PROTOCOL`). */
export type TracingExporterProtocol = "http" | "grpc";

const tracingEnabled = oneOf<boolean>(
  new Map([
    ["true", true],
    ["false", false],
  ]),
  "true or false",
);
const tracingExporterProtocol = oneOf<TracingExporterProtocol>(
  new Map<string, TracingExporterProtocol>([
    ["", "http"],
    ["http", "http"],
    ["grpc", "grpc"],
  ]),
  "http or grpc",
);

export const tracing = settingsGroup("tracing", {
  /** Export OTLP trace spans; exactly `true` or `false`. */
  tracingEnabled: setting({
    env: "TRACING_ENABLED",
    codec: tracingEnabled,
    default: false,
    meaning: "Export OTLP trace spans (true or false only).",
  }),
  /** OTLP transport, `http` (also for "") or `grpc`. */
  tracingExporterProtocol: setting({
    env: "TRACING_EXPORTER_PROTOCOL",
    codec: tracingExporterProtocol,
    default: "http",
    meaning: "http or grpc.",
  }),
  /** `service.name` resource attribute. */
  tracingServiceName: setting({
    env: "TRACING_SERVICE_NAME",
    codec: text,
    default: "RateLimit",
    meaning: "service.name of the spans.",
  }),
  /** `service.namespace` resource attribute. */
  tracingServiceNamespace: setting({
    env: "TRACING_SERVICE_NAMESPACE",
    codec: text,
    default: "",
    meaning: "service.namespace of the spans.",
  }),
  /**
   * `service.instance.id` resource attribute; unset or "" gives a random version-4 UUID per
   * load.
   */
  tracingServiceInstanceId: setting({
    env: "TRACING_SERVICE_INSTANCE_ID",
    codec: text,
    default: "",
    defaultText: "(random UUID v4)",
    // "" as well as unset means "generate one", as in the reference.
    resolve: (id, { randomUUID }) => (id === "" ? randomUUID() : id),
    meaning: "service.instance.id of the spans.",
  }),
  /** Fraction of root traces sampled, 0–1. */
  tracingSamplingRatio: setting({
    env: "TRACING_SAMPLING_RATE",
    codec: ratio,
    default: 1,
    meaning: "Fraction of traces sampled, 0 to 1.",
  }),
});
