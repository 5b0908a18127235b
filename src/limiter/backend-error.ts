/**
 * A counter backend failed (connection lost, timeout, protocol error). The only error type a
 * {@link RateLimitCache} may reject with; backends wrap their client's error as `cause`.
 */
export class BackendError extends Error {
  override readonly name = "BackendError";
  readonly code = "RLS_BACKEND";
  /**
   * Stats word of the backend (`kv`, `mc`, `memory`): errors are counted in
   * `ratelimit.service.call.should_rate_limit.<backend>_error`.
   */
  readonly backend: string;
  constructor(backend: string, message: string, options?: ErrorOptions) {
    super(message, options);
    this.backend = backend;
  }
}
