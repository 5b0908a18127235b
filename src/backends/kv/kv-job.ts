/**
 * One request's commands for one kv instance, as the client queues, writes and (cluster) routes
 * them; the replies are written back into it.
 */
export interface KvJob {
  /** `incr`: INCRBY + EXPIRE per key; `get`: GET per key. */
  readonly kind: "incr" | "get";
  /** Keys of this instance. */
  readonly cacheKeys: readonly string[];
  /** `incr`: parallel to `cacheKeys`; undefined for `get`. */
  readonly hitsAddends: readonly number[] | undefined;
  /** `incr`: parallel to `cacheKeys`, in seconds; undefined for `get`. */
  readonly expirationSeconds: readonly number[] | undefined;
  /** Parallel to `cacheKeys`: counter after INCRBY, or current value (0 when absent). */
  readonly results: number[];
  /**
   * `incr` of sliding windows: parallel to `cacheKeys`, the previous window's key to GET in
   * the same pipeline (undefined: none); undefined when no key has one.
   */
  readonly previousKeys: readonly (string | undefined)[] | undefined;
  /** Parallel to `previousKeys`: the previous window's counters (0 when absent). */
  readonly previous: number[] | undefined;
  /** First failure of any of the job's commands (the first one wins); undefined when none. */
  failure: unknown;
}
