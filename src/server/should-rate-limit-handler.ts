import type { Logger } from "pino";
import type { RateLimitRequest, RateLimitResponse } from "../proto.js";
import { toConnectError } from "../service/errors.js";
import type { RateLimitService } from "../service/rate-limit-service.js";
import type { StatsManager } from "../stats/stats-manager.js";

/**
 * The gRPC `ShouldRateLimit` method as both the Connect router and the HTTP/2 fast path call
 * it: counts `ratelimit_server.ShouldRateLimit.total_requests` and `.response_time` and maps
 * every failure to a `ConnectError` (rejects with nothing else).
 */
export type ShouldRateLimitHandler = (
  request: RateLimitRequest,
) => Promise<RateLimitResponse>;

/** Options of {@link createShouldRateLimitHandler}. */
export interface ShouldRateLimitHandlerOptions {
  readonly service: RateLimitService;
  readonly statsManager: StatsManager;
  readonly logger: Logger;
}

/** Builds the one {@link ShouldRateLimitHandler} shared by every gRPC entry point. */
export function createShouldRateLimitHandler(
  options: ShouldRateLimitHandlerOptions,
): ShouldRateLimitHandler {
  const { service, statsManager, logger } = options;
  const totalRequests = statsManager.serverTotalRequests("ShouldRateLimit");
  const responseTime = statsManager.serverResponseTime("ShouldRateLimit");
  return async (request) => {
    const startMs = performance.now();
    totalRequests.add(1);
    try {
      return await service.shouldRateLimit(request);
    } catch (err) {
      throw toConnectError(err, statsManager, logger);
    } finally {
      responseTime.recordMs(performance.now() - startMs);
    }
  };
}
