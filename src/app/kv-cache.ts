import { readFileSync } from "node:fs";
import type { AppContext } from "./app-context.js";
import {
  KvOptionsError,
  type KvInstanceOptions,
  type KvOptionName,
  type KvTlsOptions,
} from "../backends/kv/kv-options.js";
import { KvCounterBackend } from "../backends/kv/kv-counter-backend.js";
import { RateLimitPipeline } from "../limiter/pipeline.js";
import { SettingsError } from "../settings/settings-error.js";
import type { Settings } from "../settings/settings.js";

// Environment variable suffix of each option, after `KV_` or `KV_PERSECOND_`.
const envSuffix: Partial<Record<KvOptionName, string>> = {
  type: "TYPE",
  socketType: "SOCKET_TYPE",
  url: "URL",
  poolSize: "POOL_SIZE",
  timeoutMs: "TIMEOUT",
  poolOnEmptyBehavior: "POOL_ON_EMPTY_BEHAVIOR",
  poolOnEmptyWaitMs: "POOL_ON_EMPTY_WAIT_DURATION",
  pipelineWindowMs: "PIPELINE_WINDOW",
  clusterPipelineParallelism: "CLUSTER_PIPELINE_PARALLELISM",
  tls: "TLS",
  auth: "AUTH",
  sentinelAuth: "SENTINEL_AUTH",
  startupInitialIntervalMs: "STARTUP_INITIAL_INTERVAL",
  startupMaxIntervalMs: "STARTUP_MAX_INTERVAL",
  startupMaxElapsedTimeMs: "STARTUP_MAX_ELAPSED_TIME",
};

function readTlsFile(variable: string, path: string): Buffer | undefined {
  if (path === "") return undefined;
  try {
    return readFileSync(path);
  } catch (err) {
    throw new SettingsError([
      `${variable}=${JSON.stringify(path)}: cannot read the file (${err instanceof Error ? err.message : String(err)})`,
    ]);
  }
}

/** The main instance's options (`KV_*`), shared by the backend and the RLQS ledger. */
export function kvMainInstanceOptions(settings: Settings): KvInstanceOptions {
  return {
    type: settings.kvType,
    socketType: settings.kvSocketType,
    url: settings.kvUrl,
    poolSize: settings.kvPoolSize,
    timeoutMs: settings.kvTimeoutMs,
    poolOnEmptyBehavior: settings.kvPoolOnEmptyBehavior,
    poolOnEmptyWaitMs: settings.kvPoolOnEmptyWaitMs,
    pipelineWindowMs: settings.kvPipelineWindowMs,
    clusterPipelineParallelism: settings.kvClusterPipelineParallelism,
    tls: settings.kvTls,
    auth: settings.kvAuth,
    sentinelAuth: settings.kvSentinelAuth,
  };
}

/**
 * The TLS files of the kv instances (`KV_TLS_*`), read once; undefined when no instance uses
 * TLS.
 *
 * @throws {@link SettingsError} when a file cannot be read
 */
export function kvTlsOptions(settings: Settings): KvTlsOptions | undefined {
  if (!(settings.kvTls || (settings.kvPerSecond && settings.kvPerSecondTls)))
    return undefined;
  const clientCert = readTlsFile(
    "KV_TLS_CLIENT_CERT",
    settings.kvTlsClientCert,
  );
  const clientKey = readTlsFile("KV_TLS_CLIENT_KEY", settings.kvTlsClientKey);
  const ca = readTlsFile("KV_TLS_CACERT", settings.kvTlsCacert);
  return {
    ...(clientCert !== undefined ? { clientCert } : {}),
    ...(clientKey !== undefined ? { clientKey } : {}),
    ...(ca !== undefined ? { ca } : {}),
    skipHostnameVerification: settings.kvTlsSkipHostnameVerification,
  };
}

/**
 * Builds the key-value store backend (`BACKEND_TYPE=kv`) from settings: `KV_*` for the main
 * instance, `KV_PERSECOND_*` for the per-second one when `KV_PERSECOND=true`; the TLS files
 * are shared and read here, once. See `docs/kv-backend.md` for how each setting maps onto
 * ioredis. `reconnectMaxDelayMs` caps the reconnect backoff and lets a request (a circuit
 * breaker probe) reconnect at once (failure modes).
 *
 * @throws {@link SettingsError} when a TLS file cannot be read (with `KV_TLS` or
 *   `KV_PERSECOND_TLS` on) or an address does not parse, naming the variable
 */
export function createKvCache(
  settings: Settings,
  context: AppContext,
  reconnectMaxDelayMs?: number,
): RateLimitPipeline<KvCounterBackend> {
  const reconnect =
    reconnectMaxDelayMs !== undefined
      ? { reconnectMaxDelayMs, reconnectOnRequest: true }
      : {};
  const main: KvInstanceOptions = {
    ...kvMainInstanceOptions(settings),
    ...reconnect,
  };
  const perSecond: KvInstanceOptions | undefined = settings.kvPerSecond
    ? {
        type: settings.kvPerSecondType,
        socketType: settings.kvPerSecondSocketType,
        url: settings.kvPerSecondUrl,
        poolSize: settings.kvPerSecondPoolSize,
        timeoutMs: settings.kvPerSecondTimeoutMs,
        poolOnEmptyBehavior: settings.kvPerSecondPoolOnEmptyBehavior,
        poolOnEmptyWaitMs: settings.kvPerSecondPoolOnEmptyWaitMs,
        pipelineWindowMs: settings.kvPerSecondPipelineWindowMs,
        clusterPipelineParallelism:
          settings.kvPerSecondClusterPipelineParallelism,
        tls: settings.kvPerSecondTls,
        auth: settings.kvPerSecondAuth,
        sentinelAuth: settings.kvPerSecondSentinelAuth,
        ...reconnect,
      }
    : undefined;
  const tls = kvTlsOptions(settings);
  try {
    const backend = new KvCounterBackend({
      main,
      ...(perSecond !== undefined ? { perSecond } : {}),
      ...(tls !== undefined ? { tls } : {}),
      healthCheckActiveConnection: settings.kvHealthCheckActiveConnection,
      startupInitialIntervalMs: settings.kvStartupInitialIntervalMs,
      startupMaxIntervalMs: settings.kvStartupMaxIntervalMs,
      startupMaxElapsedTimeMs: settings.kvStartupMaxElapsedTimeMs,
      logger: context.logger,
      health: context.health,
      statsStore: context.statsManager.store,
      clock: context.clock,
    });
    return new RateLimitPipeline({
      backend,
      decider: context.decider,
      stopCacheKeyIncrementWhenOverlimit:
        settings.stopCacheKeyIncrementWhenOverlimit,
      statsStore: context.statsManager.store,
      leaseClock: context.clock,
    });
  } catch (err) {
    if (!(err instanceof KvOptionsError)) throw err;
    const prefix = err.instance === "perSecond" ? "KV_PERSECOND_" : "KV_";
    const suffix = envSuffix[err.option];
    throw new SettingsError([
      `${suffix === undefined ? "KV" : prefix + suffix}: ${err.message}`,
    ]);
  }
}
