// The key-value store backend (BACKEND_TYPE=kv, Redis protocol), and its optional second
// instance for per-second limits (KV_PERSECOND_*), whose settings mirror the first's.

import {
  anyInteger,
  nonNegativeInteger,
  positiveInteger,
} from "../env-parsers.js";
import { quote } from "../env-reader.js";
import {
  durationMs,
  flag,
  integer,
  lowerCase,
  oneOf,
  text,
  upperCase,
} from "./codecs.js";
import {
  setting,
  settingsGroup,
  type SettingDeclaration,
  type SettingsCheck,
  type SettingsOf,
} from "./define.js";
import type { rateLimiting } from "./rate-limiting.js";

/** Deployment of the key-value store (`KV_TYPE`). */
export type KvType = "single" | "sentinel" | "cluster";
/** How the key-value store is reached for `KV_TYPE=single` (`KV_SOCKET_TYPE`). */
export type KvSocketType = "tcp" | "unix";
/** What a caller does when the key-value connection pool is exhausted (`KV_POOL_ON_EMPTY_BEHAVIOR`). */
export type KvPoolOnEmptyBehavior = "CREATE" | "ERROR" | "WAIT";

const kvType = oneOf<KvType>(
  new Map<string, KvType>([
    ["single", "single"],
    ["sentinel", "sentinel"],
    ["cluster", "cluster"],
  ]),
  "single, sentinel or cluster (any case)",
  { fold: lowerCase, format: upperCase },
);
const kvSocketType = oneOf<KvSocketType>(
  new Map<string, KvSocketType>([
    ["tcp", "tcp"],
    ["unix", "unix"],
  ]),
  "tcp or unix",
);
const kvPoolOnEmptyBehavior = oneOf<KvPoolOnEmptyBehavior>(
  new Map<string, KvPoolOnEmptyBehavior>([
    ["CREATE", "CREATE"],
    ["ERROR", "ERROR"],
    ["WAIT", "WAIT"],
  ]),
  "CREATE, ERROR or WAIT (any case)",
  { fold: upperCase },
);

/** The first (or only) instance. */
const primary = {
  /** Network for `single`: `tcp` or `unix`. */
  kvSocketType: setting({
    env: "KV_SOCKET_TYPE",
    codec: kvSocketType,
    default: "unix",
    meaning: "tcp or unix, for KV_TYPE=single.",
  }),
  /** Deployment, any case of single, sentinel, cluster. */
  kvType: setting({
    env: "KV_TYPE",
    codec: kvType,
    default: "single",
    meaning: "single, sentinel or cluster (any case).",
  }),
  /**
   * Address: `host:port` or socket path (single), `<master>,<sentinel host:port>,…` with at
   * least 2 items (sentinel), `host:port,…` (cluster).
   */
  kvUrl: setting({
    env: "KV_URL",
    codec: text,
    default: "/var/run/nutcracker/ratelimit.sock",
    meaning:
      "Address: host:port or socket path (single), master,host:port,… (sentinel), host:port,… (cluster).",
  }),
  /** Connections in the pool, ≥ 1. */
  kvPoolSize: setting({
    env: "KV_POOL_SIZE",
    codec: integer(positiveInteger),
    default: 10,
    unit: "connections",
    meaning:
      "ioredis multiplexes one connection per node, so this only caps cluster pipeline parallelism (docs/kv-backend.md).",
  }),
  /** Connect (and I/O) timeout in milliseconds; 0 means none (Go duration). */
  kvTimeoutMs: setting({
    env: "KV_TIMEOUT",
    codec: durationMs("non-negative"),
    default: 10 * 1000,
    meaning:
      "Connect timeout, and the longest a connection with pending commands may stay silent before it is closed and they fail; 0 disables.",
  }),
  /** Pool-exhausted behaviour, any case of CREATE, ERROR, WAIT. */
  kvPoolOnEmptyBehavior: setting({
    env: "KV_POOL_ON_EMPTY_BEHAVIOR",
    codec: kvPoolOnEmptyBehavior,
    default: "CREATE",
    meaning:
      "When no connection is up: ERROR fails after KV_POOL_ON_EMPTY_WAIT_DURATION; WAIT and CREATE wait up to KV_TIMEOUT for the reconnect (docs/kv-backend.md).",
  }),
  /** Milliseconds to wait before CREATE or ERROR applies (Go duration). */
  kvPoolOnEmptyWaitMs: setting({
    env: "KV_POOL_ON_EMPTY_WAIT_DURATION",
    codec: durationMs("non-negative"),
    default: 1000,
    meaning:
      "How long ERROR waits for a connection before failing the request.",
  }),
  /**
   * Write-flush interval in milliseconds (Go duration); 0 writes the commands of every request
   * decided in one event-loop turn together, without waiting.
   */
  kvPipelineWindowMs: setting({
    env: "KV_PIPELINE_WINDOW",
    codec: durationMs("non-negative"),
    default: 0,
    meaning:
      "0: the commands of the requests decided in one event-loop turn go out in one write, without waiting; above 0: commands of concurrent requests are batched for this long (under 1ms: until the end of the event-loop turn).",
  }),
  /** Deprecated, no effect; a value > 0 is warned about. */
  kvPipelineLimit: setting({
    env: "KV_PIPELINE_LIMIT",
    codec: integer(anyInteger),
    default: 0,
    unit: "commands",
    meaning: "Deprecated; no effect.",
    deprecatedWhen: (limit) => limit > 0,
  }),
  /**
   * Cluster pipelines run in parallel: 0 = pool size, 1 = serial, larger values are capped at
   * the pool size.
   */
  kvClusterPipelineParallelism: setting({
    env: "KV_CLUSTER_PIPELINE_PARALLELISM",
    codec: integer(nonNegativeInteger),
    default: 1,
    unit: "pipelines in parallel",
    meaning: "Cluster pipelines in parallel: 0 = pool size, 1 = serial.",
  }),
  /** Use TLS. */
  kvTls: setting({
    env: "KV_TLS",
    codec: flag,
    default: false,
    meaning: "Use TLS.",
  }),
  /** Client certificate file, shared with the per-second instance. */
  kvTlsClientCert: setting({
    env: "KV_TLS_CLIENT_CERT",
    codec: text,
    default: "",
    meaning: "Client certificate file (both instances).",
  }),
  /** Client key file, shared with the per-second instance. */
  kvTlsClientKey: setting({
    env: "KV_TLS_CLIENT_KEY",
    codec: text,
    default: "",
    meaning: "Client key file (both instances).",
  }),
  /** CA file added to the system roots, shared with the per-second instance. */
  kvTlsCacert: setting({
    env: "KV_TLS_CACERT",
    codec: text,
    default: "",
    meaning: "CA file (both instances).",
  }),
  /** Verify the chain but not the host name, shared with the per-second instance. */
  kvTlsSkipHostnameVerification: setting({
    env: "KV_TLS_SKIP_HOSTNAME_VERIFICATION",
    codec: flag,
    default: false,
    meaning: "Verify the certificate chain but not the host name.",
  }),
  /** `<password>` or `<username>:<password>` for master and replicas; secret. */
  kvAuth: setting({
    env: "KV_AUTH",
    codec: text,
    default: "",
    meaning: "password or username:password.",
  }),
  /** Same formats, for sentinel nodes only; secret. */
  kvSentinelAuth: setting({
    env: "KV_SENTINEL_AUTH",
    codec: text,
    default: "",
    meaning: "password or username:password for sentinel nodes.",
  }),
  /**
   * Health fails while no connection to the store is active
   * .
   */
  kvHealthCheckActiveConnection: setting({
    env: "KV_HEALTH_CHECK_ACTIVE_CONNECTION",
    codec: flag,
    default: false,
    meaning: "Report unhealthy while no connection is active.",
  }),
  /** First wait between startup connection attempts, in milliseconds (Go duration). */
  kvStartupInitialIntervalMs: setting({
    env: "KV_STARTUP_INITIAL_INTERVAL",
    codec: durationMs("non-negative"),
    default: 1000,
    meaning: "First wait between connection attempts at startup.",
  }),
  /** Largest wait between startup connection attempts, in milliseconds (Go duration). */
  kvStartupMaxIntervalMs: setting({
    env: "KV_STARTUP_MAX_INTERVAL",
    codec: durationMs("non-negative"),
    default: 30 * 1000,
    meaning: "Largest wait between startup attempts.",
  }),
  /**
   * Give up connecting at startup after this many milliseconds; 0 retries forever (Go duration).
   */
  kvStartupMaxElapsedTimeMs: setting({
    env: "KV_STARTUP_MAX_ELAPSED_TIME",
    codec: durationMs("non-negative"),
    default: 0,
    meaning:
      "Give up connecting at startup after this long; 0 retries forever.",
  }),
};

/**
 * The per-second instance's twin of a primary setting: same codec, default, unit and hooks,
 * meaning "As <primary env>, per-second instance." unless overridden.
 */
function perSecond<T>(
  twin: SettingDeclaration<T>,
  env: string,
  overrides: Partial<Pick<SettingDeclaration<T>, "default" | "meaning">> = {},
): SettingDeclaration<T> {
  return setting({
    ...twin,
    meaning: `As ${twin.env}, per-second instance.`,
    ...overrides,
    env,
  });
}

export const kv = settingsGroup("kv backend", {
  ...primary,
  /** Use a second instance for per-second limits. */
  kvPerSecond: setting({
    env: "KV_PERSECOND",
    codec: flag,
    default: false,
    meaning: "Use a second instance for per-second limits.",
  }),
  /** As {@link Settings.kvSocketType}, per-second instance. */
  kvPerSecondSocketType: perSecond(
    primary.kvSocketType,
    "KV_PERSECOND_SOCKET_TYPE",
  ),
  /** As {@link Settings.kvType}, per-second instance. */
  kvPerSecondType: perSecond(primary.kvType, "KV_PERSECOND_TYPE"),
  /** As {@link Settings.kvUrl}, per-second instance. */
  kvPerSecondUrl: perSecond(primary.kvUrl, "KV_PERSECOND_URL", {
    default: "/var/run/nutcracker/ratelimitpersecond.sock",
  }),
  /** As {@link Settings.kvPoolSize}, per-second instance. */
  kvPerSecondPoolSize: perSecond(primary.kvPoolSize, "KV_PERSECOND_POOL_SIZE"),
  /** As {@link Settings.kvTimeoutMs}, per-second instance. */
  kvPerSecondTimeoutMs: perSecond(primary.kvTimeoutMs, "KV_PERSECOND_TIMEOUT"),
  /** As {@link Settings.kvPoolOnEmptyBehavior}, per-second instance. */
  kvPerSecondPoolOnEmptyBehavior: perSecond(
    primary.kvPoolOnEmptyBehavior,
    "KV_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
  ),
  /** As {@link Settings.kvPoolOnEmptyWaitMs}, per-second instance. */
  kvPerSecondPoolOnEmptyWaitMs: perSecond(
    primary.kvPoolOnEmptyWaitMs,
    "KV_PERSECOND_POOL_ON_EMPTY_WAIT_DURATION",
  ),
  /** As {@link Settings.kvPipelineWindowMs}, per-second instance. */
  kvPerSecondPipelineWindowMs: perSecond(
    primary.kvPipelineWindowMs,
    "KV_PERSECOND_PIPELINE_WINDOW",
  ),
  /** Deprecated, no effect. */
  kvPerSecondPipelineLimit: perSecond(
    primary.kvPipelineLimit,
    "KV_PERSECOND_PIPELINE_LIMIT",
    { meaning: primary.kvPipelineLimit.meaning },
  ),
  /** As {@link Settings.kvClusterPipelineParallelism}, per-second instance. */
  kvPerSecondClusterPipelineParallelism: perSecond(
    primary.kvClusterPipelineParallelism,
    "KV_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
  ),
  /** Use TLS for the per-second instance. */
  kvPerSecondTls: perSecond(primary.kvTls, "KV_PERSECOND_TLS", {
    meaning: "Use TLS for the per-second instance.",
  }),
  /** As {@link Settings.kvAuth}, per-second instance; secret. */
  kvPerSecondAuth: perSecond(primary.kvAuth, "KV_PERSECOND_AUTH"),
  /** As {@link Settings.kvSentinelAuth}, per-second instance; secret. */
  kvPerSecondSentinelAuth: perSecond(
    primary.kvSentinelAuth,
    "KV_PERSECOND_SENTINEL_AUTH",
  ),
});

/** Hides `user:password@` in `scheme://user:password@host` items of a comma-separated URL list. */
function maskUrlCredentials(url: string): string {
  return url
    .split(",")
    .map((item) =>
      item.replace(/^([a-z][a-z0-9+.-]*:\/\/)[^@/]*@/i, "$1*****@"),
    )
    .join(",");
}

/** `host:port` (or `[v6]:port`) with no `/`: a TCP address, never a socket path. */
const hostPortLike = /^(?:[^/:[\]]+|\[[0-9a-fA-F:.]+\]):\d{1,5}$/;

/**
 * A sentinel address lists the master name and at least one sentinel; a `host:port` URL is
 * not read as a unix socket path.
 */
export const kvChecks: readonly SettingsCheck<
  SettingsOf<typeof kv> & Pick<SettingsOf<typeof rateLimiting>, "backendType">
>[] = [
  (settings, reader) => {
    if (settings.backendType !== "kv" || !reader.allValid("BACKEND_TYPE"))
      return;
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
    // A `host:port` read as a unix socket path fails with ENOENT on every retry: say so at once.
    const checkSocketUrl = (
      prefix: "KV_" | "KV_PERSECOND_",
      type: KvType,
      socketType: KvSocketType,
      url: string,
    ): void => {
      if (
        type === "single" &&
        socketType === "unix" &&
        reader.allValid(`${prefix}TYPE`, `${prefix}SOCKET_TYPE`) &&
        hostPortLike.test(url)
      ) {
        reader.problem(
          `${prefix}URL=${quote(maskUrlCredentials(url))} looks like host:port, but ${prefix}SOCKET_TYPE=unix (the default) reads it as a socket path: set ${prefix}SOCKET_TYPE=tcp`,
        );
      }
    };
    checkSentinelUrl("KV_TYPE", "KV_URL", settings.kvType, settings.kvUrl);
    checkSocketUrl(
      "KV_",
      settings.kvType,
      settings.kvSocketType,
      settings.kvUrl,
    );
    if (settings.kvPerSecond) {
      checkSentinelUrl(
        "KV_PERSECOND_TYPE",
        "KV_PERSECOND_URL",
        settings.kvPerSecondType,
        settings.kvPerSecondUrl,
      );
      checkSocketUrl(
        "KV_PERSECOND_",
        settings.kvPerSecondType,
        settings.kvPerSecondSocketType,
        settings.kvPerSecondUrl,
      );
    }
  },
];
