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
  /**
   * The store may still apply the failed call: its command was written and the client then
   * gave up waiting for the reply (its own silence timeout) on a store that had not closed the
   * connection, so a frozen store applies it when it thaws. False: the store did not get it,
   * or closed the connection (unknown; treated as not applied).
   */
  readonly unanswered: boolean;
  constructor(
    backend: string,
    message: string,
    options?: ErrorOptions & { readonly unanswered?: boolean },
  ) {
    super(message, options);
    this.backend = backend;
    this.unanswered = options?.unanswered ?? false;
  }
}
