import { Code, ConnectError } from "@connectrpc/connect";
import type { Logger } from "pino";
import { BackendError } from "../limiter/backend-error.js";
import { CacheKeyError } from "../limiter/cache-key-error.js";
import type { StatsManager } from "../stats/stats-manager.js";

/**
 * The request is invalid (empty domain, no descriptors, an entry without key, an override
 * with unit UNKNOWN, undecodable body). Counted as `service_error`; gRPC INVALID_ARGUMENT,
 * HTTP 400. The message names the offending field.
 */
export class RequestError extends Error {
  override readonly name = "RequestError";
  readonly code = "RLS_REQUEST";
}

/**
 * The service cannot decide yet: no rate-limit configuration has loaded. Counted as
 * `service_error`; gRPC UNAVAILABLE, HTTP 503 (the reference answers UNKNOWN / 400).
 */
export class NotReadyError extends Error {
  override readonly name = "NotReadyError";
  readonly code = "RLS_NOT_READY";
}

/**
 * Returns the error type word of `ratelimit.service.call.should_rate_limit.<errType>` for an
 * error thrown by the decision path: `<backend>_error` for backend failures (e.g. `kv_error`),
 * `service_error` for everything else (upstream `ratelimit.go` `ShouldRateLimit`).
 */
export function errorStatType(err: unknown): string {
  return err instanceof BackendError ? `${err.backend}_error` : "service_error";
}

/**
 * The one boundary mapping from internal errors to Connect (gRPC) codes; also counts the error
 * in `ratelimit.service.call.should_rate_limit.<errType>` (the mapping itself is
 * {@link connectErrorOf}).
 */
export function toConnectError(
  err: unknown,
  stats: StatsManager,
  logger: Logger,
): ConnectError {
  stats.shouldRateLimitError(errorStatType(err)).add(1);
  return connectErrorOf(err, logger);
}

/**
 * Maps an internal error to a Connect (gRPC) error without counting it: what
 * {@link toConnectError} answers, and what Explain answers (it reads only, so no statistic
 * moves):
 * - {@link ConnectError} stays as it is (already mapped, e.g. by Connect's own decoding);
 * - {@link RequestError} and `CacheKeyError` → INVALID_ARGUMENT: the caller must fix the request;
 * - {@link NotReadyError} and {@link BackendError} → UNAVAILABLE: retrying later may work, and
 *   Envoy treats it as a failure of the service (fail open / closed per its own setting);
 * - anything else is a bug → INTERNAL, logged with its stack.
 */
export function connectErrorOf(err: unknown, logger: Logger): ConnectError {
  if (err instanceof ConnectError) return err;
  // A descriptor that cannot form a valid cache key for the backend (memcached: too long,
  // whitespace) is the caller's input too.
  if (err instanceof RequestError || err instanceof CacheKeyError)
    return new ConnectError(err.message, Code.InvalidArgument);
  if (err instanceof NotReadyError)
    return new ConnectError(err.message, Code.Unavailable);
  if (err instanceof BackendError) {
    logger.warn({ err }, "backend error during call");
    return new ConnectError(err.message, Code.Unavailable);
  }
  logger.error({ err }, "unexpected error during call");
  return ConnectError.from(err, Code.Internal);
}
