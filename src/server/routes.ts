import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter } from "@connectrpc/connect";
import { registerAdmin, type AdminParts } from "../admin/admin-routes.js";
import type { HealthChecker } from "../health/health.js";
import {
  Health,
  HealthCheckResponseSchema,
  HealthCheckResponse_ServingStatus as ServingStatus,
  HealthListResponseSchema,
  RateLimitService,
  ExplainService,
  RateLimitQuotaService,
  type ExplainBucketRequest,
  type ExplainBucketResponse,
  type ExplainRequest,
  type ExplainResponse,
  type HealthCheckResponse,
  type ListBucketsRequest,
  type ListBucketsResponse,
  type RateLimitQuotaResponse,
  type RateLimitQuotaUsageReports,
} from "../proto.js";
import type { StatsManager } from "../stats/stats-manager.js";
import type { ShouldRateLimitHandler } from "./should-rate-limit-handler.js";

/** Options of {@link createRoutes}. */
export interface RoutesOptions {
  /** The shared ShouldRateLimit entry point (see `createShouldRateLimitHandler`). */
  readonly shouldRateLimit: ShouldRateLimitHandler;
  readonly health: HealthChecker;
  readonly statsManager: StatsManager;
  /**
   * Serves `ratelimit.explain.v1.ExplainService` (`EXPLAIN_ENABLED`); when absent the method
   * answers UNIMPLEMENTED with a message naming the setting. @defaultValue disabled
   */
  readonly explain?: ExplainHandler;
  /**
   * Serves `ExplainBucket` and `ListBuckets` of the Explain API (with `explain`); when absent
   * they answer FAILED_PRECONDITION. @defaultValue not served
   */
  readonly explainBuckets?: BucketExplainHandlers;
  /**
   * Serves `envoy.service.rate_limit_quota.v3.RateLimitQuotaService` (RLQS, a bidirectional
   * stream; gRPC only); when absent the method answers UNIMPLEMENTED.
   */
  readonly rlqs?: RlqsHandler;
  /**
   * Serves `ratelimit.admin.v1.AdminService` (`ADMIN_ENABLED`); when absent every method
   * answers UNIMPLEMENTED naming the setting. @defaultValue disabled
   */
  readonly admin?: AdminParts;
}

/** The RLQS entry point: one `StreamRateLimitQuotas` call (see `createRlqsService`). */
export type RlqsHandler = (
  requests: AsyncIterable<RateLimitQuotaUsageReports>,
) => AsyncIterable<RateLimitQuotaResponse>;

/** The Explain entry point the routes call (see `createExplainHandler`). */
export type ExplainHandler = (
  request: ExplainRequest,
) => Promise<ExplainResponse>;

/**
 * The RLQS half of the Explain API, `ExplainBucket` and `ListBuckets` (see
 * `createBucketExplainHandlers`).
 */
export interface BucketExplainHandlers {
  readonly explainBucket: (
    request: ExplainBucketRequest,
  ) => Promise<ExplainBucketResponse>;
  readonly listBuckets: (
    request: ListBucketsRequest,
  ) => Promise<ListBucketsResponse>;
}

/** Message of the FAILED_PRECONDITION answer of `ExplainBucket` and `ListBuckets` without RLQS. */
export const rlqsNotServedMessage =
  "this server does not serve the rate limit quota service (RLQS): it has no buckets to explain";

/** Message of the UNIMPLEMENTED answer (and of `/explain`'s 404) while Explain is off. */
export const explainDisabledMessage =
  "the Explain API is disabled on this port: set EXPLAIN_ENABLED=true to enable it (the debug port's console always serves it)";

/**
 * Registers `ratelimit.explain.v1.ExplainService` on a router: the handlers, or an
 * UNIMPLEMENTED answer naming `EXPLAIN_ENABLED` for every method when `explain` is undefined.
 * With Explain on but no `buckets`, `ExplainBucket` and `ListBuckets` answer
 * FAILED_PRECONDITION ({@link rlqsNotServedMessage}).
 */
export function registerExplain(
  router: ConnectRouter,
  explain: ExplainHandler | undefined,
  buckets?: BucketExplainHandlers,
): void {
  const disabled = (): never => {
    throw new ConnectError(explainDisabledMessage, Code.Unimplemented);
  };
  const noRlqs = (): never => {
    throw new ConnectError(rlqsNotServedMessage, Code.FailedPrecondition);
  };
  router.service(ExplainService, {
    explain: explain ?? disabled,
    explainBucket:
      explain === undefined ? disabled : (buckets?.explainBucket ?? noRlqs),
    listBuckets:
      explain === undefined ? disabled : (buckets?.listBuckets ?? noRlqs),
  });
}

/** Name under which the gRPC health service reports the rate-limit service. */
export const healthServiceName = "ratelimit";

/**
 * Returns the Connect route registration: `envoy.service.ratelimit.v3.RateLimitService`,
 * `ratelimit.explain.v1.ExplainService` (see {@link registerExplain}),
 * `envoy.service.rate_limit_quota.v3.RateLimitQuotaService` and `grpc.health.v1.Health`. The same routes serve gRPC (HTTP/2 port), and gRPC-web and the
 * Connect protocol (HTTP/1.1 port).
 */
export function createRoutes(
  options: RoutesOptions,
): (router: ConnectRouter) => void {
  const { shouldRateLimit, health, statsManager, explain, rlqs, admin } =
    options;
  const checkRequests = statsManager.serverTotalRequests("Check");

  function statusOf(name: string): ServingStatus | undefined {
    // Deliberate difference: "" follows the overall health too (the reference keeps it
    // SERVING forever), so a standard gRPC probe sees SIGTERM and failed components.
    if (name === "" || name === healthServiceName) {
      return health.isHealthy()
        ? ServingStatus.SERVING
        : ServingStatus.NOT_SERVING;
    }
    return undefined;
  }

  return (router) => {
    router.service(RateLimitService, {
      // The request headers carry the caller's trace context (read only when tracing is on).
      // With a `grpc-timeout`, answered DEADLINE_EXCEEDED once it passes, as the built-in
      // engine's inline path answers (Connect aborts the call's signal but does not answer).
      shouldRateLimit: (request, context) => {
        const timeoutMs = context.timeoutMs();
        if (timeoutMs === undefined)
          return shouldRateLimit(request, context.requestHeader);
        return settleByDeadline(
          () =>
            shouldRateLimit(
              request,
              context.requestHeader,
              performance.now() + timeoutMs,
            ),
          context.signal,
        );
      },
    });
    registerExplain(router, explain, options.explainBuckets);
    registerAdmin(router, admin);
    router.service(RateLimitQuotaService, {
      streamRateLimitQuotas(requests) {
        if (rlqs === undefined) {
          throw new ConnectError(
            "the rate limit quota service is not served here",
            Code.Unimplemented,
          );
        }
        return rlqs(requests);
      },
    });
    router.service(Health, {
      check(request) {
        checkRequests.add(1);
        const status = statusOf(request.service);
        if (status === undefined)
          throw new ConnectError("unknown service", Code.NotFound);
        return create(HealthCheckResponseSchema, { status });
      },
      list() {
        const status = statusOf("") ?? ServingStatus.NOT_SERVING;
        return create(HealthListResponseSchema, {
          statuses: {
            "": create(HealthCheckResponseSchema, { status }),
            [healthServiceName]: create(HealthCheckResponseSchema, { status }),
          },
        });
      },
      async *watch(request, context) {
        // Current status at once, then every change, until the client goes away.
        let pending: ServingStatus | undefined =
          statusOf(request.service) ?? ServingStatus.SERVICE_UNKNOWN;
        let wake: (() => void) | undefined;
        const unsubscribe = health.onChange(() => {
          pending = statusOf(request.service) ?? ServingStatus.SERVICE_UNKNOWN;
          wake?.();
        });
        const onAbort = (): void => wake?.();
        context.signal.addEventListener("abort", onAbort);
        try {
          while (!context.signal.aborted) {
            if (pending !== undefined) {
              const response: HealthCheckResponse = create(
                HealthCheckResponseSchema,
                {
                  status: pending,
                },
              );
              pending = undefined;
              yield response;
              continue;
            }
            await new Promise<void>((resolve) => {
              wake = resolve;
            });
            wake = undefined;
          }
        } finally {
          unsubscribe();
          context.signal.removeEventListener("abort", onAbort);
        }
      },
    });
  };
}

/**
 * The decision `decide` starts, or its rejection with the reason of `signal` when that aborts
 * first (before the start: nothing is decided): Connect's
 * DEADLINE_EXCEEDED "the operation timed out" at the call's `grpc-timeout`, or the client's
 * cancellation (nobody reads that answer).
 */
function settleByDeadline<T>(
  decide: () => Promise<T>,
  signal: AbortSignal,
): Promise<T> {
  // Past the deadline already (reading the body took it): nothing is decided or counted for a
  // caller that has given up, and no decision is left running with nobody to answer.
  if (signal.aborted) return Promise.reject(ConnectError.from(signal.reason));
  const decision = decide();
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => {
      reject(ConnectError.from(signal.reason));
    };
    signal.addEventListener("abort", onAbort, { once: true });
    decision.then(
      (value) => {
        signal.removeEventListener("abort", onAbort);
        resolve(value);
      },
      (err: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(err instanceof Error ? err : ConnectError.from(err));
      },
    );
  });
}
