import type { LimitRequest } from "./limit-request.js";
import type { DryRun, DryRunOptions } from "./pipeline.js";
import type { RateLimitResponse_DescriptorStatus } from "../proto.js";

/** One counter of a plan as the store holds it (Explain: `counterReading`). */
export interface CounterReading {
  /** The cache key, as stored. */
  readonly key: string;
  /** The stored count (0 when absent). */
  readonly value: number;
  /** Start of the counter's window, seconds since the Unix epoch. */
  readonly windowStartSeconds: number;
  /** End of the counter's window (exclusive), seconds since the Unix epoch. */
  readonly windowEndSeconds: number;
  /** The local over-limit cache knows the key is over limit (the backend was not read). */
  readonly localCacheHit: boolean;
  /**
   * Sliding windows only: the previous window's cache key, which the decision reads (never
   * writes); undefined for fixed windows.
   */
  readonly previousKey?: string | undefined;
  /** Sliding windows only: the previous window's count (0 when absent or not read). */
  readonly previousValue?: number | undefined;
}

/**
 * The counter backend interface the service calls and every backend (memory, kv, mc)
 * implements; the TS form of upstream `limiter/cache.go` `RateLimitCache`.
 */
export interface RateLimitCache {
  /**
   * Counts the hits of one request and returns one status per descriptor.
   *
   * @param request - the request after the decision rules: a descriptor whose limit is
   *   `undefined` ("not checked": no match, unlimited, replaced) gets `{code: OK}` and no
   *   backend traffic; the store's pipeline sets `request.counted` once it has the statuses
   * @param deadlineAtMs - the caller's deadline (`grpc-timeout`) on the `performance.now()`
   *   clock, in milliseconds, or undefined; only the backend guard reads it (it answers by the
   *   failure mode before it passes)
   * @returns one status per descriptor, same order and length
   * @throws {@link BackendError} when the backend fails (no partial result)
   */
  doLimit(
    request: LimitRequest,
    deadlineAtMs?: number,
  ): Promise<RateLimitResponse_DescriptorStatus[]>;
  /**
   * Decides the request as `doLimit` would over a read-only view of the store, with
   * statistics muted (the Explain API; `RateLimitPipeline.dryRun`). Optional: without it
   * Explain predicts from counters read as absent.
   *
   * @throws {@link BackendError} when the backend fails
   */
  dryRun?(request: LimitRequest, options: DryRunOptions): Promise<DryRun>;
  /**
   * Connects and waits until the backend answers, retrying as the backend's options say;
   * the service opens its listeners only after it resolves. Absent for in-process backends.
   */
  start?(): Promise<void>;
  /** Waits for pending background writes (none for synchronous backends). */
  flush(): Promise<void>;
  /** Flushes and releases connections and timers; idempotent. */
  close(): Promise<void>;
}
