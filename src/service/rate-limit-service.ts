import type { Logger } from "pino";
import type { ConfigUpdate } from "../config/config-update.js";
import {
  toFailedReload,
  toRfc3339,
  type ConfigReloadStatus,
  type FailedReload,
} from "../config/reload-status.js";
import type { RateLimitConfig } from "../config/rate-limit-config.js";
import type { HealthChecker } from "../health/health.js";
import type { OverrideLookup } from "../limiter/decision-hooks.js";
import type { DecisionChannel } from "../limiter/decision-channel.js";
import { decideRequest, type DecisionTimes } from "../limiter/decision.js";
import { resolveRequest } from "../limiter/limit-request.js";
import type { RateLimitCache } from "../limiter/rate-limit-cache.js";
import {
  RateLimitResponse_Code as Code,
  type RateLimitRequest,
  type RateLimitResponse,
} from "../proto.js";
import { statNames } from "../stats/names.js";
import type { StatsManager } from "../stats/stats-manager.js";
import type { Gauge } from "../stats/stats-store.js";
import type { Clock } from "../util/clock.js";
import { dynamicMetadata } from "./dynamic-metadata.js";
import { NotReadyError } from "./errors.js";
import { resolveRequestBounds, type RequestBounds } from "./request-bounds.js";
import { checkRequestDescriptors, checkRequestHead } from "./request-checks.js";
import {
  rateLimitHeaders,
  type ResponseHeaderNames,
} from "./response-headers.js";

/** Options of {@link createRateLimitService}. */
export interface RateLimitServiceOptions {
  /** The counter backend. */
  readonly cache: RateLimitCache;
  readonly statsManager: StatsManager;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Health checker; its `config` component follows the loaded domains when registered. */
  readonly health?: HealthChecker;
  /** Report every over-limit request as OK (`SHADOW_MODE`). @defaultValue false */
  readonly globalShadowMode?: boolean;
  /**
   * Treat every descriptor as a quota descriptor (`QUOTA_MODE`,
   * docs/reference-parity.md#overall-code).
   * @defaultValue false
   */
  readonly globalQuotaMode?: boolean;
  /**
   * Add rate-limit headers to responses (`LIMIT_RESPONSE_HEADERS_ENABLED` with the
   * `LIMIT_*_HEADER` names); `undefined` disables them. @defaultValue undefined
   */
  readonly responseHeaders?: ResponseHeaderNames;
  /**
   * Fill `dynamic_metadata` in responses (`RESPONSE_DYNAMIC_METADATA`, see
   * {@link dynamicMetadata}). @defaultValue false
   */
  readonly dynamicMetadata?: boolean;
  /**
   * Bounds on descriptors per request, entries per descriptor and key/value bytes; a request
   * beyond one is refused with a `RequestError` (errors.ts) naming the field (docs/limits.md).
   * @defaultValue `defaultRequestBounds` (1000 descriptors, 100 entries, 65536 bytes)
   */
  readonly requestBounds?: Partial<RequestBounds>;
  /**
   * Run-time overrides (admin API, docs/operations.md), probed after each descriptor's tree
   * lookup. @defaultValue none
   */
  readonly overrides?: OverrideLookup;
  /**
   * Where each request's `Decision` is published once its answer is built, and a failed store
   * call's `DecisionFailure` (top offenders, the config canary and tracing's backend span
   * subscribe there; limiter/decision-channel.ts). The store call's times are read only when
   * a subscriber asks for them. @defaultValue none
   */
  readonly decisions?: DecisionChannel;
}

/** The decision service: what gRPC, Connect and `/json` call. */
export interface RateLimitService {
  /**
   * Decides one request (spec "Decision"; upstream `ratelimit.go` `shouldRateLimitWorker`).
   *
   * @returns one status per request descriptor, same order, and the overall code
   * @throws `RequestError` (errors.ts) for an invalid request (message names the field)
   * @throws {@link NotReadyError} before any config has loaded
   * @throws {@link BackendError} when the counter backend fails
   * @param deadlineAtMs - the caller's deadline on the `performance.now()` clock, in
   *   milliseconds (`grpc-timeout`, `connect-timeout-ms`), or undefined
   */
  shouldRateLimit(
    request: RateLimitRequest,
    deadlineAtMs?: number,
  ): Promise<RateLimitResponse>;
  /**
   * Applies a provider's config update: a good one is swapped in atomically, counted in
   * `config_load_success` and clears the last failure; a bad one is logged with its location,
   * counted in `config_load_error`, recorded as the last failure (gauge
   * `config_last_load_failed` 1), and the last good config keeps serving
   * (docs/reference-parity.md#config-reload). A failure before any config has loaded, while
   * health does not follow the config, also logs a warning naming the setting that would.
   */
  applyConfigUpdate(update: ConfigUpdate): void;
  /** The config in force, if any has loaded. */
  currentConfig(): RateLimitConfig | undefined;
  /** When the config in force loaded and the last failed load since (a fresh snapshot). */
  reloadStatus(): ConfigReloadStatus;
}

/** Shared empty `raw_body` (never written to). */
const emptyBytes = new Uint8Array(0);

/**
 * Creates the decision service.
 *
 * ```ts
 * const service = createRateLimitService({ cache, statsManager, clock, logger });
 * provider.subscribe((update) => service.applyConfigUpdate(update));
 * ```
 */
export function createRateLimitService(
  options: RateLimitServiceOptions,
): RateLimitService {
  const { cache, statsManager, clock, logger, health } = options;
  const globalShadowMode = options.globalShadowMode ?? false;
  const globalQuotaMode = options.globalQuotaMode ?? false;
  const headerNames = options.responseHeaders;
  const withDynamicMetadata = options.dynamicMetadata ?? false;
  const bounds = resolveRequestBounds(options.requestBounds);
  const overrides = options.overrides;
  const decisions = options.decisions;
  let config: RateLimitConfig | undefined;
  let loadedAt: string | null = null;
  let lastFailedReload: FailedReload | null = null;
  // Created by the first failure (see statNames.configLastLoadFailed).
  let lastLoadFailed: Gauge | undefined;
  let warnedHealthWithoutConfig = false;

  /** Checks a request and returns the config snapshot to decide it with. */
  function validate(request: RateLimitRequest): RateLimitConfig {
    checkRequestHead(request, bounds);
    const snapshot = config;
    if (snapshot === undefined)
      throw new NotReadyError("no rate limit configuration loaded");
    checkRequestDescriptors(request, bounds);
    return snapshot;
  }

  return {
    async shouldRateLimit(request, deadlineAtMs) {
      const snapshot = validate(request);
      const limited = resolveRequest(
        snapshot,
        request.domain,
        request.descriptors,
        request.hitsAddend,
        overrides,
      );
      // The store call's times, only for a subscriber that asked (tracing's backend span).
      const timed = decisions?.timed === true;
      const backendStartMs = timed ? performance.now() : 0;
      let statuses;
      try {
        statuses = await cache.doLimit(limited, deadlineAtMs);
      } catch (err) {
        decisions?.publishFailure({
          request: limited,
          error: err,
          times: timed
            ? { backendStartMs, backendEndMs: performance.now() }
            : undefined,
        });
        throw err;
      }
      const times: DecisionTimes | undefined = timed
        ? { backendStartMs, backendEndMs: performance.now() }
        : undefined;
      const decision = decideRequest(
        limited,
        snapshot,
        statuses,
        globalQuotaMode,
        times,
      );
      let overall = decision.overallCode;
      // A complete message literal: `create()` walks the schema on every call.
      const response: RateLimitResponse = {
        $typeName: "envoy.service.ratelimit.v3.RateLimitResponse",
        overallCode: overall,
        statuses,
        responseHeadersToAdd: [],
        requestHeadersToAdd: [],
        rawBody: emptyBytes,
        dynamicMetadata: undefined,
        quota: undefined,
      };
      if (headerNames !== undefined) {
        const headers = rateLimitHeaders(
          headerNames,
          decision,
          clock.nowSeconds(),
        );
        if (headers !== undefined) response.responseHeadersToAdd = headers;
      }
      if (withDynamicMetadata) {
        response.dynamicMetadata = dynamicMetadata(request, decision);
      }
      if (overall === Code.OVER_LIMIT && globalShadowMode) {
        overall = Code.OK;
        response.overallCode = overall;
        statsManager.service.globalShadowMode.add(1);
      }
      decisions?.publish(decision);
      return response;
    },

    applyConfigUpdate(update) {
      if (!update.ok) {
        const error = update.error;
        statsManager.service.configLoadError.add(1);
        lastFailedReload = toFailedReload(error, clock.nowMs());
        lastLoadFailed ??= statsManager.store.gauge(
          statNames.configLastLoadFailed,
        );
        lastLoadFailed.set(1);
        logger.error(
          {
            err: error,
            file: error.file,
            line: error.line,
            fieldPath: error.fieldPath,
          },
          `error loading new configuration: ${error.detail}`,
        );
        if (
          config === undefined &&
          health !== undefined &&
          !health.has("config") &&
          !warnedHealthWithoutConfig
        ) {
          warnedHealthWithoutConfig = true;
          logger.warn(
            "no rate limit config is loaded, yet /healthcheck and gRPC health answer serving " +
              "(as the reference does); set HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true to " +
              "report unhealthy until a config loads",
          );
        }
        return;
      }
      config = update.config;
      loadedAt = toRfc3339(clock.nowMs());
      lastFailedReload = null;
      lastLoadFailed?.set(0);
      statsManager.service.configLoadSuccess.add(1);
      logger.info(
        { domains: update.config.domains },
        "successfully loaded new configuration",
      );
      if (health?.has("config") === true) {
        if (update.config.domainCount > 0) health.ok("config");
        else health.fail("config");
      }
    },

    currentConfig: () => config,

    reloadStatus: () => ({ loadedAt, lastFailedReload }),
  };
}
