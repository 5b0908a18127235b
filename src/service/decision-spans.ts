// Tracing's backend span (docs/tracing.md) as a subscriber of the published decisions: one span
// per store call, made after the call from the times the Decision carries, as a child of the
// span active where the service publishes (the ShouldRateLimit or `/json` server span).
import {
  context,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type SpanOptions,
} from "@opentelemetry/api";
import type {
  DecisionChannel,
  DecisionFailure,
} from "../limiter/decision-channel.js";
import type { Decision, DecisionTimes } from "../limiter/decision.js";

/** Options of {@link subscribeDecisionSpans}. */
export interface ServiceTracingOptions {
  /**
   * Value of the `ratelimit.backend` span attribute (`memory`, `kv` or `mc`); `memory` spans
   * are INTERNAL, the others CLIENT.
   */
  readonly backend: string;
}

/** Name of the span of each backend round trip. */
export const backendSpanName = "ratelimit.backend doLimit";

const tracer = trace.getTracer("ratelimit.service");

/**
 * Subscribes tracing's backend span to `decisions` (`TRACING_ENABLED`; `app/` wires it): for
 * each request the store was called for, a span {@link backendSpanName} from the call to its
 * answer (`Decision.times`, which the subscription asks the service to read), child of the
 * active span, with attribute `ratelimit.backend`; a failed call's span has status ERROR with
 * the error's message. Nothing is made under a server span that is not recorded (a trace not
 * sampled), nor for a request refused before the store (no decision).
 *
 * The span is made after the call, so it is not active during it: nothing the backends do
 * starts a span of its own (no instrumentation is loaded).
 *
 * @returns the function that unsubscribes
 */
export function subscribeDecisionSpans(
  decisions: DecisionChannel,
  tracing: ServiceTracingOptions,
): () => void {
  const kind =
    tracing.backend === "memory" ? SpanKind.INTERNAL : SpanKind.CLIENT;
  const attributes: Attributes = { "ratelimit.backend": tracing.backend };
  const span = (
    times: DecisionTimes | undefined,
    error: { readonly error: unknown } | undefined,
  ): void => {
    if (times === undefined) return;
    const parent = context.active();
    // Under a server span that is not recorded (trace not sampled) this one would not be either.
    if (trace.getSpan(parent)?.isRecording() === false) return;
    const options: SpanOptions = { kind, startTime: times.backendStartMs };
    const backend = tracer.startSpan(backendSpanName, options, parent);
    if (backend.isRecording()) {
      backend.setAttributes(attributes);
      if (error !== undefined) {
        const err = error.error;
        backend.setStatus({
          code: SpanStatusCode.ERROR,
          message: err instanceof Error ? err.message : String(err),
        });
      }
    }
    backend.end(times.backendEndMs);
  };
  return decisions.subscribe(
    (decision: Decision) => {
      try {
        span(decision.times, undefined);
      } catch {
        // Tracing is diagnostics: a failure here must not fail the answer.
      }
    },
    {
      times: true,
      onFailure: (failure: DecisionFailure) => {
        try {
          span(failure.times, failure);
        } catch {
          // As above.
        }
      },
    },
  );
}
