import { formatDurationMs } from "./env-parsers.js";
import { settingsDefaults as d } from "./settings.js";

/** Section of {@link settingsTable}, for grouping in `--help` output and the README. */
export type SettingsGroup =
  | "listeners"
  | "logging"
  | "configuration"
  | "xds"
  | "rate limiting"
  | "kv backend"
  | "mc backend"
  | "statistics"
  | "tracing";

/** One environment variable, as documented in `--help` and the README settings table. */
export interface SettingsTableRow {
  /** Variable name; `<M>` stands for a mogrifier name. */
  readonly name: string;
  readonly group: SettingsGroup;
  /** The default as one would write it in the environment, or a description in parentheses. */
  readonly defaultText: string;
  /** One-line meaning. */
  readonly meaning: string;
}

const empty = "(empty)";
const text = (value: string): string => (value === "" ? empty : value);
const duration = (valueMs: number): string => formatDurationMs(valueMs);
const list = (value: readonly string[]): string =>
  value.length === 0 ? empty : value.join(",");
const map = (value: Readonly<Record<string, string>>): string => {
  const entries = Object.entries(value);
  return entries.length === 0
    ? empty
    : entries.map(([k, v]) => `${k}:${v}`).join(",");
};

function row(
  group: SettingsGroup,
  name: string,
  defaultValue: string | number | boolean,
  meaning: string,
): SettingsTableRow {
  return { name, group, defaultText: String(defaultValue), meaning };
}

/**
 * Every environment variable the service reads, in documentation order, with its default (from
 * {@link settingsDefaults}, written the way the environment would spell it) and a one-line
 * meaning. Printed by `--help` and used to generate the README settings table.
 */
export const settingsTable: readonly SettingsTableRow[] = Object.freeze(
  [
    row(
      "listeners",
      "HOST",
      text(d.host),
      "HTTP listener host (/json, /healthcheck).",
    ),
    row("listeners", "PORT", d.port, "HTTP listener port."),
    row(
      "listeners",
      "DEBUG_HOST",
      text(d.debugHost),
      "Debug listener host (/rlconfig, /stats).",
    ),
    row("listeners", "DEBUG_PORT", d.debugPort, "Debug listener port."),
    row("listeners", "GRPC_HOST", text(d.grpcHost), "gRPC listener host."),
    row("listeners", "GRPC_PORT", d.grpcPort, "gRPC listener port."),
    row(
      "listeners",
      "GRPC_UDS",
      text(d.grpcUds),
      "Unix socket path for gRPC instead of host and port.",
    ),
    row(
      "listeners",
      "GRPC_MAX_CONNECTION_AGE",
      duration(d.grpcMaxConnectionAgeMs),
      "Age after which a gRPC connection is sent GOAWAY (±10 % jitter); 0 disables.",
    ),
    row(
      "listeners",
      "GRPC_MAX_CONNECTION_AGE_GRACE",
      duration(d.grpcMaxConnectionAgeGraceMs),
      "Extra time after GOAWAY before the connection is closed.",
    ),
    row(
      "listeners",
      "GRPC_SERVER_USE_TLS",
      d.grpcServerUseTls,
      "Serve gRPC over TLS.",
    ),
    row(
      "listeners",
      "GRPC_SERVER_TLS_CERT",
      text(d.grpcServerTlsCert),
      "Server certificate chain file (reloaded on change).",
    ),
    row(
      "listeners",
      "GRPC_SERVER_TLS_KEY",
      text(d.grpcServerTlsKey),
      "Server private key file.",
    ),
    row(
      "listeners",
      "GRPC_CLIENT_TLS_CACERT",
      text(d.grpcClientTlsCacert),
      "CA file for client certificates; set to require mutual TLS (needs GRPC_SERVER_USE_TLS).",
    ),
    row(
      "listeners",
      "GRPC_CLIENT_TLS_SAN",
      text(d.grpcClientTlsSan),
      "DNS name the client certificate must carry.",
    ),

    row(
      "logging",
      "LOG_LEVEL",
      d.logLevel.toUpperCase(),
      "panic, fatal, error, warn, warning, info, debug or trace (any case).",
    ),
    row(
      "logging",
      "LOG_FORMAT",
      d.logFormat,
      "json for JSON lines; anything else gives text lines.",
    ),

    row(
      "configuration",
      "CONFIG_TYPE",
      d.configType,
      "Configuration source: FILE or GRPC_XDS_SOTW.",
    ),
    row(
      "configuration",
      "FORCE_START_WITHOUT_INITIAL_CONFIG",
      d.forceStartWithoutInitialConfig,
      "Start serving without waiting for the first configuration.",
    ),
    row(
      "configuration",
      "RUNTIME_ROOT",
      text(d.runtimeRoot),
      "Root of the watched configuration tree.",
    ),
    row(
      "configuration",
      "RUNTIME_SUBDIRECTORY",
      text(d.runtimeSubdirectory),
      "Subdirectory below the root.",
    ),
    row(
      "configuration",
      "RUNTIME_APPDIRECTORY",
      text(d.runtimeAppDirectory),
      "Directory holding the YAML files.",
    ),
    row(
      "configuration",
      "RUNTIME_IGNOREDOTFILES",
      d.runtimeIgnoreDotFiles,
      "Ignore dot files.",
    ),
    row(
      "configuration",
      "RUNTIME_WATCH_ROOT",
      d.runtimeWatchRoot,
      "true: reload when the root symlink moves; false: reload on file changes in the directory.",
    ),
    row(
      "configuration",
      "MERGE_DOMAIN_CONFIG",
      d.mergeDomainConfig,
      "Allow one domain in several files.",
    ),

    row(
      "xds",
      "CONFIG_GRPC_XDS_NODE_ID",
      text(d.xdsNodeId),
      "Node id sent to the xDS server.",
    ),
    row(
      "xds",
      "CONFIG_GRPC_XDS_NODE_METADATA",
      map(d.xdsNodeMetadata),
      "Node metadata as k=v,k2=v2.",
    ),
    row(
      "xds",
      "CONFIG_GRPC_XDS_SERVER_URL",
      text(d.xdsServerUrl),
      "xDS server address.",
    ),
    row(
      "xds",
      "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
      duration(d.xdsServerConnectRetryIntervalMs),
      "Connect retry interval (kept for compatibility; backoff settings govern retries).",
    ),
    row(
      "xds",
      "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
      map(d.xdsClientAdditionalHeaders),
      "Headers sent to the xDS server, as k1:v1,k2:v2.",
    ),
    row(
      "xds",
      "CONFIG_GRPC_XDS_SERVER_USE_TLS",
      d.xdsServerUseTls,
      "Use TLS towards the xDS server.",
    ),
    row(
      "xds",
      "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
      text(d.xdsClientTlsCert),
      "Client certificate file for xDS.",
    ),
    row(
      "xds",
      "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
      text(d.xdsClientTlsKey),
      "Client key file for xDS.",
    ),
    row(
      "xds",
      "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
      text(d.xdsServerTlsCacert),
      "CA file to verify the xDS server.",
    ),
    row(
      "xds",
      "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
      text(d.xdsServerTlsSan),
      "Name to verify in the xDS server certificate.",
    ),
    row(
      "xds",
      "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
      duration(d.xdsClientBackoffInitialIntervalMs),
      "First wait before reconnecting to the xDS server; must be greater than 0.",
    ),
    row(
      "xds",
      "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
      duration(d.xdsClientBackoffMaxIntervalMs),
      "Largest reconnect wait.",
    ),
    row(
      "xds",
      "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
      d.xdsClientBackoffRandomFactor,
      "Jitter spread of the reconnect wait, 0 to 1; the wait itself doubles from the initial interval up to the maximum (see docs/xds.md).",
    ),
    row(
      "xds",
      "XDS_CLIENT_BACKOFF_JITTER",
      d.xdsClientBackoffJitter,
      "Randomise reconnect waits.",
    ),
    row(
      "xds",
      "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
      d.xdsClientMaxMsgSizeBytes,
      "Largest xDS message accepted, in bytes; 0 keeps the gRPC default (4 MiB).",
    ),

    row(
      "rate limiting",
      "BACKEND_TYPE",
      d.backendType,
      "Counter backend: kv, mc or memory (in-process).",
    ),
    row(
      "rate limiting",
      "CACHE_KEY_PREFIX",
      text(d.cacheKeyPrefix),
      "Prepended to every cache key.",
    ),
    row(
      "rate limiting",
      "EXPIRATION_JITTER_MAX_SECONDS",
      d.expirationJitterMaxSeconds,
      "Largest random seconds added to counter expirations; 0 or less disables.",
    ),
    row(
      "rate limiting",
      "WORKERS",
      d.workers,
      "Worker processes sharing the listening ports (uses every core); above 1 needs BACKEND_TYPE kv or mc.",
    ),
    row(
      "rate limiting",
      "LOCAL_CACHE_SIZE_IN_BYTES",
      d.localCacheSizeBytes,
      "Size of the local over-limit cache in bytes; 0 disables it.",
    ),
    row(
      "rate limiting",
      "NEAR_LIMIT_RATIO",
      d.nearLimitRatio,
      "Fraction of the limit (0 to 1) above which hits count as near limit.",
    ),
    row(
      "rate limiting",
      "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
      d.stopCacheKeyIncrementWhenOverlimit,
      "Do not increment counters of a request that is already over a limit.",
    ),
    row(
      "rate limiting",
      "SHADOW_MODE",
      d.shadowMode,
      "Global shadow mode: over-limit results are reported as OK.",
    ),
    row("rate limiting", "QUOTA_MODE", d.quotaMode, "Global quota mode."),
    row(
      "rate limiting",
      "RESPONSE_DYNAMIC_METADATA",
      d.responseDynamicMetadata,
      "Fill dynamic metadata in responses.",
    ),
    row(
      "rate limiting",
      "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
      d.healthyWithAtLeastOneConfigLoaded,
      "Report unhealthy until a configuration is loaded.",
    ),
    row(
      "rate limiting",
      "LIMIT_RESPONSE_HEADERS_ENABLED",
      d.limitResponseHeadersEnabled,
      "Add rate-limit headers to responses.",
    ),
    row(
      "rate limiting",
      "LIMIT_LIMIT_HEADER",
      text(d.limitLimitHeader),
      "Header name for the limit.",
    ),
    row(
      "rate limiting",
      "LIMIT_REMAINING_HEADER",
      text(d.limitRemainingHeader),
      "Header name for the remaining hits.",
    ),
    row(
      "rate limiting",
      "LIMIT_RESET_HEADER",
      text(d.limitResetHeader),
      "Header name for the seconds until reset.",
    ),

    row(
      "kv backend",
      "KV_SOCKET_TYPE",
      d.kvSocketType,
      "tcp or unix, for KV_TYPE=single.",
    ),
    row(
      "kv backend",
      "KV_TYPE",
      d.kvType.toUpperCase(),
      "single, sentinel or cluster (any case).",
    ),
    row(
      "kv backend",
      "KV_URL",
      text(d.kvUrl),
      "Address: host:port or socket path (single), master,host:port,… (sentinel), host:port,… (cluster).",
    ),
    row(
      "kv backend",
      "KV_POOL_SIZE",
      d.kvPoolSize,
      "ioredis multiplexes one connection per node, so this only caps cluster pipeline parallelism (docs/kv-backend.md).",
    ),
    row(
      "kv backend",
      "KV_TIMEOUT",
      duration(d.kvTimeoutMs),
      "Connect timeout, and the longest a connection with pending commands may stay silent before it is closed and they fail; 0 disables.",
    ),
    row(
      "kv backend",
      "KV_POOL_ON_EMPTY_BEHAVIOR",
      d.kvPoolOnEmptyBehavior,
      "When no connection is up: ERROR fails after KV_POOL_ON_EMPTY_WAIT_DURATION; WAIT and CREATE wait up to KV_TIMEOUT for the reconnect (docs/kv-backend.md).",
    ),
    row(
      "kv backend",
      "KV_POOL_ON_EMPTY_WAIT_DURATION",
      duration(d.kvPoolOnEmptyWaitMs),
      "How long ERROR waits for a connection before failing the request.",
    ),
    row(
      "kv backend",
      "KV_PIPELINE_WINDOW",
      duration(d.kvPipelineWindowMs),
      "0: each request's commands go out in one write; above 0: commands of concurrent requests are batched for this long (under 1ms: until the end of the event-loop turn).",
    ),
    row(
      "kv backend",
      "KV_PIPELINE_LIMIT",
      d.kvPipelineLimit,
      "Deprecated; no effect.",
    ),
    row(
      "kv backend",
      "KV_CLUSTER_PIPELINE_PARALLELISM",
      d.kvClusterPipelineParallelism,
      "Cluster pipelines in parallel: 0 = pool size, 1 = serial.",
    ),
    row("kv backend", "KV_TLS", d.kvTls, "Use TLS."),
    row(
      "kv backend",
      "KV_TLS_CLIENT_CERT",
      text(d.kvTlsClientCert),
      "Client certificate file (both instances).",
    ),
    row(
      "kv backend",
      "KV_TLS_CLIENT_KEY",
      text(d.kvTlsClientKey),
      "Client key file (both instances).",
    ),
    row(
      "kv backend",
      "KV_TLS_CACERT",
      text(d.kvTlsCacert),
      "CA file (both instances).",
    ),
    row(
      "kv backend",
      "KV_TLS_SKIP_HOSTNAME_VERIFICATION",
      d.kvTlsSkipHostnameVerification,
      "Verify the certificate chain but not the host name.",
    ),
    row(
      "kv backend",
      "KV_AUTH",
      text(d.kvAuth),
      "password or username:password.",
    ),
    row(
      "kv backend",
      "KV_SENTINEL_AUTH",
      text(d.kvSentinelAuth),
      "password or username:password for sentinel nodes.",
    ),
    row(
      "kv backend",
      "KV_HEALTH_CHECK_ACTIVE_CONNECTION",
      d.kvHealthCheckActiveConnection,
      "Report unhealthy while no connection is active.",
    ),
    row(
      "kv backend",
      "KV_STARTUP_INITIAL_INTERVAL",
      duration(d.kvStartupInitialIntervalMs),
      "First wait between connection attempts at startup.",
    ),
    row(
      "kv backend",
      "KV_STARTUP_MAX_INTERVAL",
      duration(d.kvStartupMaxIntervalMs),
      "Largest wait between startup attempts.",
    ),
    row(
      "kv backend",
      "KV_STARTUP_MAX_ELAPSED_TIME",
      duration(d.kvStartupMaxElapsedTimeMs),
      "Give up connecting at startup after this long; 0 retries forever.",
    ),
    row(
      "kv backend",
      "KV_PERSECOND",
      d.kvPerSecond,
      "Use a second instance for per-second limits.",
    ),
    row(
      "kv backend",
      "KV_PERSECOND_SOCKET_TYPE",
      d.kvPerSecondSocketType,
      "As KV_SOCKET_TYPE, per-second instance.",
    ),
    row(
      "kv backend",
      "KV_PERSECOND_TYPE",
      d.kvPerSecondType.toUpperCase(),
      "As KV_TYPE, per-second instance.",
    ),
    row(
      "kv backend",
      "KV_PERSECOND_URL",
      text(d.kvPerSecondUrl),
      "As KV_URL, per-second instance.",
    ),
    row(
      "kv backend",
      "KV_PERSECOND_POOL_SIZE",
      d.kvPerSecondPoolSize,
      "As KV_POOL_SIZE, per-second instance.",
    ),
    row(
      "kv backend",
      "KV_PERSECOND_TIMEOUT",
      duration(d.kvPerSecondTimeoutMs),
      "As KV_TIMEOUT, per-second instance.",
    ),
    row(
      "kv backend",
      "KV_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
      d.kvPerSecondPoolOnEmptyBehavior,
      "As KV_POOL_ON_EMPTY_BEHAVIOR, per-second instance.",
    ),
    row(
      "kv backend",
      "KV_PERSECOND_POOL_ON_EMPTY_WAIT_DURATION",
      duration(d.kvPerSecondPoolOnEmptyWaitMs),
      "As KV_POOL_ON_EMPTY_WAIT_DURATION, per-second instance.",
    ),
    row(
      "kv backend",
      "KV_PERSECOND_PIPELINE_WINDOW",
      duration(d.kvPerSecondPipelineWindowMs),
      "As KV_PIPELINE_WINDOW, per-second instance.",
    ),
    row(
      "kv backend",
      "KV_PERSECOND_PIPELINE_LIMIT",
      d.kvPerSecondPipelineLimit,
      "Deprecated; no effect.",
    ),
    row(
      "kv backend",
      "KV_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
      d.kvPerSecondClusterPipelineParallelism,
      "As KV_CLUSTER_PIPELINE_PARALLELISM, per-second instance.",
    ),
    row(
      "kv backend",
      "KV_PERSECOND_TLS",
      d.kvPerSecondTls,
      "Use TLS for the per-second instance.",
    ),
    row(
      "kv backend",
      "KV_PERSECOND_AUTH",
      text(d.kvPerSecondAuth),
      "As KV_AUTH, per-second instance.",
    ),
    row(
      "kv backend",
      "KV_PERSECOND_SENTINEL_AUTH",
      text(d.kvPerSecondSentinelAuth),
      "As KV_SENTINEL_AUTH, per-second instance.",
    ),

    row(
      "mc backend",
      "MC_HOST_PORT",
      list(d.mcHostPort),
      "Comma-separated host:port nodes; exclusive with MC_SRV.",
    ),
    row(
      "mc backend",
      "MC_SRV",
      text(d.mcSrv),
      "SRV record (_service._proto.name) listing the nodes; exclusive with MC_HOST_PORT.",
    ),
    row(
      "mc backend",
      "MC_SRV_REFRESH",
      duration(d.mcSrvRefreshMs),
      "SRV refresh period; 0 never refreshes.",
    ),
    row(
      "mc backend",
      "MC_MAX_IDLE_CONNS",
      d.mcMaxIdleConns,
      "Idle connections kept per node.",
    ),
    row("mc backend", "MC_TLS", d.mcTls, "Use TLS."),
    row(
      "mc backend",
      "MC_TLS_CLIENT_CERT",
      text(d.mcTlsClientCert),
      "Client certificate file.",
    ),
    row(
      "mc backend",
      "MC_TLS_CLIENT_KEY",
      text(d.mcTlsClientKey),
      "Client key file.",
    ),
    row("mc backend", "MC_TLS_CACERT", text(d.mcTlsCacert), "CA file."),
    row(
      "mc backend",
      "MC_TLS_SKIP_HOSTNAME_VERIFICATION",
      d.mcTlsSkipHostnameVerification,
      "Verify the certificate chain but not the host name.",
    ),

    row(
      "statistics",
      "DISABLE_STATS",
      d.disableStats,
      "Disable statistics (wins over every sink switch).",
    ),
    row(
      "statistics",
      "STATS_FLUSH_INTERVAL",
      duration(d.statsFlushIntervalMs),
      "Time between statistics flushes.",
    ),
    row(
      "statistics",
      "EXTRA_TAGS",
      map(d.extraTags),
      "Tags added to every statistic, as k1:v1,k2:v2.",
    ),
    row(
      "statistics",
      "USE_PUSHSTATS",
      d.usePushStats,
      "Push-based metrics sink; set false to log statistics or to use another sink.",
    ),
    row(
      "statistics",
      "PUSHSTATS_HOST",
      text(d.pushStatsHost),
      "Push-based metrics host.",
    ),
    row(
      "statistics",
      "PUSHSTATS_PORT",
      d.pushStatsPort,
      "Push-based metrics port.",
    ),
    row(
      "statistics",
      "PUSHSTATS_PROTOCOL",
      d.pushStatsProtocol,
      "tcp, udp, udp4 or udp6.",
    ),
    row(
      "statistics",
      "USE_TAGGED_PUSHSTATS",
      d.useTaggedPushStats,
      "Tagged push-based metrics sink (needs USE_PUSHSTATS=false).",
    ),
    row(
      "statistics",
      "TAGGED_PUSHSTATS_MOGRIFIERS",
      empty,
      "Comma-separated mogrifier names, in priority order.",
    ),
    row(
      "statistics",
      "USE_TAGGED_PUSHSTATS_MOGRIFIERS",
      empty,
      "Other spelling of TAGGED_PUSHSTATS_MOGRIFIERS.",
    ),
    row(
      "statistics",
      "TAGGED_PUSHSTATS_MOGRIFIERS_<M>_PATTERN",
      empty,
      "Regular expression matched against statistic names (required per mogrifier).",
    ),
    row(
      "statistics",
      "TAGGED_PUSHSTATS_MOGRIFIERS_<M>_NAME",
      empty,
      "Metric name; $1, $2, … refer to pattern groups (required per mogrifier).",
    ),
    row(
      "statistics",
      "TAGGED_PUSHSTATS_MOGRIFIERS_<M>_TAGS",
      empty,
      "Extra tags as k1:v1,k2:v2; values may use $N.",
    ),
    row(
      "statistics",
      "TAGGED_PUSHSTATS_MOGRIFIER_<M>_PATTERN",
      empty,
      "Other spelling of TAGGED_PUSHSTATS_MOGRIFIERS_<M>_PATTERN.",
    ),
    row(
      "statistics",
      "TAGGED_PUSHSTATS_MOGRIFIER_<M>_NAME",
      empty,
      "Other spelling of TAGGED_PUSHSTATS_MOGRIFIERS_<M>_NAME.",
    ),
    row(
      "statistics",
      "TAGGED_PUSHSTATS_MOGRIFIER_<M>_TAGS",
      empty,
      "Other spelling of TAGGED_PUSHSTATS_MOGRIFIERS_<M>_TAGS.",
    ),
    row(
      "statistics",
      "USE_PULLSTATS",
      d.usePullStats,
      "Pull-based metrics exporter (needs USE_PUSHSTATS=false).",
    ),
    row(
      "statistics",
      "PULLSTATS_ADDR",
      text(d.pullStatsAddr),
      "Exporter listen address.",
    ),
    row(
      "statistics",
      "PULLSTATS_PATH",
      text(d.pullStatsPath),
      "Exporter HTTP path.",
    ),
    row(
      "statistics",
      "PULLSTATS_MAPPER_YAML",
      text(d.pullStatsMapperYaml),
      "Mapping file replacing the built-in mapping.",
    ),
    row(
      "statistics",
      "PULLSTATS_RESPONSE_TIME_AS_MILLISECONDS",
      d.pullStatsResponseTimeAsMilliseconds,
      "Keep response_time in milliseconds in the built-in mapping.",
    ),

    row(
      "tracing",
      "TRACING_ENABLED",
      d.tracingEnabled,
      "Export OTLP trace spans (true or false only).",
    ),
    row(
      "tracing",
      "TRACING_EXPORTER_PROTOCOL",
      d.tracingExporterProtocol,
      "http or grpc.",
    ),
    row(
      "tracing",
      "TRACING_SERVICE_NAME",
      text(d.tracingServiceName),
      "service.name of the spans.",
    ),
    row(
      "tracing",
      "TRACING_SERVICE_NAMESPACE",
      text(d.tracingServiceNamespace),
      "service.namespace of the spans.",
    ),
    row(
      "tracing",
      "TRACING_SERVICE_INSTANCE_ID",
      "(random UUID v4)",
      "service.instance.id of the spans.",
    ),
    row(
      "tracing",
      "TRACING_SAMPLING_RATE",
      d.tracingSamplingRatio,
      "Fraction of traces sampled, 0 to 1.",
    ),
  ].map((entry) => Object.freeze(entry)),
);
