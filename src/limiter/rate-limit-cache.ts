import type { RateLimit } from "../config/rate-limit-config.js";
import type { RequestPlan } from "./request-plan.js";
import type {
  RateLimitDescriptor,
  RateLimitResponse_DescriptorStatus,
} from "../proto.js";

/** One counter as {@link RateLimitCache.peekCounters} found it. */
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

/** What charging a request would do ({@link RateLimitCache.previewCharge}). */
export interface ChargePreview {
  /**
   * The request plan: each counted descriptor holds its counters as read (`current`, and
   * `previous` for sliding windows) and what the charge would add (`increment`).
   */
  readonly plan: RequestPlan;
  /** All-or-nothing charging would refuse the request (no counter charged). */
  readonly refused: boolean;
  /**
   * `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` would hold increments back: `local-cache` (a
   * key is over limit in the local cache: no counter is incremented), `over-limit` (only
   * the counters that go over are), undefined when it would not (or is off).
   */
  readonly stopped: "local-cache" | "over-limit" | undefined;
}

/**
 * The counter backend interface the service calls and every backend (memory, kv, mc)
 * implements; the TS form of upstream `limiter/cache.go` `RateLimitCache`.
 */
export interface RateLimitCache {
  /**
   * Counts the hits of one request and returns one status per descriptor.
   *
   * @param domain - the request domain
   * @param descriptors - the request descriptors
   * @param limits - parallel to `descriptors`: the limit to apply, or `undefined` for "not
   *   checked" (no match, unlimited, replaced); such descriptors get `{code: OK}` and no
   *   backend traffic
   * @param hitsAddends - parallel to `descriptors`: hits to add (≥ 0)
   * @param deadlineAtMs - the caller's deadline (`grpc-timeout`) on the `performance.now()`
   *   clock, in milliseconds, or undefined; only the backend guard reads it (it answers by the
   *   failure mode before it passes)
   * @returns one status per descriptor, same order and length
   * @throws {@link BackendError} when the backend fails (no partial result)
   */
  doLimit(
    domain: string,
    descriptors: readonly RateLimitDescriptor[],
    limits: readonly (RateLimit | undefined)[],
    hitsAddends: readonly number[],
    deadlineAtMs?: number,
  ): Promise<RateLimitResponse_DescriptorStatus[]>;
  /**
   * Reads the counters a request would charge, without changing them or any statistic
   * (Explain API with `charge` false): memory reads its map, kv sends `GET` (one pipeline per
   * instance), mc one multi-get. Sliding windows read the previous window's counter too (the
   * same keys `doLimit` reads). Optional: a backend without it explains without counters.
   *
   * @param limits - as for {@link RateLimitCache.doLimit}
   * @returns parallel to `descriptors`; `undefined` where `limits[i]` is undefined
   * @throws {@link BackendError} when the backend fails
   */
  peekCounters?(
    domain: string,
    descriptors: readonly RateLimitDescriptor[],
    limits: readonly (RateLimit | undefined)[],
  ): Promise<(CounterReading | undefined)[]>;
  /**
   * Decides what charging a request would do without changing any counter, statistic or the
   * local cache (the Explain API with `charge` false), with the rules of `doLimit`.
   * Optional: without it Explain predicts from counters read as absent.
   *
   * @param limits - as for {@link RateLimitCache.doLimit}
   * @param hitsAddends - as for {@link RateLimitCache.doLimit}
   * @throws {@link BackendError} when the backend fails
   */
  previewCharge?(
    domain: string,
    descriptors: readonly RateLimitDescriptor[],
    limits: readonly (RateLimit | undefined)[],
    hitsAddends: readonly number[],
  ): Promise<ChargePreview>;
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
