import type { Logger } from "pino";
import type { AppContext } from "./app-context.js";
import { guardBackend, type BackendFailureOptions } from "./backend-guard.js";
import { createLazyConfigCanary } from "./lazy-canary.js";
import { startStatsSinks, type StatsSinks } from "./stats-sinks.js";
import { MemoryCounterBackend } from "../backends/memory/memory-counter-backend.js";
import { RateLimitPipeline } from "../limiter/pipeline.js";
import { ConfigError } from "../config/config-error.js";
import type { ConfigUpdate } from "../config/config-update.js";
import { loadConfig, loadConfigFromRoots } from "../config/load-config.js";
import type { RateLimitConfig } from "../config/rate-limit-config.js";
import { HealthChecker, type HealthComponent } from "../health/health.js";
import type { AdminParts } from "../admin/admin-routes.js";
import type { BackendGuard } from "../limiter/backend-guard.js";
import { createDecisionChannel } from "../limiter/decision-channel.js";
import { subscribeDecisionSpans } from "../service/decision-spans.js";
import {
  MemoryOverrideStore,
  type OverrideStore,
} from "../overrides/override-store.js";
import { OverrideTable } from "../overrides/override-table.js";
import { createOverridesAdmin } from "../overrides/overrides-admin.js";
import { createOffendersAdmin } from "../offenders/offenders-admin.js";
import {
  groupAdminParts,
  ReplicatedOverrideStore,
  WorkerGroup,
} from "./worker-group.js";
import type { ToPrimary, ToWorker, WorkerChannel } from "./worker-messages.js";
import { createOffenderGauges } from "../offenders/offenders-metrics.js";
import { OffendersTracker } from "../offenders/offenders-tracker.js";
import { createDecider } from "../limiter/decide.js";
import { createLocalCache } from "../limiter/local-cache.js";
import type { RateLimitCache } from "../limiter/rate-limit-cache.js";
import type { ConfigProvider } from "../provider/config-provider.js";
import { createFileProvider } from "../provider/file/file-provider.js";
import { createConsole } from "../server/console.js";
import { startDebugServer } from "../server/debug-server.js";
import {
  createBucketExplainHandlers,
  createExplainHandler,
  createExplainJsonHandler,
} from "../explain/explain-handler.js";
import { createBucketExplainService } from "../explain/bucket-explanation.js";
import { startGrpcServer } from "../server/grpc/grpc-server.js";
import type { Http2Event } from "../http2/limits.js";
import { startHttpServer } from "../server/http-server.js";
import { createJsonHandler } from "../server/json-handler.js";
import type { Listening } from "../server/listen.js";
import { createRoutes } from "../server/routes.js";
import { createRlqsService } from "../rlqs/rlqs-service.js";
import { createShouldRateLimitHandler } from "../server/should-rate-limit-handler.js";
import { createExplainService } from "../explain/explain-service.js";
import {
  createRateLimitService,
  type RateLimitService,
} from "../service/rate-limit-service.js";
import type { Settings } from "../settings/settings.js";
import { statNames } from "../stats/names.js";
import {
  startRuntimeStats,
  type RuntimeStats,
} from "../stats/runtime-stats.js";
import {
  createStatsManager,
  type StatsManager,
} from "../stats/stats-manager.js";
import type { Counter, StatsStore } from "../stats/stats-store.js";
import { systemClock, type Clock } from "../util/clock.js";

/** Actual listening addresses (`host:port`), useful when ports were 0. */
export interface AppAddresses {
  readonly grpc: string;
  readonly http: string;
  /** Empty in workers other than the first (they open no debug listener). */
  readonly debug: string;
}

/** The assembled service. */
export interface App {
  readonly health: HealthChecker;
  readonly statsManager: StatsManager;
  readonly service: RateLimitService;
  /**
   * Starts the config provider, waits for the first config (unless
   * `FORCE_START_WITHOUT_INITIAL_CONFIG`), then opens the debug, gRPC and HTTP listeners.
   *
   * @throws the listen error when a port cannot be bound
   */
  start(): Promise<AppAddresses>;
  /**
   * Drains and stops everything in reverse order: listeners stop accepting and in-flight
   * calls finish (up to `graceMs`), then the provider, then the backend; idempotent.
   */
  close(graceMs?: number): Promise<void>;
}

/** Injected dependencies of {@link createApp}. */
export interface AppDependencies {
  readonly logger: Logger;
  /** @defaultValue the system clock */
  readonly clock?: Clock;
  /**
   * Serve unary gRPC ShouldRateLimit inline on the built-in HTTP/2 engine (see
   * `serveShouldRateLimit`; the node engine always uses the Connect router); tests turn it
   * off to compare with the Connect path. @defaultValue true
   */
  readonly grpcFastPath?: boolean;
  /**
   * Index of this worker process (`WORKERS` > 1); only worker 0 opens the debug listener
   * (and the pull-stats listener), so their ports are not shared between processes.
   * @defaultValue 0
   */
  readonly workerIndex?: number;
  /**
   * This worker's IPC channel to the primary (`WORKERS` > 1, see worker-group.ts): run-time
   * overrides of the memory store and the TopOffenders and canary answers then cover every
   * worker. @defaultValue none (a single process)
   */
  readonly workerChannel?: WorkerChannel<ToWorker, ToPrimary>;
  /**
   * Backend failure handling of the kv and mc backends (docs/failure-modes.md), replacing
   * the `BACKEND_FAILURE_*` and `BACKEND_PROBE_INTERVAL` settings (tests).
   * @defaultValue from the settings
   */
  readonly backendFailure?: BackendFailureOptions;
}

/**
 * Builds the service from settings: the composition root, the only place that maps
 * {@link Settings} to each module's options.
 *
 * ```ts
 * const app = await createApp(loadSettings(process.env).settings, { logger });
 * const addresses = await app.start();
 * ```
 *
 * @throws {@link SettingsError} when the settings ask for a feature this build lacks
 */
export async function createApp(
  settings: Settings,
  deps: AppDependencies,
): Promise<App> {
  const { logger } = deps;
  const clock = deps.clock ?? systemClock;

  // Hostile-load bounds (docs/limits.md).
  const requestBounds = {
    maxDescriptors: settings.requestMaxDescriptors,
    maxEntries: settings.requestMaxEntries,
    maxEntryBytes: settings.requestMaxEntryBytes,
  };
  const maxGrpcRequestBytes = settings.requestMaxGrpcBytes;
  const maxJsonBodyBytes = settings.requestMaxJsonBytes;

  const statsManager = createStatsManager();
  const components: { name: HealthComponent; healthy: boolean }[] = [
    { name: "sigterm", healthy: true },
  ];
  if (settings.healthyWithAtLeastOneConfigLoaded)
    components.push({ name: "config", healthy: false });
  const health = new HealthChecker(components);

  const localCache =
    settings.localCacheSizeBytes > 0
      ? createLocalCache({
          maxBytes: settings.localCacheSizeBytes,
          clock,
          statsStore: statsManager.store,
        })
      : undefined;
  const decider = createDecider({
    clock,
    ...(localCache !== undefined ? { localCache } : {}),
    nearLimitRatio: settings.nearLimitRatio,
    cacheKeyPrefix: settings.cacheKeyPrefix,
    expirationJitterMaxSeconds: settings.expirationJitterMaxSeconds,
  });
  const context: AppContext = {
    workerIndex: deps.workerIndex ?? 0,
    logger,
    clock,
    health,
    statsManager,
    decider,
  };
  const failure: BackendFailureOptions = deps.backendFailure ?? {
    mode: settings.backendFailureMode,
    failureThreshold: settings.backendFailureThreshold,
    probeIntervalMs: settings.backendProbeIntervalMs,
    localShare: settings.backendFailureLocalShare,
    decisionTimeoutMs: settings.backendDecisionTimeoutMs,
    // A caller's deadline beyond the store's own timeout needs no timer of the guard.
    backendTimeoutMs:
      settings.backendType === "kv" &&
      settings.kvTimeoutMs > 0 &&
      settings.kvPerSecondTimeoutMs > 0
        ? Math.max(settings.kvTimeoutMs, settings.kvPerSecondTimeoutMs)
        : 0,
  };
  // The pipeline over the store (inside the guard for kv and mc): the config canary reads the
  // counters its decisions saw.
  let storePipeline: RateLimitPipeline | undefined;
  const guardOf = (
    backend: RateLimitPipeline,
    name: "kv" | "mc",
  ): BackendGuard => {
    storePipeline = backend;
    return guardBackend(backend, name, failure, context, settings);
  };
  // The kv and mc backends are guarded (circuit breaker, failure modes); with the default
  // `error` mode mc keeps failing open on node errors, as the reference does. Their modules
  // are imported only when the settings use them (their libraries cost memory and startup
  // time in every process otherwise).
  const guard: BackendGuard | undefined =
    settings.backendType === "kv"
      ? guardOf(
          (await import("./kv-cache.js")).createKvCache(
            settings,
            context,
            // The circuit breaker closes only when a probe finds the store: probes reconnect,
            // and the backoff stays within one probe interval.
            Math.min(2000, failure.probeIntervalMs ?? 500),
          ),
          "kv",
        )
      : settings.backendType === "mc"
        ? guardOf(
            (await import("./mc-cache.js")).createMcCache(
              settings,
              context,
              (failure.mode ?? "error") === "error",
            ),
            "mc",
          )
        : undefined;
  const cache: RateLimitCache =
    guard ??
    new RateLimitPipeline({
      backend: new MemoryCounterBackend({
        clock,
        statsStore: statsManager.store,
        reportKeys: settings.runtimeStatsEnabled,
        maxKeys: settings.memoryMaxKeys,
      }),
      decider,
      stopCacheKeyIncrementWhenOverlimit:
        settings.stopCacheKeyIncrementWhenOverlimit,
      statsStore: statsManager.store,
      leaseClock: clock,
    });
  // Day-2 operations (docs/operations.md): run-time overrides, top offenders and the config
  // canary. Each part is built by its own module and plugs in here: overrides as the lookup
  // the decision probes, top offenders and the canary as subscribers of published decisions; all
  // three serve their share of the admin API.
  const admin: {
    -readonly [K in keyof AdminParts]: AdminParts[K];
  } = {};
  // Each answer's Decision is published once; top offenders and the canary subscribe.
  const decisions = createDecisionChannel();
  // Run-time overrides (docs/operations.md#overrides): the table the decision probes, kept by
  // the kv store on every replica (BACKEND_TYPE=kv), else in this process only.
  const overrideTable = new OverrideTable({ clock });
  // WORKERS > 1: the workers share overrides and answer admin calls for the whole group.
  const workerGroup =
    deps.workerChannel === undefined
      ? undefined
      : new WorkerGroup({
          channel: deps.workerChannel,
          logger: logger.child({ component: "workers" }),
        });
  const memoryOverrideStore = (local: MemoryOverrideStore): OverrideStore =>
    workerGroup === undefined
      ? local
      : new ReplicatedOverrideStore(
          local,
          workerGroup,
          logger.child({ component: "overrides" }),
        );
  const overrideStore: OverrideStore =
    settings.backendType === "kv"
      ? (await import("./kv-override-store.js")).createKvOverrideStore(
          settings,
          context,
          overrideTable,
        )
      : memoryOverrideStore(
          new MemoryOverrideStore({
            table: overrideTable,
            clock,
            logger: logger.child({ component: "overrides" }),
            auditLogMax: settings.adminAuditLogMax,
          }),
        );
  // Top offenders per rule (docs/operations.md#top-offenders): nothing at all with
  // TOP_OFFENDERS_K=0 (no observer, TopOffenders answers UNIMPLEMENTED).
  const offenders =
    settings.topOffendersK > 0
      ? new OffendersTracker({ k: settings.topOffendersK, clock })
      : undefined;
  if (offenders !== undefined) {
    decisions.subscribe((decision) => {
      offenders.observe(decision);
    });
    admin.offenders = createOffendersAdmin(offenders);
    if (settings.topOffendersMetrics && settings.statsSink !== "pullstats")
      logger.warn(
        "TOP_OFFENDERS_METRICS exports to the pull-stats endpoint only: set USE_PULLSTATS=true",
      );
  }
  if (cache instanceof RateLimitPipeline) storePipeline = cache;
  // The config canary (docs/operations.md#config-canary): told every decided request, it
  // evaluates a candidate config beside the live one (CANARY_CONFIG_DIR or StartCanary), with
  // the same run-time overrides. Its modules load only when it is used (lazy-canary.ts).
  const configCanary =
    storePipeline === undefined
      ? undefined
      : await createLazyConfigCanary(
          settings,
          context,
          storePipeline,
          decisions,
          overrideTable,
        );
  if (configCanary !== undefined) {
    admin.canary = configCanary.admin;
  }
  // Tracing's backend span (TRACING_ENABLED, docs/tracing.md): a subscriber too, from the times
  // each Decision then carries; the server spans stay around the handlers (they need the
  // caller's trace context and cover refused requests, which publish no decision).
  if (settings.tracingEnabled)
    subscribeDecisionSpans(decisions, { backend: settings.backendType });
  const service = createRateLimitService({
    cache,
    statsManager,
    clock,
    logger: logger.child({ component: "service" }),
    health,
    globalShadowMode: settings.shadowMode,
    globalQuotaMode: settings.quotaMode,
    dynamicMetadata: settings.responseDynamicMetadata,
    requestBounds,
    decisions,
    overrides: overrideTable,
    ...(settings.limitResponseHeadersEnabled
      ? {
          responseHeaders: {
            limit: settings.limitLimitHeader,
            remaining: settings.limitRemainingHeader,
            reset: settings.limitResetHeader,
          },
        }
      : {}),
  });

  // Both providers deliver all-or-nothing loads; a bug while loading must not kill a serving
  // process, so anything but a ConfigError is reported as a failed load too.
  const guarded = (build: () => RateLimitConfig): ConfigUpdate => {
    try {
      return { ok: true, config: build() };
    } catch (err) {
      if (err instanceof ConfigError) return { ok: false, error: err };
      return {
        ok: false,
        error: new ConfigError(
          `unexpected error loading config: ${String(err)}`,
          {
            cause: err,
          },
        ),
      };
    }
  };
  const loadOptions = {
    statsManager,
    mergeDomainConfig: settings.mergeDomainConfig,
    chargeMode: settings.chargeMode,
  };
  const provider: ConfigProvider =
    settings.configType === "GRPC_XDS_SOTW"
      ? (await import("./xds-provider.js")).createXdsProvider(
          settings,
          context,
          (roots) => guarded(() => loadConfigFromRoots(roots, loadOptions)),
        )
      : createFileProvider({
          runtimeRoot: settings.runtimeRoot,
          runtimeSubdirectory: settings.runtimeSubdirectory,
          runtimeAppDirectory: settings.runtimeAppDirectory,
          ignoreDotFiles: settings.runtimeIgnoreDotFiles,
          watchRoot: settings.runtimeWatchRoot,
          load: (files) => guarded(() => loadConfig(files, loadOptions)),
          logger: logger.child({ component: "file-provider" }),
        });
  const configLogger = logger.child({ component: "config" });
  provider.subscribe((update) => {
    service.applyConfigUpdate(update);
    if (!update.ok) return;
    guard?.setDomainModes(update.config.failureModes);
    for (const domain of update.config.domains)
      configLogger.info({ domain }, "loaded domain");
    for (const line of update.config.dump().split("\n")) {
      if (line !== "") configLogger.info({ limit: line }, "loaded rate limit");
    }
  });

  const shouldRateLimit = createShouldRateLimitHandler({
    service,
    statsManager,
    logger: logger.child({ component: "grpc" }),
    tracing: settings.tracingEnabled,
  });
  admin.overrides = createOverridesAdmin({
    store: overrideStore,
    currentConfig: () => service.currentConfig(),
    clock,
    auditLogMax: settings.adminAuditLogMax,
    logger: logger.child({ component: "overrides" }),
  });
  const servedAdmin =
    workerGroup === undefined
      ? admin
      : groupAdminParts(admin, workerGroup, settings.topOffendersK);
  const explainService = createExplainService({
    service,
    cache,
    clock,
    backend: settings.backendType,
    nearLimitRatio: settings.nearLimitRatio,
    globalShadowMode: settings.shadowMode,
    globalQuotaMode: settings.quotaMode,
    sameKeyAccumulates: settings.backendType !== "mc",
    requestBounds,
    overrides: overrideTable,
  });
  const explainHandler = createExplainHandler(
    explainService,
    logger.child({ component: "explain" }),
  );
  const publicExplain = settings.explainEnabled ? explainHandler : undefined;
  // With the kv backend the replicas share the split through the store (docs/rlqs.md,
  // "Several replicas"); memory and mc keep it in the process.
  const rlqsLedger =
    settings.backendType === "kv"
      ? (await import("./rlqs-ledger.js")).createKvQuotaLedger(
          settings,
          context,
        )
      : undefined;
  const rlqs = createRlqsService({
    currentConfig: () => service.currentConfig(),
    stats: statsManager.store,
    logger: logger.child({ component: "rlqs" }),
    clock,
    reportIntervalMs: settings.rlqsReportIntervalMs,
    assignmentTtlMs: settings.rlqsAssignmentTtlMs,
    abandonAfterMs: settings.rlqsAbandonAfterMs,
    globalShadowMode: settings.shadowMode,
    ...(rlqsLedger !== undefined ? { ledger: rlqsLedger } : {}),
    limitOverride: (domain, descriptor, limit) =>
      overrideTable.find(domain, descriptor, limit),
  });
  // Explain's ExplainBucket and ListBuckets read the RLQS service's buckets (docs/rlqs.md).
  const explainBuckets = createBucketExplainHandlers(
    createBucketExplainService({
      rlqs,
      currentConfig: () => service.currentConfig(),
    }),
    logger.child({ component: "explain" }),
  );
  const routes = createRoutes({
    shouldRateLimit,
    health,
    statsManager,
    rlqs: (requests) => rlqs.stream(requests),
    explainBuckets,
    ...(publicExplain !== undefined ? { explain: publicExplain } : {}),
    ...(settings.adminEnabled ? { admin: servedAdmin } : {}),
  });
  const startedAtMs = clock.nowMs();
  let listeners: Listening[] = [];
  let sinks: StatsSinks | undefined;
  let runtimeStats: RuntimeStats | undefined;
  let closing: Promise<void> | undefined;
  /** Keeps a listener for shutdown and says where it listens (one warn line each). */
  const opened = (what: string, listening: Listening): void => {
    listeners.push(listening);
    logger.warn(
      { address: listening.address },
      `listening for ${what} on '${listening.address}'`,
    );
  };

  return {
    health,
    statsManager,
    service,

    async start() {
      sinks = await startStatsSinks(
        settings,
        context,
        offenders !== undefined && settings.topOffendersMetrics
          ? createOffenderGauges(offenders)
          : [],
      );
      if (settings.runtimeStatsEnabled)
        runtimeStats = startRuntimeStats({
          store: statsManager.store,
          intervalMs: settings.statsFlushIntervalMs,
        });
      // The debug and HTTP ports open first, so an operator (and an orchestrator's probe)
      // can see why the service is not ready while it waits for its store and config:
      // `/healthcheck` answers 500 `unhealthy: startup (waiting for …)` until the gRPC port
      // is open.
      health.register("startup", false);
      health.setReason(
        "startup",
        settings.backendType === "memory"
          ? "loading the rate limit config"
          : `waiting for the ${settings.backendType} store`,
      );
      let debugAddress = "";
      if ((deps.workerIndex ?? 0) === 0) {
        const debug = await startDebugServer({
          currentConfig: () => service.currentConfig(),
          reloadStatus: () => service.reloadStatus(),
          statsStore: statsManager.store,
          explain: explainHandler,
          explainBuckets,
          admin: servedAdmin,
          console: createConsole({
            currentConfig: () => service.currentConfig(),
            health,
            statsStore: statsManager.store,
            startedAtMs,
            nowMs: () => clock.nowMs(),
          }),
          logger: logger.child({ component: "debug" }),
          host: settings.debugHost,
          port: settings.debugPort,
        });
        opened("debug", debug);
        debugAddress = debug.address;
      }
      const http = await startHttpServer({
        routes,
        jsonHandler: createJsonHandler({
          service,
          statsManager,
          logger: logger.child({ component: "json" }),
          tracing: settings.tracingEnabled,
          maxBodyBytes: maxJsonBodyBytes,
        }),
        explainJsonHandler: createExplainJsonHandler({
          explain: publicExplain,
        }),
        corsAllowedOrigins: settings.corsAllowedOrigins,
        readMaxBytes: maxGrpcRequestBytes,
        health,
        reloadStatus: () => service.reloadStatus(),
        logger: logger.child({ component: "http" }),
        host: settings.host,
        port: settings.port,
      });
      opened("HTTP", http);
      try {
        if (cache.start !== undefined) await cache.start();
      } catch (err) {
        // The store never answered (KV_STARTUP_MAX_ELAPSED_TIME…): close what is open.
        const open = listeners;
        listeners = [];
        await Promise.all(open.map((l) => l.close(0)));
        throw err;
      }
      // The overrides are in the table before the first request is decided (kv: loaded, or
      // after 5 s without the store, loaded when it answers).
      await overrideStore.start();
      health.setReason("startup", "loading the rate limit config");
      if (!settings.forceStartWithoutInitialConfig)
        logger.info("waiting for the initial rate limit config");
      const started = provider.start();
      if (!settings.forceStartWithoutInitialConfig) {
        await started;
        logger.info(
          { loaded: service.currentConfig() !== undefined },
          "initial rate limit config processed",
        );
      } else {
        started.catch((err: unknown) => {
          logger.error({ err }, "config provider failed to start");
        });
      }
      const grpc = await startGrpcServer({
        routes,
        logger: logger.child({ component: "grpc" }),
        host: settings.grpcHost,
        port: settings.grpcPort,
        udsPath: settings.grpcUds,
        engine: settings.grpcHttp2Engine,
        ...(deps.grpcFastPath !== false ? { fastPath: shouldRateLimit } : {}),
        readMaxBytes: maxGrpcRequestBytes,
        maxConnectionAgeMs: settings.grpcMaxConnectionAgeMs,
        maxConnectionAgeGraceMs: settings.grpcMaxConnectionAgeGraceMs,
        maxConnections: settings.grpcMaxConnections,
        handshakeTimeoutMs: settings.grpcHandshakeTimeoutMs,
        maxConnectionIdleMs: settings.grpcMaxConnectionIdleMs,
        keepaliveMinTimeMs: settings.grpcKeepaliveMinTimeMs,
        streamResetLimit: {
          burst: settings.grpcStreamResetBurst,
          ratePerSecond: settings.grpcStreamResetRate,
        },
        maxConnectionMemoryBytes: settings.grpcMaxConnectionMemoryBytes,
        onEvent: http2EventCounter(statsManager.store),
        ...(settings.grpcServerUseTls
          ? {
              tls: {
                certFile: settings.grpcServerTlsCert,
                keyFile: settings.grpcServerTlsKey,
                ...(settings.grpcClientTlsCacert !== ""
                  ? {
                      clientCaFile: settings.grpcClientTlsCacert,
                      clientSan: settings.grpcClientTlsSan,
                    }
                  : {}),
              },
            }
          : {}),
      });
      opened("gRPC", grpc);
      await rlqsLedger?.start();
      rlqs.start();
      health.setReason("startup", undefined);
      health.ok("startup");
      // One line an operator can check the whole start-up against.
      logger.warn(
        {
          backend: settings.backendType,
          failureMode:
            settings.backendType === "memory"
              ? "none"
              : settings.backendFailureMode,
          statsSink: settings.statsSink,
          ...(sinks.pullAddress !== undefined
            ? { pullStats: sinks.pullAddress }
            : {}),
          configSource:
            settings.configType === "GRPC_XDS_SOTW"
              ? `xds ${settings.xdsServerUrl}`
              : `files ${settings.runtimeRoot}`,
          http2Engine: settings.grpcHttp2Engine,
          grpc: grpc.address,
          http: http.address,
          ...(debugAddress !== "" ? { debug: debugAddress } : {}),
          worker: deps.workerIndex ?? 0,
        },
        "ratelimit started",
      );
      return { grpc: grpc.address, http: http.address, debug: debugAddress };
    },

    close(graceMs = 10_000) {
      closing ??= (async () => {
        const open = listeners;
        listeners = [];
        // RLQS streams never end by themselves: end them (OK) so the drain does not wait.
        rlqs.close();
        await Promise.all(open.map((l) => l.close(graceMs)));
        await provider.close();
        await configCanary?.close();
        await cache.close();
        await rlqsLedger?.close();
        await overrideStore.close();
        runtimeStats?.close();
        await sinks?.close();
      })();
      return closing;
    },
  };
}

/**
 * Counts each HTTP/2 event of the gRPC listener as `ratelimit.server.http2.<event>`; a
 * counter is created on its event's first occurrence, so no statistic appears before an
 * event happens.
 */
function http2EventCounter(store: StatsStore): (event: Http2Event) => void {
  const counters = new Map<Http2Event, Counter>();
  return (event) => {
    let counter = counters.get(event);
    if (counter === undefined) {
      counter = store.counter(`${statNames.http2EventScope}.${event}`);
      counters.set(event, counter);
    }
    counter.add(1);
  };
}
