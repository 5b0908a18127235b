import type { AppContext } from "./app-context.js";
import { MemoryCounterBackend } from "../backends/memory/memory-counter-backend.js";
import type { FailureMode } from "../config/failure-mode.js";
import { BackendGuard } from "../limiter/backend-guard.js";
import { createDecider } from "../limiter/decide.js";
import { RateLimitPipeline } from "../limiter/pipeline.js";

/**
 * How the service answers when the kv or mc backend fails (docs/failure-modes.md); the
 * values of `BACKEND_FAILURE_MODE`, `BACKEND_FAILURE_THRESHOLD`, `BACKEND_PROBE_INTERVAL` and
 * `BACKEND_FAILURE_LOCAL_SHARE`.
 */
export interface BackendFailureOptions {
  /** `BACKEND_FAILURE_MODE`. @defaultValue "error" */
  readonly mode?: FailureMode;
  /** `BACKEND_FAILURE_THRESHOLD`: consecutive failures that open the circuit. @defaultValue 3 */
  readonly failureThreshold?: number;
  /** `BACKEND_PROBE_INTERVAL` in milliseconds. @defaultValue 500 */
  readonly probeIntervalMs?: number;
  /** `BACKEND_FAILURE_LOCAL_SHARE`, 0 < share ≤ 1. @defaultValue 1 */
  readonly localShare?: number;
  /** `BACKEND_DECISION_TIMEOUT` in milliseconds; 0: none. @defaultValue 0 */
  readonly decisionTimeoutMs?: number;
  /** The backend's own timeout in milliseconds (kv: `KV_TIMEOUT`); 0: unknown. @defaultValue 0 */
  readonly backendTimeoutMs?: number;
}

/**
 * Wraps the kv or mc backend in a {@link BackendGuard}. The `local` mode's limiter is the
 * memory backend with its own fixed-window logic (same near-limit ratio and cache key prefix,
 * no local over-limit cache, so local verdicts never leak into the backend's answers). With a
 * mode other than `error`, a failing `backend` health component reports the service degraded
 * instead of unhealthy.
 *
 * @throws {@link RangeError} when a number is out of range (see {@link BackendGuard})
 */
export function guardBackend(
  backend: RateLimitPipeline,
  backendName: "kv" | "mc",
  failure: BackendFailureOptions,
  context: AppContext,
  limiter: { readonly nearLimitRatio: number; readonly cacheKeyPrefix: string },
): BackendGuard {
  const { clock, health } = context;
  if ((failure.mode ?? "error") !== "error") health.tolerate("backend");
  return new BackendGuard({
    backend,
    backendName,
    ...(failure.mode !== undefined ? { mode: failure.mode } : {}),
    ...(failure.failureThreshold !== undefined
      ? { failureThreshold: failure.failureThreshold }
      : {}),
    ...(failure.probeIntervalMs !== undefined
      ? { probeIntervalMs: failure.probeIntervalMs }
      : {}),
    ...(failure.localShare !== undefined
      ? { localShare: failure.localShare }
      : {}),
    ...(failure.decisionTimeoutMs !== undefined
      ? { decisionTimeoutMs: failure.decisionTimeoutMs }
      : {}),
    ...(failure.backendTimeoutMs !== undefined
      ? { backendTimeoutMs: failure.backendTimeoutMs }
      : {}),
    createLocalBackend: () => new MemoryCounterBackend({ clock }),
    createLocalLimiter: (counters) =>
      new RateLimitPipeline({
        // Local limiters count copies of the request (its `counted` stays the store's); the
        // copy's plan says what a local answer charged (taken back when the store counted it).
        recordsCounts: true,
        backend: counters,
        decider: createDecider({
          clock,
          nearLimitRatio: limiter.nearLimitRatio,
          cacheKeyPrefix: limiter.cacheKeyPrefix,
          expirationJitterMaxSeconds: 0,
        }),
      }),
    // The local mode's outage charges go to the store's counters when it answers again.
    replay: (slots, nowSeconds) => backend.backend.add(slots, nowSeconds),
    clock,
    logger: context.logger.child({ component: "backend-guard" }),
    statsStore: context.statsManager.store,
    onDegradedChange: (degraded) => {
      health.setDegraded("backend", degraded);
    },
  });
}
