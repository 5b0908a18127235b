import type { RateLimit } from "../config/rate-limit-config.js";
import type {
  RateLimitDescriptor,
  RateLimitResponse_DescriptorStatus,
} from "../proto.js";

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
   * @returns one status per descriptor, same order and length
   * @throws {@link BackendError} when the backend fails (no partial result)
   */
  doLimit(
    domain: string,
    descriptors: readonly RateLimitDescriptor[],
    limits: readonly (RateLimit | undefined)[],
    hitsAddends: readonly number[],
  ): Promise<RateLimitResponse_DescriptorStatus[]>;
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
