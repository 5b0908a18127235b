// Every environment variable of the service, parsed in one place (house style §7).
// Names are the spec's neutral ones (KV_*, MC_*, PUSHSTATS_*, TAGGED_PUSHSTATS_*, PULLSTATS_*);
// defaults the spec leaves open come from behavior.md §1.2. Parsing follows the reference's env
// library (behavior.md §1.1): an unset variable takes its default, a variable set to "" is
// parsed as "" (invalid for bool, integer, duration and number fields; fine for strings, lists
// and maps), and every problem is collected before failing.

import { randomUUID as cryptoRandomUUID } from "node:crypto";
import {
  EnvParseError,
  nonNegativeInteger,
  parseBool,
  parseDurationMs,
  parseFloat,
  parseInteger,
  parseList,
  parseMap,
  parseRatio,
  positiveInteger,
  anyInteger,
  type IntegerRange,
} from "./env-parsers.js";
import { settingWarnings } from "./setting-warnings.js";
import { SettingsError } from "./settings-error.js";

/** The environment as {@link loadSettings} reads it; `undefined` means unset. */
export type SettingsEnv = Readonly<Record<string, string | undefined>>;

/** Counter backend (`BACKEND_TYPE`): key-value store, memcached protocol, or in-process. */
export type BackendType = "kv" | "mc" | "memory";
/** Where rate-limit configuration comes from (`CONFIG_TYPE`). */
export type ConfigType = "FILE" | "GRPC_XDS_SOTW";
/** pino level names; `LOG_LEVEL` takes the reference's level words and maps them here. */
export type LogLevel = "trace" | "debug" | "info" | "warn" | "error" | "fatal";
/** Log line format (`LOG_FORMAT`). */
export type LogFormat = "text" | "json";
/** Deployment of the key-value store (`KV_TYPE`). */
export type KvType = "single" | "sentinel" | "cluster";
/** How the key-value store is reached for `KV_TYPE=single` (`KV_SOCKET_TYPE`). */
export type KvSocketType = "tcp" | "unix";
/** What a caller does when the key-value connection pool is exhausted (`KV_POOL_ON_EMPTY_BEHAVIOR`). */
export type KvPoolOnEmptyBehavior = "CREATE" | "ERROR" | "WAIT";
/** Transport of the push-based metrics sink (`PUSHSTATS_PROTOCOL`). */
export type PushStatsProtocol = "tcp" | "udp" | "udp4" | "udp6";
/** OTLP trace exporter transport (`TRACING_EXPORTER_PROTOCOL`). */
export type TracingExporterProtocol = "http" | "grpc";
/**
 * The statistics sink in use, derived from `DISABLE_STATS`, `USE_TAGGED_PUSHSTATS`,
 * `USE_PUSHSTATS` and `USE_PULLSTATS` in the reference's order (behavior.md §10.1):
 * `none` when disabled, `log` when no sink is switched on (statistics are logged).
 */
export type StatsSinkKind =
  "none" | "tagged-pushstats" | "pushstats" | "pullstats" | "log";

/**
 * One rewrite rule of the tagged push-metrics sink, read from
 * `TAGGED_PUSHSTATS_MOGRIFIERS_<name>_{PATTERN,NAME,TAGS}` (or the
 * `TAGGED_PUSHSTATS_MOGRIFIER_<name>_*` spelling). The first rule whose pattern matches a
 * statistic name rewrites it.
 */
export interface TaggedPushStatsMogrifier {
  /** Name as listed in `TAGGED_PUSHSTATS_MOGRIFIERS`. */
  readonly name: string;
  /** Regular expression source matched against the statistic name (checked to compile). */
  readonly pattern: string;
  /** Output metric name; `$1`, `$2`, … refer to capture groups (`$0` the whole match). */
  readonly metricName: string;
  /** Extra tags, tag name → value template (`$N` allowed), in the order written. */
  readonly tags: Readonly<Record<string, string>>;
}

/**
 * The service's settings, parsed from the environment by {@link loadSettings} and deep-frozen.
 * Each field names its environment variable, unit and default ({@link settingsDefaults}).
 */
export interface Settings {
  // --- listeners -------------------------------------------------------------------------------
  /** HTTP listener host for `/json` and `/healthcheck` (`HOST`). @defaultValue "0.0.0.0" */
  readonly host: string;
  /** HTTP listener TCP port, 0–65535 (`PORT`). @defaultValue 8080 */
  readonly port: number;
  /** Debug listener host (`DEBUG_HOST`). @defaultValue "0.0.0.0" */
  readonly debugHost: string;
  /** Debug listener TCP port, 0–65535 (`DEBUG_PORT`). @defaultValue 6070 */
  readonly debugPort: number;
  /** gRPC listener host (`GRPC_HOST`). @defaultValue "0.0.0.0" */
  readonly grpcHost: string;
  /** gRPC listener TCP port, 0–65535 (`GRPC_PORT`). @defaultValue 8081 */
  readonly grpcPort: number;
  /**
   * Unix socket path for gRPC; when non-empty it replaces `GRPC_HOST:GRPC_PORT` (`GRPC_UDS`).
   * @defaultValue "" (listen on host and port)
   */
  readonly grpcUds: string;
  /**
   * Milliseconds after which a gRPC connection is sent GOAWAY, ±10 % jitter; 0 disables
   * (`GRPC_MAX_CONNECTION_AGE`, Go duration). @defaultValue 86_400_000 (24h)
   */
  readonly grpcMaxConnectionAgeMs: number;
  /**
   * Milliseconds after the GOAWAY before the connection is closed by force
   * (`GRPC_MAX_CONNECTION_AGE_GRACE`, Go duration). @defaultValue 3_600_000 (1h)
   */
  readonly grpcMaxConnectionAgeGraceMs: number;
  /** Serve gRPC over TLS; needs cert and key (`GRPC_SERVER_USE_TLS`). @defaultValue false */
  readonly grpcServerUseTls: boolean;
  /** Server certificate chain file, watched for changes (`GRPC_SERVER_TLS_CERT`). @defaultValue "" */
  readonly grpcServerTlsCert: string;
  /** Server private key file (`GRPC_SERVER_TLS_KEY`). @defaultValue "" */
  readonly grpcServerTlsKey: string;
  /**
   * CA file for client certificates; non-empty turns on mutual TLS, which needs
   * `GRPC_SERVER_USE_TLS` (`GRPC_CLIENT_TLS_CACERT`). @defaultValue ""
   */
  readonly grpcClientTlsCacert: string;
  /** DNS name the client certificate must carry under mutual TLS (`GRPC_CLIENT_TLS_SAN`). @defaultValue "" */
  readonly grpcClientTlsSan: string;

  // --- logging ---------------------------------------------------------------------------------
  /**
   * Log level (`LOG_LEVEL`, any case of panic, fatal, error, warn, warning, info, debug, trace;
   * panic maps to fatal, warning to warn). @defaultValue "warn"
   */
  readonly logLevel: LogLevel;
  /** Log format: `json` (any case) or text for anything else (`LOG_FORMAT`). @defaultValue "text" */
  readonly logFormat: LogFormat;

  // --- configuration source --------------------------------------------------------------------
  /** Configuration source, exactly `FILE` or `GRPC_XDS_SOTW` (`CONFIG_TYPE`). @defaultValue "FILE" */
  readonly configType: ConfigType;
  /**
   * Start the servers without waiting for the first configuration
   * (`FORCE_START_WITHOUT_INITIAL_CONFIG`). @defaultValue false
   */
  readonly forceStartWithoutInitialConfig: boolean;
  /** Root of the watched runtime tree (`RUNTIME_ROOT`). @defaultValue "/srv/runtime_data/current" */
  readonly runtimeRoot: string;
  /** Subdirectory below the root (`RUNTIME_SUBDIRECTORY`). @defaultValue "" */
  readonly runtimeSubdirectory: string;
  /** Directory holding the YAML files (`RUNTIME_APPDIRECTORY`). @defaultValue "config" */
  readonly runtimeAppDirectory: string;
  /** Ignore dot files in the runtime tree (`RUNTIME_IGNOREDOTFILES`). @defaultValue false */
  readonly runtimeIgnoreDotFiles: boolean;
  /**
   * `true`: reload when the root symlink is re-pointed; `false`: reload on changes inside the
   * application directory (`RUNTIME_WATCH_ROOT`). @defaultValue true
   */
  readonly runtimeWatchRoot: boolean;
  /** Allow one domain in several files or resources (`MERGE_DOMAIN_CONFIG`). @defaultValue false */
  readonly mergeDomainConfig: boolean;

  // --- xDS configuration client ----------------------------------------------------------------
  /** Node id sent to the xDS server (`CONFIG_GRPC_XDS_NODE_ID`). @defaultValue "default" */
  readonly xdsNodeId: string;
  /**
   * Node metadata string fields, from `k=v,k2=v2` split at the first `=`; items without `=` are
   * ignored, as in the reference (`CONFIG_GRPC_XDS_NODE_METADATA`). @defaultValue \{\}
   */
  readonly xdsNodeMetadata: Readonly<Record<string, string>>;
  /** xDS server address (`CONFIG_GRPC_XDS_SERVER_URL`). @defaultValue "localhost:18000" */
  readonly xdsServerUrl: string;
  /**
   * Connect retry interval in milliseconds; the reference ignores it (behavior.md §11)
   * (`CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL`, Go duration). @defaultValue 3_000 (3s)
   */
  readonly xdsServerConnectRetryIntervalMs: number;
  /**
   * gRPC metadata sent on the xDS stream, from `k1:v1,k2:v2`; may hold credentials, so its value
   * never appears in errors (`CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS`). @defaultValue \{\}
   */
  readonly xdsClientAdditionalHeaders: Readonly<Record<string, string>>;
  /** Use TLS towards the xDS server (`CONFIG_GRPC_XDS_SERVER_USE_TLS`). @defaultValue false */
  readonly xdsServerUseTls: boolean;
  /** Client certificate file for xDS (`CONFIG_GRPC_XDS_CLIENT_TLS_CERT`). @defaultValue "" */
  readonly xdsClientTlsCert: string;
  /** Client key file for xDS (`CONFIG_GRPC_XDS_CLIENT_TLS_KEY`). @defaultValue "" */
  readonly xdsClientTlsKey: string;
  /** CA file added to the system roots to verify the xDS server (`CONFIG_GRPC_XDS_SERVER_TLS_CACERT`). @defaultValue "" */
  readonly xdsServerTlsCacert: string;
  /** Name to verify in the xDS server certificate instead of the host (`CONFIG_GRPC_XDS_SERVER_TLS_SAN`). @defaultValue "" */
  readonly xdsServerTlsSan: string;
  /** First reconnect wait in milliseconds (`XDS_CLIENT_BACKOFF_INITIAL_INTERVAL`, Go duration). @defaultValue 10_000 (10s) */
  readonly xdsClientBackoffInitialIntervalMs: number;
  /** Largest reconnect wait in milliseconds (`XDS_CLIENT_BACKOFF_MAX_INTERVAL`, Go duration). @defaultValue 60_000 (60s) */
  readonly xdsClientBackoffMaxIntervalMs: number;
  /**
   * Jitter spread of the xDS reconnect wait as a ratio, ≥ 0 (above 1 acts as 1); the wait itself
   * doubles from the initial interval up to the maximum. The reference used this value as the
   * growth factor, a constant wait with the default (behavior.md "Where we deliberately differ"
   * item 5) (`XDS_CLIENT_BACKOFF_RANDOM_FACTOR`). @defaultValue 0.5
   */
  readonly xdsClientBackoffRandomFactor: number;
  /** Randomise each reconnect wait (`XDS_CLIENT_BACKOFF_JITTER`). @defaultValue true */
  readonly xdsClientBackoffJitter: boolean;
  /**
   * Largest xDS message accepted, in bytes; 0 keeps the gRPC default of 4 MiB
   * (`XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES`). @defaultValue 0
   */
  readonly xdsClientMaxMsgSizeBytes: number;

  // --- rate limiting ---------------------------------------------------------------------------
  /** Counter backend: `kv` (also for ""), `mc` or `memory` (`BACKEND_TYPE`). @defaultValue "kv" */
  readonly backendType: BackendType;
  /** Prepended verbatim to every cache key (`CACHE_KEY_PREFIX`). @defaultValue "" */
  readonly cacheKeyPrefix: string;
  /**
   * Upper bound (exclusive) of the random seconds added to each counter's expiration; ≤ 0
   * disables the jitter (`EXPIRATION_JITTER_MAX_SECONDS`). @defaultValue 300
   */
  readonly expirationJitterMaxSeconds: number;
  /**
   * Number of worker processes sharing the listening ports (`WORKERS`), 1–64; above 1 needs a
   * shared backend (kv or mc). @defaultValue 1
   */
  readonly workers: number;
  /** Size of the local over-limit cache in bytes; 0 disables it (`LOCAL_CACHE_SIZE_IN_BYTES`). @defaultValue 0 */
  readonly localCacheSizeBytes: number;
  /**
   * Fraction of the limit above which hits count as near limit, 0–1 (`NEAR_LIMIT_RATIO`; the
   * reference holds it as a 32-bit float, so apply `Math.fround` where its arithmetic matters).
   * @defaultValue 0.8
   */
  readonly nearLimitRatio: number;
  /**
   * Increment no counter of a request once one of its descriptors is over limit
   * (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`). @defaultValue false
   */
  readonly stopCacheKeyIncrementWhenOverlimit: boolean;
  /** Global shadow mode: over-limit results are reported as OK (`SHADOW_MODE`). @defaultValue false */
  readonly shadowMode: boolean;
  /** Global quota mode (`QUOTA_MODE`). @defaultValue false */
  readonly quotaMode: boolean;
  /** Fill `dynamic_metadata` in responses (`RESPONSE_DYNAMIC_METADATA`). @defaultValue false */
  readonly responseDynamicMetadata: boolean;
  /**
   * Report unhealthy until at least one configuration is loaded
   * (`HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`). @defaultValue false
   */
  readonly healthyWithAtLeastOneConfigLoaded: boolean;
  /** Add rate-limit headers to responses (`LIMIT_RESPONSE_HEADERS_ENABLED`). @defaultValue false */
  readonly limitResponseHeadersEnabled: boolean;
  /** Header carrying the limit (`LIMIT_LIMIT_HEADER`). @defaultValue "RateLimit-Limit" */
  readonly limitLimitHeader: string;
  /** Header carrying the remaining hits (`LIMIT_REMAINING_HEADER`). @defaultValue "RateLimit-Remaining" */
  readonly limitRemainingHeader: string;
  /** Header carrying the seconds until reset (`LIMIT_RESET_HEADER`). @defaultValue "RateLimit-Reset" */
  readonly limitResetHeader: string;

  // --- key-value store backend (KV_*) ----------------------------------------------------------
  /** Network for `single`: `tcp` or `unix` (`KV_SOCKET_TYPE`). @defaultValue "unix" */
  readonly kvSocketType: KvSocketType;
  /** Deployment, any case of single, sentinel, cluster (`KV_TYPE`). @defaultValue "single" */
  readonly kvType: KvType;
  /**
   * Address: `host:port` or socket path (single), `<master>,<sentinel host:port>,…` with at
   * least 2 items (sentinel), `host:port,…` (cluster) (`KV_URL`).
   * @defaultValue "/var/run/nutcracker/ratelimit.sock"
   */
  readonly kvUrl: string;
  /** Connections in the pool, ≥ 1 (`KV_POOL_SIZE`). @defaultValue 10 */
  readonly kvPoolSize: number;
  /** Connect (and I/O) timeout in milliseconds; 0 means none (`KV_TIMEOUT`, Go duration). @defaultValue 10_000 (10s) */
  readonly kvTimeoutMs: number;
  /** Pool-exhausted behaviour, any case of CREATE, ERROR, WAIT (`KV_POOL_ON_EMPTY_BEHAVIOR`). @defaultValue "CREATE" */
  readonly kvPoolOnEmptyBehavior: KvPoolOnEmptyBehavior;
  /** Milliseconds to wait before CREATE or ERROR applies (`KV_POOL_ON_EMPTY_WAIT_DURATION`, Go duration). @defaultValue 1_000 (1s) */
  readonly kvPoolOnEmptyWaitMs: number;
  /** Write-flush interval in milliseconds; 0 flushes every write (`KV_PIPELINE_WINDOW`, Go duration). @defaultValue 0 */
  readonly kvPipelineWindowMs: number;
  /** Deprecated, no effect; a value > 0 is warned about (`KV_PIPELINE_LIMIT`). @defaultValue 0 */
  readonly kvPipelineLimit: number;
  /**
   * Cluster pipelines run in parallel: 0 = pool size, 1 = serial, larger values are capped at
   * the pool size (`KV_CLUSTER_PIPELINE_PARALLELISM`). @defaultValue 1
   */
  readonly kvClusterPipelineParallelism: number;
  /** Use TLS (`KV_TLS`). @defaultValue false */
  readonly kvTls: boolean;
  /** Client certificate file, shared with the per-second instance (`KV_TLS_CLIENT_CERT`). @defaultValue "" */
  readonly kvTlsClientCert: string;
  /** Client key file, shared with the per-second instance (`KV_TLS_CLIENT_KEY`). @defaultValue "" */
  readonly kvTlsClientKey: string;
  /** CA file added to the system roots, shared with the per-second instance (`KV_TLS_CACERT`). @defaultValue "" */
  readonly kvTlsCacert: string;
  /** Verify the chain but not the host name, shared with the per-second instance (`KV_TLS_SKIP_HOSTNAME_VERIFICATION`). @defaultValue false */
  readonly kvTlsSkipHostnameVerification: boolean;
  /** `<password>` or `<username>:<password>` for master and replicas; secret (`KV_AUTH`). @defaultValue "" */
  readonly kvAuth: string;
  /** Same formats, for sentinel nodes only; secret (`KV_SENTINEL_AUTH`). @defaultValue "" */
  readonly kvSentinelAuth: string;
  /**
   * Health fails while no connection to the store is active
   * (`KV_HEALTH_CHECK_ACTIVE_CONNECTION`). @defaultValue false
   */
  readonly kvHealthCheckActiveConnection: boolean;
  /** First wait between startup connection attempts, in milliseconds (`KV_STARTUP_INITIAL_INTERVAL`, Go duration). @defaultValue 1_000 (1s) */
  readonly kvStartupInitialIntervalMs: number;
  /** Largest wait between startup connection attempts, in milliseconds (`KV_STARTUP_MAX_INTERVAL`, Go duration). @defaultValue 30_000 (30s) */
  readonly kvStartupMaxIntervalMs: number;
  /** Give up connecting at startup after this many milliseconds; 0 retries forever (`KV_STARTUP_MAX_ELAPSED_TIME`, Go duration). @defaultValue 0 */
  readonly kvStartupMaxElapsedTimeMs: number;
  /** Use a second instance for per-second limits (`KV_PERSECOND`). @defaultValue false */
  readonly kvPerSecond: boolean;
  /** As {@link Settings.kvSocketType}, per-second instance (`KV_PERSECOND_SOCKET_TYPE`). @defaultValue "unix" */
  readonly kvPerSecondSocketType: KvSocketType;
  /** As {@link Settings.kvType}, per-second instance (`KV_PERSECOND_TYPE`). @defaultValue "single" */
  readonly kvPerSecondType: KvType;
  /** As {@link Settings.kvUrl}, per-second instance (`KV_PERSECOND_URL`). @defaultValue "/var/run/nutcracker/ratelimitpersecond.sock" */
  readonly kvPerSecondUrl: string;
  /** As {@link Settings.kvPoolSize}, per-second instance (`KV_PERSECOND_POOL_SIZE`). @defaultValue 10 */
  readonly kvPerSecondPoolSize: number;
  /** As {@link Settings.kvTimeoutMs}, per-second instance (`KV_PERSECOND_TIMEOUT`). @defaultValue 10_000 (10s) */
  readonly kvPerSecondTimeoutMs: number;
  /** As {@link Settings.kvPoolOnEmptyBehavior}, per-second instance (`KV_PERSECOND_POOL_ON_EMPTY_BEHAVIOR`). @defaultValue "CREATE" */
  readonly kvPerSecondPoolOnEmptyBehavior: KvPoolOnEmptyBehavior;
  /** As {@link Settings.kvPoolOnEmptyWaitMs}, per-second instance (`KV_PERSECOND_POOL_ON_EMPTY_WAIT_DURATION`). @defaultValue 1_000 (1s) */
  readonly kvPerSecondPoolOnEmptyWaitMs: number;
  /** As {@link Settings.kvPipelineWindowMs}, per-second instance (`KV_PERSECOND_PIPELINE_WINDOW`). @defaultValue 0 */
  readonly kvPerSecondPipelineWindowMs: number;
  /** Deprecated, no effect (`KV_PERSECOND_PIPELINE_LIMIT`). @defaultValue 0 */
  readonly kvPerSecondPipelineLimit: number;
  /** As {@link Settings.kvClusterPipelineParallelism}, per-second instance (`KV_PERSECOND_CLUSTER_PIPELINE_PARALLELISM`). @defaultValue 1 */
  readonly kvPerSecondClusterPipelineParallelism: number;
  /** Use TLS for the per-second instance (`KV_PERSECOND_TLS`). @defaultValue false */
  readonly kvPerSecondTls: boolean;
  /** As {@link Settings.kvAuth}, per-second instance; secret (`KV_PERSECOND_AUTH`). @defaultValue "" */
  readonly kvPerSecondAuth: string;
  /** As {@link Settings.kvSentinelAuth}, per-second instance; secret (`KV_PERSECOND_SENTINEL_AUTH`). @defaultValue "" */
  readonly kvPerSecondSentinelAuth: string;

  // --- memcached-protocol backend (MC_*) -------------------------------------------------------
  /** `host:port` nodes, in key-mapping order; exclusive with `MC_SRV` (`MC_HOST_PORT`). @defaultValue [] */
  readonly mcHostPort: readonly string[];
  /** SRV record `_service._proto.name` listing the nodes; exclusive with `MC_HOST_PORT` (`MC_SRV`). @defaultValue "" */
  readonly mcSrv: string;
  /** Milliseconds between SRV re-resolutions; 0 never refreshes (`MC_SRV_REFRESH`, Go duration). @defaultValue 0 */
  readonly mcSrvRefreshMs: number;
  /** Idle connections kept per node, ≥ 0 (`MC_MAX_IDLE_CONNS`). @defaultValue 2 */
  readonly mcMaxIdleConns: number;
  /** Use TLS (`MC_TLS`). @defaultValue false */
  readonly mcTls: boolean;
  /** Client certificate file (`MC_TLS_CLIENT_CERT`). @defaultValue "" */
  readonly mcTlsClientCert: string;
  /** Client key file (`MC_TLS_CLIENT_KEY`). @defaultValue "" */
  readonly mcTlsClientKey: string;
  /** CA file added to the system roots (`MC_TLS_CACERT`). @defaultValue "" */
  readonly mcTlsCacert: string;
  /** Verify the chain but not the host name (`MC_TLS_SKIP_HOSTNAME_VERIFICATION`). @defaultValue false */
  readonly mcTlsSkipHostnameVerification: boolean;

  // --- statistics ------------------------------------------------------------------------------
  /** The sink in use, derived (see {@link StatsSinkKind}). @defaultValue "pushstats" */
  readonly statsSink: StatsSinkKind;
  /** Disable statistics; wins over every sink switch (`DISABLE_STATS`). @defaultValue false */
  readonly disableStats: boolean;
  /** Milliseconds between flushes, > 0 (`STATS_FLUSH_INTERVAL`, Go duration). @defaultValue 10_000 (10s) */
  readonly statsFlushIntervalMs: number;
  /** Tags added to every statistic, from `k1:v1,k2:v2` (`EXTRA_TAGS`). @defaultValue \{\} */
  readonly extraTags: Readonly<Record<string, string>>;
  /** Push-based metrics sink; `false` logs statistics instead (`USE_PUSHSTATS`). @defaultValue true */
  readonly usePushStats: boolean;
  /** Push-based metrics host (`PUSHSTATS_HOST`). @defaultValue "localhost" */
  readonly pushStatsHost: string;
  /** Push-based metrics port, 1–65535 (`PUSHSTATS_PORT`). @defaultValue 8125 */
  readonly pushStatsPort: number;
  /** Push-based metrics transport: tcp, udp, udp4 or udp6 (`PUSHSTATS_PROTOCOL`). @defaultValue "tcp" */
  readonly pushStatsProtocol: PushStatsProtocol;
  /** Tagging variant of the push sink, sent over UDP (`USE_TAGGED_PUSHSTATS`). @defaultValue false */
  readonly useTaggedPushStats: boolean;
  /**
   * Rewrite rules of the tagged sink, in priority order, named by `TAGGED_PUSHSTATS_MOGRIFIERS`
   * (or `USE_TAGGED_PUSHSTATS_MOGRIFIERS`). Read and checked only while the tagged sink is the
   * one in use; empty otherwise. @defaultValue []
   */
  readonly taggedPushStatsMogrifiers: readonly TaggedPushStatsMogrifier[];
  /** Pull-based metrics exporter (`USE_PULLSTATS`). @defaultValue false */
  readonly usePullStats: boolean;
  /** Listen address of the exporter (`PULLSTATS_ADDR`). @defaultValue ":9090" */
  readonly pullStatsAddr: string;
  /** HTTP path of the exporter (`PULLSTATS_PATH`). @defaultValue "/metrics" */
  readonly pullStatsPath: string;
  /** Mapping file replacing the built-in mapping; "" uses the built-in one (`PULLSTATS_MAPPER_YAML`). @defaultValue "" */
  readonly pullStatsMapperYaml: string;
  /**
   * Keep `response_time` in milliseconds in the built-in mapping
   * (`PULLSTATS_RESPONSE_TIME_AS_MILLISECONDS`). @defaultValue false
   */
  readonly pullStatsResponseTimeAsMilliseconds: boolean;

  // --- tracing ---------------------------------------------------------------------------------
  /** Export OTLP trace spans; exactly `true` or `false` (`TRACING_ENABLED`). @defaultValue false */
  readonly tracingEnabled: boolean;
  /** OTLP transport, `http` (also for "") or `grpc` (`TRACING_EXPORTER_PROTOCOL`). @defaultValue "http" */
  readonly tracingExporterProtocol: TracingExporterProtocol;
  /** `service.name` resource attribute (`TRACING_SERVICE_NAME`). @defaultValue "RateLimit" */
  readonly tracingServiceName: string;
  /** `service.namespace` resource attribute (`TRACING_SERVICE_NAMESPACE`). @defaultValue "" */
  readonly tracingServiceNamespace: string;
  /**
   * `service.instance.id` resource attribute; unset or "" gives a random version-4 UUID per
   * load (`TRACING_SERVICE_INSTANCE_ID`).
   */
  readonly tracingServiceInstanceId: string;
  /** Fraction of root traces sampled, 0–1 (`TRACING_SAMPLING_RATE`). @defaultValue 1 */
  readonly tracingSamplingRatio: number;
}

/**
 * The default of every setting, used when its variable is unset (a variable set to "" is parsed,
 * not defaulted). `statsSink` is derived, not read, so it has no entry here.
 */
export const settingsDefaults: Readonly<Omit<Settings, "statsSink">> =
  deepFreeze({
    host: "0.0.0.0", // HTTP listener host
    port: 8080, // TCP port
    debugHost: "0.0.0.0", // debug listener host
    debugPort: 6070, // TCP port
    grpcHost: "0.0.0.0", // gRPC listener host
    grpcPort: 8081, // TCP port
    grpcUds: "", // unix socket path; "" = use host and port
    grpcMaxConnectionAgeMs: 24 * 60 * 60 * 1000, // ms (24h)
    grpcMaxConnectionAgeGraceMs: 60 * 60 * 1000, // ms (1h)
    grpcServerUseTls: false, // flag
    grpcServerTlsCert: "", // file path
    grpcServerTlsKey: "", // file path
    grpcClientTlsCacert: "", // file path; "" = no client certificates
    grpcClientTlsSan: "", // DNS name
    logLevel: "warn", // pino level (reference default WARN)
    logFormat: "text", // text | json
    configType: "FILE", // FILE | GRPC_XDS_SOTW
    forceStartWithoutInitialConfig: false, // flag
    runtimeRoot: "/srv/runtime_data/current", // directory path
    runtimeSubdirectory: "", // path below the root
    runtimeAppDirectory: "config", // directory name
    runtimeIgnoreDotFiles: false, // flag
    runtimeWatchRoot: true, // flag
    mergeDomainConfig: false, // flag
    xdsNodeId: "default", // node id
    xdsNodeMetadata: {}, // string fields
    xdsServerUrl: "localhost:18000", // host:port
    xdsServerConnectRetryIntervalMs: 3 * 1000, // ms (3s)
    xdsClientAdditionalHeaders: {}, // gRPC metadata
    xdsServerUseTls: false, // flag
    xdsClientTlsCert: "", // file path
    xdsClientTlsKey: "", // file path
    xdsServerTlsCacert: "", // file path
    xdsServerTlsSan: "", // DNS name
    xdsClientBackoffInitialIntervalMs: 10 * 1000, // ms (10s)
    xdsClientBackoffMaxIntervalMs: 60 * 1000, // ms (60s)
    xdsClientBackoffRandomFactor: 0.5, // multiplier per attempt
    xdsClientBackoffJitter: true, // flag
    xdsClientMaxMsgSizeBytes: 0, // bytes; 0 = gRPC default (4 MiB)
    backendType: "kv", // kv | mc | memory
    cacheKeyPrefix: "", // text
    expirationJitterMaxSeconds: 300, // seconds
    workers: 1, // processes
    localCacheSizeBytes: 0, // bytes; 0 = disabled
    nearLimitRatio: 0.8, // ratio 0..1
    stopCacheKeyIncrementWhenOverlimit: false, // flag
    shadowMode: false, // flag
    quotaMode: false, // flag
    responseDynamicMetadata: false, // flag
    healthyWithAtLeastOneConfigLoaded: false, // flag
    limitResponseHeadersEnabled: false, // flag
    limitLimitHeader: "RateLimit-Limit", // header name
    limitRemainingHeader: "RateLimit-Remaining", // header name
    limitResetHeader: "RateLimit-Reset", // header name
    kvSocketType: "unix", // tcp | unix
    kvType: "single", // single | sentinel | cluster
    kvUrl: "/var/run/nutcracker/ratelimit.sock", // address or socket path
    kvPoolSize: 10, // connections
    kvTimeoutMs: 10 * 1000, // ms (10s)
    kvPoolOnEmptyBehavior: "CREATE", // CREATE | ERROR | WAIT (spec default)
    kvPoolOnEmptyWaitMs: 1000, // ms (1s)
    kvPipelineWindowMs: 0, // ms; 0 = flush each write
    kvPipelineLimit: 0, // commands; deprecated
    kvClusterPipelineParallelism: 1, // pipelines in parallel
    kvTls: false, // flag
    kvTlsClientCert: "", // file path
    kvTlsClientKey: "", // file path
    kvTlsCacert: "", // file path
    kvTlsSkipHostnameVerification: false, // flag
    kvAuth: "", // secret
    kvSentinelAuth: "", // secret
    kvHealthCheckActiveConnection: false, // flag
    kvStartupInitialIntervalMs: 1000, // ms (1s)
    kvStartupMaxIntervalMs: 30 * 1000, // ms (30s)
    kvStartupMaxElapsedTimeMs: 0, // ms; 0 = retry forever
    kvPerSecond: false, // flag
    kvPerSecondSocketType: "unix", // tcp | unix
    kvPerSecondType: "single", // single | sentinel | cluster
    kvPerSecondUrl: "/var/run/nutcracker/ratelimitpersecond.sock", // address or socket path
    kvPerSecondPoolSize: 10, // connections
    kvPerSecondTimeoutMs: 10 * 1000, // ms (10s)
    kvPerSecondPoolOnEmptyBehavior: "CREATE", // CREATE | ERROR | WAIT
    kvPerSecondPoolOnEmptyWaitMs: 1000, // ms (1s)
    kvPerSecondPipelineWindowMs: 0, // ms
    kvPerSecondPipelineLimit: 0, // commands; deprecated
    kvPerSecondClusterPipelineParallelism: 1, // pipelines in parallel
    kvPerSecondTls: false, // flag
    kvPerSecondAuth: "", // secret
    kvPerSecondSentinelAuth: "", // secret
    mcHostPort: [], // host:port list
    mcSrv: "", // SRV record name
    mcSrvRefreshMs: 0, // ms; 0 = never
    mcMaxIdleConns: 2, // connections per node
    mcTls: false, // flag
    mcTlsClientCert: "", // file path
    mcTlsClientKey: "", // file path
    mcTlsCacert: "", // file path
    mcTlsSkipHostnameVerification: false, // flag
    disableStats: false, // flag
    statsFlushIntervalMs: 10 * 1000, // ms (10s)
    extraTags: {}, // tag name -> value
    usePushStats: true, // flag (reference default: on)
    pushStatsHost: "localhost", // host
    pushStatsPort: 8125, // UDP/TCP port
    pushStatsProtocol: "tcp", // tcp | udp | udp4 | udp6
    useTaggedPushStats: false, // flag
    taggedPushStatsMogrifiers: [], // rules
    usePullStats: false, // flag
    pullStatsAddr: ":9090", // listen address
    pullStatsPath: "/metrics", // URL path
    pullStatsMapperYaml: "", // file path; "" = built-in mapping
    pullStatsResponseTimeAsMilliseconds: false, // flag
    tracingEnabled: false, // flag
    tracingExporterProtocol: "http", // http | grpc
    tracingServiceName: "RateLimit", // text
    tracingServiceNamespace: "", // text
    tracingServiceInstanceId: "", // text; "" = random UUID v4 at load
    tracingSamplingRatio: 1, // ratio 0..1
  });

/** Options of {@link loadSettings}. */
export interface LoadSettingsOptions {
  /**
   * Source of `TRACING_SERVICE_INSTANCE_ID` when it is unset or "".
   * @defaultValue `randomUUID` of `node:crypto` (version-4 UUID)
   */
  readonly randomUUID?: () => string;
}

/** Result of {@link loadSettings}. */
export interface LoadedSettings {
  /** The parsed settings, deep-frozen. */
  readonly settings: Settings;
  /**
   * Human-readable notes for the log: settings for features this build does not implement yet
   * (see `notImplementedSettings`) and deprecated settings. Not errors.
   */
  readonly warnings: string[];
}

// ---------------------------------------------------------------------------------------------
// Reading

const listenPort: IntegerRange = { min: 0, max: 65_535 };
const remotePort: IntegerRange = { min: 1, max: 65_535 };

type Parse<T> = (text: string) => T;

const nonNegativeDurationMs: Parse<number> = (text) =>
  parseDurationMs(text, "non-negative");
const positiveDurationMs: Parse<number> = (text) =>
  parseDurationMs(text, "positive");

/** Picks a value from a fixed table of accepted words, after `fold` (e.g. lower-casing). */
function oneOf<T>(
  words: ReadonlyMap<string, T>,
  expected: string,
  fold: (text: string) => string = (text) => text,
): Parse<T> {
  return (text) => {
    const value = words.get(fold(text));
    if (value === undefined) throw new EnvParseError(expected);
    return value;
  };
}

const lowerCase = (text: string): string => text.toLowerCase();
const upperCase = (text: string): string => text.toUpperCase();

const parseLogLevel = oneOf<LogLevel>(
  new Map<string, LogLevel>([
    ["panic", "fatal"],
    ["fatal", "fatal"],
    ["error", "error"],
    ["warn", "warn"],
    ["warning", "warn"],
    ["info", "info"],
    ["debug", "debug"],
    ["trace", "trace"],
  ]),
  "one of panic, fatal, error, warn, warning, info, debug, trace (any case)",
  lowerCase,
);
const parseLogFormat: Parse<LogFormat> = (text) =>
  text.toLowerCase() === "json" ? "json" : "text";
const parseConfigType = oneOf<ConfigType>(
  new Map<string, ConfigType>([
    ["FILE", "FILE"],
    ["GRPC_XDS_SOTW", "GRPC_XDS_SOTW"],
  ]),
  "FILE or GRPC_XDS_SOTW",
);
const parseBackendType = oneOf<BackendType>(
  new Map<string, BackendType>([
    ["", "kv"],
    ["kv", "kv"],
    ["mc", "mc"],
    ["memory", "memory"],
  ]),
  "kv, mc or memory",
);
const parseKvType = oneOf<KvType>(
  new Map<string, KvType>([
    ["single", "single"],
    ["sentinel", "sentinel"],
    ["cluster", "cluster"],
  ]),
  "single, sentinel or cluster (any case)",
  lowerCase,
);
const parseKvSocketType = oneOf<KvSocketType>(
  new Map<string, KvSocketType>([
    ["tcp", "tcp"],
    ["unix", "unix"],
  ]),
  "tcp or unix",
);
const parseKvPoolOnEmptyBehavior = oneOf<KvPoolOnEmptyBehavior>(
  new Map<string, KvPoolOnEmptyBehavior>([
    ["CREATE", "CREATE"],
    ["ERROR", "ERROR"],
    ["WAIT", "WAIT"],
  ]),
  "CREATE, ERROR or WAIT (any case)",
  upperCase,
);
const parsePushStatsProtocol = oneOf<PushStatsProtocol>(
  new Map<string, PushStatsProtocol>([
    ["tcp", "tcp"],
    ["udp", "udp"],
    ["udp4", "udp4"],
    ["udp6", "udp6"],
  ]),
  "tcp, udp, udp4 or udp6",
);
const parseTracingEnabled = oneOf<boolean>(
  new Map([
    ["true", true],
    ["false", false],
  ]),
  "true or false",
);
const parseTracingExporterProtocol = oneOf<TracingExporterProtocol>(
  new Map<string, TracingExporterProtocol>([
    ["", "http"],
    ["http", "http"],
    ["grpc", "grpc"],
  ]),
  "http or grpc",
);

/** `k=v,k2=v2`, split at the first `=`; items without `=` are skipped (reference behaviour). */
function parseNodeMetadata(text: string): Record<string, string> {
  const entries: [string, string][] = [];
  for (const item of text.split(",")) {
    const at = item.indexOf("=");
    if (at >= 0) entries.push([item.slice(0, at), item.slice(at + 1)]);
  }
  return Object.fromEntries(entries);
}

/** Hides `user:password@` in `scheme://user:password@host` items of a comma-separated URL list. */
function maskUrlCredentials(url: string): string {
  return url
    .split(",")
    .map((item) =>
      item.replace(/^([a-z][a-z0-9+.-]*:\/\/)[^@/]*@/i, "$1*****@"),
    )
    .join(",");
}

const quote = (text: string): string => JSON.stringify(text);

/** Reads variables, collecting every problem instead of stopping at the first. */
interface EnvReader {
  /** Problem lines so far, in the order found. */
  readonly problems: readonly string[];
  /** Raw text of a variable; undefined when unset. */
  text(name: string): string | undefined;
  isSet(name: string): boolean;
  /** True when none of the variables failed to parse, so combination checks can trust them. */
  allValid(...names: string[]): boolean;
  /**
   * Parses a set variable, or returns the fallback when it is unset. On a parse failure the
   * problem is recorded and the fallback returned, so reading can go on.
   * @param secret - keep the value out of the problem text
   */
  read<T>(name: string, fallback: T, parse: Parse<T>, secret?: boolean): T;
  string(name: string, fallback: string): string;
  bool(name: string, fallback: boolean): boolean;
  integer(name: string, fallback: number, range: IntegerRange): number;
  /** Records a problem; the named variables count as failed for later checks. */
  problem(line: string, ...failedNames: string[]): void;
}

function createEnvReader(env: SettingsEnv): EnvReader {
  const problems: string[] = [];
  const failed = new Set<string>();
  const read = <T>(
    name: string,
    fallback: T,
    parse: Parse<T>,
    secret = false,
  ): T => {
    const text = env[name];
    if (text === undefined) return fallback;
    try {
      return parse(text);
    } catch (err) {
      if (!(err instanceof EnvParseError)) throw err;
      failed.add(name);
      problems.push(
        secret
          ? `${name} (value hidden): expected ${err.expected}`
          : `${name}=${quote(text)}: ${err.message}`,
      );
      return fallback;
    }
  };
  return {
    problems,
    text: (name) => env[name],
    isSet: (name) => env[name] !== undefined,
    allValid: (...names) => names.every((name) => !failed.has(name)),
    read,
    string: (name, fallback) => read(name, fallback, (text) => text),
    bool: (name, fallback) => read(name, fallback, parseBool),
    integer: (name, fallback, range) =>
      read(name, fallback, (text) => parseInteger(text, range)),
    problem(line, ...failedNames) {
      problems.push(line);
      for (const name of failedNames) failed.add(name);
    },
  };
}

/**
 * Returns the first of two spellings of one variable that is set. Both set to different values
 * is a problem (which one was meant is unknown); both set alike is fine.
 */
function readEitherSpelling(
  reader: EnvReader,
  primary: string,
  alias: string,
): { readonly name: string; readonly text: string } | undefined {
  const primaryText = reader.text(primary);
  const aliasText = reader.text(alias);
  if (
    primaryText !== undefined &&
    aliasText !== undefined &&
    primaryText !== aliasText
  ) {
    reader.problem(
      `${primary}=${quote(primaryText)} and ${alias}=${quote(aliasText)} disagree: expected only one of these spellings, or both with the same value`,
      primary,
      alias,
    );
    return undefined;
  }
  if (primaryText !== undefined) return { name: primary, text: primaryText };
  if (aliasText !== undefined) return { name: alias, text: aliasText };
  return undefined;
}

const mogrifierListName = "TAGGED_PUSHSTATS_MOGRIFIERS";
const mogrifierListAlias = "USE_TAGGED_PUSHSTATS_MOGRIFIERS";

/**
 * Reads the tagged sink's rewrite rules. Checks mirror the reference's startup failures
 * (behavior.md §10.5): PATTERN and NAME required, PATTERN must compile, TAGS is a `k:v` map
 * whose keys and values are non-empty.
 */
function readMogrifiers(reader: EnvReader): TaggedPushStatsMogrifier[] {
  const list = readEitherSpelling(
    reader,
    mogrifierListName,
    mogrifierListAlias,
  );
  const names = list === undefined ? [] : parseList(list.text);
  const mogrifiers: TaggedPushStatsMogrifier[] = [];
  for (const name of names) {
    const variable = (part: string): string =>
      `${mogrifierListName}_${name}_${part}`;
    const alias = (part: string): string =>
      `TAGGED_PUSHSTATS_MOGRIFIER_${name}_${part}`;
    const context = `for mogrifier ${quote(name)}`;

    let valid = true;
    const pattern = readEitherSpelling(
      reader,
      variable("PATTERN"),
      alias("PATTERN"),
    );
    if (pattern === undefined || pattern.text === "") {
      if (reader.allValid(variable("PATTERN"))) {
        reader.problem(
          `${variable("PATTERN")} is not set: expected a regular expression ${context}`,
        );
      }
      valid = false;
    } else {
      try {
        new RegExp(pattern.text);
      } catch (err) {
        const reason = err instanceof SyntaxError ? err.message : String(err);
        reader.problem(
          `${pattern.name}=${quote(pattern.text)}: ${reason}; expected a regular expression ${context}`,
        );
        valid = false;
      }
    }

    const metricName = readEitherSpelling(
      reader,
      variable("NAME"),
      alias("NAME"),
    );
    if (metricName === undefined || metricName.text === "") {
      if (reader.allValid(variable("NAME"))) {
        reader.problem(
          `${variable("NAME")} is not set: expected a metric name ${context}`,
        );
      }
      valid = false;
    }

    let tags: Record<string, string> = {};
    const tagsText = readEitherSpelling(
      reader,
      variable("TAGS"),
      alias("TAGS"),
    );
    if (tagsText !== undefined) {
      tags = reader.read(tagsText.name, {}, parseMap);
      for (const [tagName, tagValue] of Object.entries(tags)) {
        if (tagName === "" || tagValue === "") {
          reader.problem(
            `${tagsText.name}=${quote(tagsText.text)}: tag ${quote(`${tagName}:${tagValue}`)} has an empty ${tagName === "" ? "name" : "value"}; expected name:value pairs ${context}`,
          );
          valid = false;
        }
      }
    }

    if (valid && pattern !== undefined && metricName !== undefined) {
      mogrifiers.push({
        name,
        pattern: pattern.text,
        metricName: metricName.text,
        tags,
      });
    }
  }
  return mogrifiers;
}

const srvName = /^_(.+?)\._(.+?)\.(.+)$/;

/** Combination checks: each runs only when the variables it involves parsed cleanly. */
function checkCombinations(reader: EnvReader, settings: Settings): void {
  // Each worker would serve its own share of the counters on the shared pull port.
  if (
    settings.workers > 1 &&
    settings.usePullStats &&
    !settings.disableStats &&
    reader.allValid("WORKERS", "USE_PULLSTATS")
  ) {
    reader.problem(
      `WORKERS=${settings.workers} with USE_PULLSTATS=true: each worker process would answer scrapes with its own counters; use a push sink (USE_PUSHSTATS or USE_TAGGED_PUSHSTATS, which add up across processes) or WORKERS=1`,
    );
  }
  // Workers each keep their own in-process counters: only a shared backend counts right.
  if (
    settings.workers > 1 &&
    settings.backendType === "memory" &&
    reader.allValid("WORKERS", "BACKEND_TYPE")
  ) {
    reader.problem(
      `WORKERS=${settings.workers} with BACKEND_TYPE=memory: the memory backend keeps counters in one process; use WORKERS=1 or a shared backend (kv or mc)`,
    );
  }
  // Statistics sinks: at most one, unless statistics are disabled (behavior.md §10.1).
  const sinkSwitches = [
    ["USE_TAGGED_PUSHSTATS", settings.useTaggedPushStats],
    ["USE_PUSHSTATS", settings.usePushStats],
    ["USE_PULLSTATS", settings.usePullStats],
  ] as const;
  if (
    !settings.disableStats &&
    reader.allValid("DISABLE_STATS", ...sinkSwitches.map(([name]) => name))
  ) {
    const enabled = sinkSwitches.filter(([, on]) => on).map(([name]) => name);
    if (enabled.length > 1) {
      const pushByDefault =
        enabled.includes("USE_PUSHSTATS") && !reader.isSet("USE_PUSHSTATS");
      reader.problem(
        `${enabled.map((name) => `${name}=true`).join(" and ")}${pushByDefault ? " (USE_PUSHSTATS is true by default)" : ""}: ` +
          "expected at most one statistics sink; set the others to false" +
          (pushByDefault ? ", e.g. USE_PUSHSTATS=false" : ""),
      );
    }
  }

  // gRPC TLS.
  if (reader.allValid("GRPC_SERVER_USE_TLS")) {
    if (settings.grpcClientTlsCacert !== "" && !settings.grpcServerUseTls) {
      reader.problem(
        `GRPC_CLIENT_TLS_CACERT=${quote(settings.grpcClientTlsCacert)} needs GRPC_SERVER_USE_TLS=true: client certificates are only checked over TLS`,
      );
    }
    if (settings.grpcServerUseTls) {
      const missing = [
        ["GRPC_SERVER_TLS_CERT", settings.grpcServerTlsCert],
        ["GRPC_SERVER_TLS_KEY", settings.grpcServerTlsKey],
      ]
        .filter(([, path]) => path === "")
        .map(([name]) => name);
      if (missing.length > 0) {
        reader.problem(
          `GRPC_SERVER_USE_TLS=true needs ${missing.join(" and ")}: expected certificate and key file paths`,
        );
      }
    }
  }

  // Key-value store: a sentinel address lists the master name and at least one sentinel.
  const checkSentinelUrl = (
    typeName: string,
    urlName: string,
    type: KvType,
    url: string,
  ): void => {
    if (
      type === "sentinel" &&
      reader.allValid(typeName) &&
      url.split(",").length < 2
    ) {
      reader.problem(
        `${urlName}=${quote(maskUrlCredentials(url))}: expected <master name>,<sentinel host:port>[,…] (at least 2 items) with ${typeName}=sentinel`,
      );
    }
  };
  if (settings.backendType === "kv" && reader.allValid("BACKEND_TYPE")) {
    checkSentinelUrl("KV_TYPE", "KV_URL", settings.kvType, settings.kvUrl);
    if (settings.kvPerSecond) {
      checkSentinelUrl(
        "KV_PERSECOND_TYPE",
        "KV_PERSECOND_URL",
        settings.kvPerSecondType,
        settings.kvPerSecondUrl,
      );
    }
  }

  // Memcached protocol: exactly one node source (behavior.md §9.3, §9.4).
  if (settings.backendType === "mc" && reader.allValid("BACKEND_TYPE")) {
    const hasHosts = settings.mcHostPort.length > 0;
    const hasSrv = settings.mcSrv !== "";
    if (hasHosts && hasSrv) {
      reader.problem(
        `MC_HOST_PORT=${quote(settings.mcHostPort.join(","))} and MC_SRV=${quote(settings.mcSrv)} are both set: expected only one of them with BACKEND_TYPE=mc`,
      );
    } else if (!hasHosts && !hasSrv) {
      reader.problem(
        "MC_HOST_PORT and MC_SRV are both empty: expected one of them with BACKEND_TYPE=mc",
      );
    } else if (hasSrv && !srvName.test(settings.mcSrv)) {
      reader.problem(
        `MC_SRV=${quote(settings.mcSrv)}: expected an SRV record name _service._proto.name`,
      );
    }
  }
}

function deriveStatsSink(settings: Omit<Settings, "statsSink">): StatsSinkKind {
  if (settings.disableStats) return "none";
  if (settings.useTaggedPushStats) return "tagged-pushstats";
  if (settings.usePushStats) return "pushstats";
  if (settings.usePullStats) return "pullstats";
  return "log";
}

function deepFreeze<T>(value: T): T {
  if (typeof value === "object" && value !== null && !Object.isFrozen(value)) {
    for (const child of Object.values(value)) deepFreeze(child);
    Object.freeze(value);
  }
  return value;
}

/**
 * Parses the service's settings from an environment. Pure: reads only `env` (never
 * `process.env`), so tests pass plain objects. An unset variable takes its default from
 * {@link settingsDefaults}; a set one is parsed with the reference's rules (see
 * `env-parsers.ts`), so "" is invalid for flags, numbers and durations.
 *
 * @param env - variable name → value; `src/main.ts` passes `process.env`
 * @returns the deep-frozen settings, and warnings about settings this build ignores
 * @throws {@link SettingsError} listing every invalid variable and invalid combination at once
 */
export function loadSettings(
  env: SettingsEnv,
  options: LoadSettingsOptions = {},
): LoadedSettings {
  const r = createEnvReader(env);
  const d = settingsDefaults;

  const base: Omit<Settings, "statsSink" | "taggedPushStatsMogrifiers"> = {
    host: r.string("HOST", d.host),
    port: r.integer("PORT", d.port, listenPort),
    debugHost: r.string("DEBUG_HOST", d.debugHost),
    debugPort: r.integer("DEBUG_PORT", d.debugPort, listenPort),
    grpcHost: r.string("GRPC_HOST", d.grpcHost),
    grpcPort: r.integer("GRPC_PORT", d.grpcPort, listenPort),
    grpcUds: r.string("GRPC_UDS", d.grpcUds),
    grpcMaxConnectionAgeMs: r.read(
      "GRPC_MAX_CONNECTION_AGE",
      d.grpcMaxConnectionAgeMs,
      nonNegativeDurationMs,
    ),
    grpcMaxConnectionAgeGraceMs: r.read(
      "GRPC_MAX_CONNECTION_AGE_GRACE",
      d.grpcMaxConnectionAgeGraceMs,
      nonNegativeDurationMs,
    ),
    grpcServerUseTls: r.bool("GRPC_SERVER_USE_TLS", d.grpcServerUseTls),
    grpcServerTlsCert: r.string("GRPC_SERVER_TLS_CERT", d.grpcServerTlsCert),
    grpcServerTlsKey: r.string("GRPC_SERVER_TLS_KEY", d.grpcServerTlsKey),
    grpcClientTlsCacert: r.string(
      "GRPC_CLIENT_TLS_CACERT",
      d.grpcClientTlsCacert,
    ),
    grpcClientTlsSan: r.string("GRPC_CLIENT_TLS_SAN", d.grpcClientTlsSan),

    logLevel: r.read("LOG_LEVEL", d.logLevel, parseLogLevel),
    logFormat: r.read("LOG_FORMAT", d.logFormat, parseLogFormat),

    configType: r.read("CONFIG_TYPE", d.configType, parseConfigType),
    forceStartWithoutInitialConfig: r.bool(
      "FORCE_START_WITHOUT_INITIAL_CONFIG",
      d.forceStartWithoutInitialConfig,
    ),
    runtimeRoot: r.string("RUNTIME_ROOT", d.runtimeRoot),
    runtimeSubdirectory: r.string(
      "RUNTIME_SUBDIRECTORY",
      d.runtimeSubdirectory,
    ),
    runtimeAppDirectory: r.string(
      "RUNTIME_APPDIRECTORY",
      d.runtimeAppDirectory,
    ),
    runtimeIgnoreDotFiles: r.bool(
      "RUNTIME_IGNOREDOTFILES",
      d.runtimeIgnoreDotFiles,
    ),
    runtimeWatchRoot: r.bool("RUNTIME_WATCH_ROOT", d.runtimeWatchRoot),
    mergeDomainConfig: r.bool("MERGE_DOMAIN_CONFIG", d.mergeDomainConfig),

    xdsNodeId: r.string("CONFIG_GRPC_XDS_NODE_ID", d.xdsNodeId),
    xdsNodeMetadata: r.read(
      "CONFIG_GRPC_XDS_NODE_METADATA",
      d.xdsNodeMetadata,
      parseNodeMetadata,
    ),
    xdsServerUrl: r.string("CONFIG_GRPC_XDS_SERVER_URL", d.xdsServerUrl),
    xdsServerConnectRetryIntervalMs: r.read(
      "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
      d.xdsServerConnectRetryIntervalMs,
      nonNegativeDurationMs,
    ),
    xdsClientAdditionalHeaders: r.read(
      "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
      d.xdsClientAdditionalHeaders,
      parseMap,
      true,
    ),
    xdsServerUseTls: r.bool(
      "CONFIG_GRPC_XDS_SERVER_USE_TLS",
      d.xdsServerUseTls,
    ),
    xdsClientTlsCert: r.string(
      "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
      d.xdsClientTlsCert,
    ),
    xdsClientTlsKey: r.string(
      "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
      d.xdsClientTlsKey,
    ),
    xdsServerTlsCacert: r.string(
      "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
      d.xdsServerTlsCacert,
    ),
    xdsServerTlsSan: r.string(
      "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
      d.xdsServerTlsSan,
    ),
    xdsClientBackoffInitialIntervalMs: r.read(
      "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
      d.xdsClientBackoffInitialIntervalMs,
      nonNegativeDurationMs,
    ),
    xdsClientBackoffMaxIntervalMs: r.read(
      "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
      d.xdsClientBackoffMaxIntervalMs,
      nonNegativeDurationMs,
    ),
    xdsClientBackoffRandomFactor: r.read(
      "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
      d.xdsClientBackoffRandomFactor,
      (text) => parseFloat(text, { min: 0, max: Number.POSITIVE_INFINITY }),
    ),
    xdsClientBackoffJitter: r.bool(
      "XDS_CLIENT_BACKOFF_JITTER",
      d.xdsClientBackoffJitter,
    ),
    xdsClientMaxMsgSizeBytes: r.integer(
      "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
      d.xdsClientMaxMsgSizeBytes,
      nonNegativeInteger,
    ),

    backendType: r.read("BACKEND_TYPE", d.backendType, parseBackendType),
    cacheKeyPrefix: r.string("CACHE_KEY_PREFIX", d.cacheKeyPrefix),
    expirationJitterMaxSeconds: r.integer(
      "EXPIRATION_JITTER_MAX_SECONDS",
      d.expirationJitterMaxSeconds,
      anyInteger,
    ),
    workers: r.integer("WORKERS", d.workers, { min: 1, max: 64 }),
    localCacheSizeBytes: r.integer(
      "LOCAL_CACHE_SIZE_IN_BYTES",
      d.localCacheSizeBytes,
      nonNegativeInteger,
    ),
    nearLimitRatio: r.read("NEAR_LIMIT_RATIO", d.nearLimitRatio, parseRatio),
    stopCacheKeyIncrementWhenOverlimit: r.bool(
      "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
      d.stopCacheKeyIncrementWhenOverlimit,
    ),
    shadowMode: r.bool("SHADOW_MODE", d.shadowMode),
    quotaMode: r.bool("QUOTA_MODE", d.quotaMode),
    responseDynamicMetadata: r.bool(
      "RESPONSE_DYNAMIC_METADATA",
      d.responseDynamicMetadata,
    ),
    healthyWithAtLeastOneConfigLoaded: r.bool(
      "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
      d.healthyWithAtLeastOneConfigLoaded,
    ),
    limitResponseHeadersEnabled: r.bool(
      "LIMIT_RESPONSE_HEADERS_ENABLED",
      d.limitResponseHeadersEnabled,
    ),
    limitLimitHeader: r.string("LIMIT_LIMIT_HEADER", d.limitLimitHeader),
    limitRemainingHeader: r.string(
      "LIMIT_REMAINING_HEADER",
      d.limitRemainingHeader,
    ),
    limitResetHeader: r.string("LIMIT_RESET_HEADER", d.limitResetHeader),

    kvSocketType: r.read("KV_SOCKET_TYPE", d.kvSocketType, parseKvSocketType),
    kvType: r.read("KV_TYPE", d.kvType, parseKvType),
    kvUrl: r.string("KV_URL", d.kvUrl),
    kvPoolSize: r.integer("KV_POOL_SIZE", d.kvPoolSize, positiveInteger),
    kvTimeoutMs: r.read("KV_TIMEOUT", d.kvTimeoutMs, nonNegativeDurationMs),
    kvPoolOnEmptyBehavior: r.read(
      "KV_POOL_ON_EMPTY_BEHAVIOR",
      d.kvPoolOnEmptyBehavior,
      parseKvPoolOnEmptyBehavior,
    ),
    kvPoolOnEmptyWaitMs: r.read(
      "KV_POOL_ON_EMPTY_WAIT_DURATION",
      d.kvPoolOnEmptyWaitMs,
      nonNegativeDurationMs,
    ),
    kvPipelineWindowMs: r.read(
      "KV_PIPELINE_WINDOW",
      d.kvPipelineWindowMs,
      nonNegativeDurationMs,
    ),
    kvPipelineLimit: r.integer(
      "KV_PIPELINE_LIMIT",
      d.kvPipelineLimit,
      anyInteger,
    ),
    kvClusterPipelineParallelism: r.integer(
      "KV_CLUSTER_PIPELINE_PARALLELISM",
      d.kvClusterPipelineParallelism,
      nonNegativeInteger,
    ),
    kvTls: r.bool("KV_TLS", d.kvTls),
    kvTlsClientCert: r.string("KV_TLS_CLIENT_CERT", d.kvTlsClientCert),
    kvTlsClientKey: r.string("KV_TLS_CLIENT_KEY", d.kvTlsClientKey),
    kvTlsCacert: r.string("KV_TLS_CACERT", d.kvTlsCacert),
    kvTlsSkipHostnameVerification: r.bool(
      "KV_TLS_SKIP_HOSTNAME_VERIFICATION",
      d.kvTlsSkipHostnameVerification,
    ),
    kvAuth: r.string("KV_AUTH", d.kvAuth),
    kvSentinelAuth: r.string("KV_SENTINEL_AUTH", d.kvSentinelAuth),
    kvHealthCheckActiveConnection: r.bool(
      "KV_HEALTH_CHECK_ACTIVE_CONNECTION",
      d.kvHealthCheckActiveConnection,
    ),
    kvStartupInitialIntervalMs: r.read(
      "KV_STARTUP_INITIAL_INTERVAL",
      d.kvStartupInitialIntervalMs,
      nonNegativeDurationMs,
    ),
    kvStartupMaxIntervalMs: r.read(
      "KV_STARTUP_MAX_INTERVAL",
      d.kvStartupMaxIntervalMs,
      nonNegativeDurationMs,
    ),
    kvStartupMaxElapsedTimeMs: r.read(
      "KV_STARTUP_MAX_ELAPSED_TIME",
      d.kvStartupMaxElapsedTimeMs,
      nonNegativeDurationMs,
    ),
    kvPerSecond: r.bool("KV_PERSECOND", d.kvPerSecond),
    kvPerSecondSocketType: r.read(
      "KV_PERSECOND_SOCKET_TYPE",
      d.kvPerSecondSocketType,
      parseKvSocketType,
    ),
    kvPerSecondType: r.read(
      "KV_PERSECOND_TYPE",
      d.kvPerSecondType,
      parseKvType,
    ),
    kvPerSecondUrl: r.string("KV_PERSECOND_URL", d.kvPerSecondUrl),
    kvPerSecondPoolSize: r.integer(
      "KV_PERSECOND_POOL_SIZE",
      d.kvPerSecondPoolSize,
      positiveInteger,
    ),
    kvPerSecondTimeoutMs: r.read(
      "KV_PERSECOND_TIMEOUT",
      d.kvPerSecondTimeoutMs,
      nonNegativeDurationMs,
    ),
    kvPerSecondPoolOnEmptyBehavior: r.read(
      "KV_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
      d.kvPerSecondPoolOnEmptyBehavior,
      parseKvPoolOnEmptyBehavior,
    ),
    kvPerSecondPoolOnEmptyWaitMs: r.read(
      "KV_PERSECOND_POOL_ON_EMPTY_WAIT_DURATION",
      d.kvPerSecondPoolOnEmptyWaitMs,
      nonNegativeDurationMs,
    ),
    kvPerSecondPipelineWindowMs: r.read(
      "KV_PERSECOND_PIPELINE_WINDOW",
      d.kvPerSecondPipelineWindowMs,
      nonNegativeDurationMs,
    ),
    kvPerSecondPipelineLimit: r.integer(
      "KV_PERSECOND_PIPELINE_LIMIT",
      d.kvPerSecondPipelineLimit,
      anyInteger,
    ),
    kvPerSecondClusterPipelineParallelism: r.integer(
      "KV_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
      d.kvPerSecondClusterPipelineParallelism,
      nonNegativeInteger,
    ),
    kvPerSecondTls: r.bool("KV_PERSECOND_TLS", d.kvPerSecondTls),
    kvPerSecondAuth: r.string("KV_PERSECOND_AUTH", d.kvPerSecondAuth),
    kvPerSecondSentinelAuth: r.string(
      "KV_PERSECOND_SENTINEL_AUTH",
      d.kvPerSecondSentinelAuth,
    ),

    mcHostPort: r.read("MC_HOST_PORT", d.mcHostPort, parseList),
    mcSrv: r.string("MC_SRV", d.mcSrv),
    mcSrvRefreshMs: r.read(
      "MC_SRV_REFRESH",
      d.mcSrvRefreshMs,
      nonNegativeDurationMs,
    ),
    mcMaxIdleConns: r.integer(
      "MC_MAX_IDLE_CONNS",
      d.mcMaxIdleConns,
      nonNegativeInteger,
    ),
    mcTls: r.bool("MC_TLS", d.mcTls),
    mcTlsClientCert: r.string("MC_TLS_CLIENT_CERT", d.mcTlsClientCert),
    mcTlsClientKey: r.string("MC_TLS_CLIENT_KEY", d.mcTlsClientKey),
    mcTlsCacert: r.string("MC_TLS_CACERT", d.mcTlsCacert),
    mcTlsSkipHostnameVerification: r.bool(
      "MC_TLS_SKIP_HOSTNAME_VERIFICATION",
      d.mcTlsSkipHostnameVerification,
    ),

    disableStats: r.bool("DISABLE_STATS", d.disableStats),
    statsFlushIntervalMs: r.read(
      "STATS_FLUSH_INTERVAL",
      d.statsFlushIntervalMs,
      positiveDurationMs,
    ),
    extraTags: r.read("EXTRA_TAGS", d.extraTags, parseMap),
    usePushStats: r.bool("USE_PUSHSTATS", d.usePushStats),
    pushStatsHost: r.string("PUSHSTATS_HOST", d.pushStatsHost),
    pushStatsPort: r.integer("PUSHSTATS_PORT", d.pushStatsPort, remotePort),
    pushStatsProtocol: r.read(
      "PUSHSTATS_PROTOCOL",
      d.pushStatsProtocol,
      parsePushStatsProtocol,
    ),
    useTaggedPushStats: r.bool("USE_TAGGED_PUSHSTATS", d.useTaggedPushStats),
    usePullStats: r.bool("USE_PULLSTATS", d.usePullStats),
    pullStatsAddr: r.string("PULLSTATS_ADDR", d.pullStatsAddr),
    pullStatsPath: r.string("PULLSTATS_PATH", d.pullStatsPath),
    pullStatsMapperYaml: r.string(
      "PULLSTATS_MAPPER_YAML",
      d.pullStatsMapperYaml,
    ),
    pullStatsResponseTimeAsMilliseconds: r.bool(
      "PULLSTATS_RESPONSE_TIME_AS_MILLISECONDS",
      d.pullStatsResponseTimeAsMilliseconds,
    ),

    tracingEnabled: r.read(
      "TRACING_ENABLED",
      d.tracingEnabled,
      parseTracingEnabled,
    ),
    tracingExporterProtocol: r.read(
      "TRACING_EXPORTER_PROTOCOL",
      d.tracingExporterProtocol,
      parseTracingExporterProtocol,
    ),
    tracingServiceName: r.string("TRACING_SERVICE_NAME", d.tracingServiceName),
    tracingServiceNamespace: r.string(
      "TRACING_SERVICE_NAMESPACE",
      d.tracingServiceNamespace,
    ),
    tracingServiceInstanceId: r.string(
      "TRACING_SERVICE_INSTANCE_ID",
      d.tracingServiceInstanceId,
    ),
    tracingSamplingRatio: r.read(
      "TRACING_SAMPLING_RATE",
      d.tracingSamplingRatio,
      parseRatio,
    ),
  };

  // "" as well as unset means "generate one", as in the reference.
  const tracingServiceInstanceId =
    base.tracingServiceInstanceId === ""
      ? (options.randomUUID ?? cryptoRandomUUID)()
      : base.tracingServiceInstanceId;
  // The tagged sink's rules are read only when that sink is in use, as in the reference.
  const taggedPushStatsMogrifiers =
    base.useTaggedPushStats && !base.disableStats ? readMogrifiers(r) : [];
  const withMogrifiers = {
    ...base,
    tracingServiceInstanceId,
    taggedPushStatsMogrifiers,
  };
  const settings: Settings = {
    ...withMogrifiers,
    statsSink: deriveStatsSink(withMogrifiers),
  };

  checkCombinations(r, settings);
  if (r.problems.length > 0) throw new SettingsError(r.problems);
  return {
    settings: deepFreeze(settings),
    warnings: settingWarnings(settings, env),
  };
}
