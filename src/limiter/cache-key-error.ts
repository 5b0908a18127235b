/**
 * A descriptor produces a cache key the backend cannot store: longer than the backend allows,
 * or containing bytes it forbids (the memcached protocol allows at most 250 bytes and no
 * whitespace or control characters; spec "Errors" item 3).
 *
 * It is a problem of the request, not of the backend: a {@link RateLimitCache} rejects the
 * whole call with it before any counter is read or written, so other keys and other callers
 * are unaffected, and the service answers INVALID_ARGUMENT (HTTP 400 on `/json`), counted as
 * `service_error`. The reference instead fails the multi-get of the whole request and lets it
 * through unlimited (behavior.md §9.3).
 */
export class CacheKeyError extends Error {
  override readonly name = "CacheKeyError";
  readonly code = "RLS_CACHE_KEY";
  /** Index of the offending descriptor in the request. */
  readonly descriptorIndex: number;

  /**
   * @param descriptorIndex - index of the offending descriptor in the request
   * @param message - names the descriptor and entry, e.g.
   *   `descriptors[1].entries[0].value "a b" contains whitespace or control characters, …`
   */
  constructor(descriptorIndex: number, message: string) {
    super(message);
    this.descriptorIndex = descriptorIndex;
  }
}
