import type { AppContext } from "./app-context.js";
import { createCanaryAdmin } from "../canary/canary-admin.js";
import { suffixedCounterBackend } from "../canary/canary-backend.js";
import { createCanary, type Canary } from "../canary/canary.js";
import { ConfigError } from "../config/config-error.js";
import type { CanaryAdmin } from "../admin/admin-routes.js";
import type { OverrideLookup } from "../limiter/decision-hooks.js";
import type { DecisionChannel } from "../limiter/decision-channel.js";
import type { RateLimitPipeline } from "../limiter/pipeline.js";
import { loadRuntimeFiles } from "../provider/file/load-runtime-files.js";
import type { Settings } from "../settings/settings.js";

/**
 * Appended to the cache key of every candidate-only counter the canary keeps in the kv store
 * (docs/operations.md#config-canary): no live key ends with it (live keys end with a window
 * start, a `_w`/`_s`/`tb…` suffix or a calendar period).
 */
export const canaryKeySuffix = "|canary";

/** The config canary of one process and its share of the admin API. */
export interface ConfigCanary {
  readonly canary: Canary;
  readonly admin: CanaryAdmin;
}

/**
 * Builds the config canary from settings: decision settings as the live ones; candidate-only
 * counters in the canary's ledger in this process for the memory and mc backends, and in the kv
 * store itself (keys ending in {@link canaryKeySuffix}, so replicas running the same canary add
 * up, as live counters do) for kv. With `CANARY_CONFIG_DIR` set, loads that directory as the
 * first candidate; a candidate that does not load is logged (with file, line and field) and the
 * service runs without a canary: a canary never stops the live service.
 *
 * @param storePipeline - the pipeline over the live store (inside the backend guard for kv and
 *   mc): it leaves each decision's counter readings in `Decision.counted`
 * @param decisions - where the live decisions are published (a running canary subscribes)
 */
export async function createConfigCanary(
  settings: Settings,
  context: AppContext,
  storePipeline: RateLimitPipeline,
  decisions: DecisionChannel,
  overrides?: OverrideLookup,
): Promise<ConfigCanary> {
  const { clock } = context;
  const logger = context.logger.child({ component: "canary" });
  const canary = createCanary({
    decisions,
    ...(settings.backendType === "kv"
      ? {
          remoteStore: suffixedCounterBackend(
            storePipeline.backend,
            canaryKeySuffix,
          ),
        }
      : {}),
    maxKeys: settings.memoryMaxKeys,
    readConfigDir: (dir) =>
      loadRuntimeFiles({
        dir,
        ignoreDotFiles: settings.runtimeIgnoreDotFiles,
        logger,
      }),
    mergeDomainConfig: settings.mergeDomainConfig,
    chargeMode: settings.chargeMode,
    nearLimitRatio: settings.nearLimitRatio,
    cacheKeyPrefix: settings.cacheKeyPrefix,
    expirationJitterMaxSeconds: settings.expirationJitterMaxSeconds,
    // The mc backend ignores stop-increment (as upstream): its wiring leaves it off.
    stopCacheKeyIncrementWhenOverlimit:
      settings.backendType !== "mc" &&
      settings.stopCacheKeyIncrementWhenOverlimit,
    globalQuotaMode: settings.quotaMode,
    sameKeyAccumulates: settings.backendType !== "mc",
    localCacheSizeBytes: settings.localCacheSizeBytes,
    ...(overrides !== undefined ? { overrides } : {}),
    clock,
    logger,
  });
  if (settings.canaryConfigDir !== "") {
    try {
      await canary.start({ dir: settings.canaryConfigDir });
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      logger.error(
        {
          err,
          file: err.file,
          line: err.line,
          fieldPath: err.fieldPath,
          dir: settings.canaryConfigDir,
        },
        `config canary not started (CANARY_CONFIG_DIR): ${err.detail}`,
      );
    }
  }
  return { canary, admin: createCanaryAdmin(canary) };
}
