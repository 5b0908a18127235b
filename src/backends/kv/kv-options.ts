import type { Logger } from "pino";
import type { HealthChecker } from "../../health/health.js";
import { BackendError } from "../../limiter/backend-error.js";
import type { StatsStore } from "../../stats/stats-store.js";
import type { Clock } from "../../util/clock.js";

/** Deployment of one key-value store instance (`KV_TYPE`). */
export type KvType = "single" | "sentinel" | "cluster";

/** How a `single` instance is reached (`KV_SOCKET_TYPE`). */
export type KvSocketType = "tcp" | "unix";

/**
 * What a request does when no connection to the store is up (`KV_POOL_ON_EMPTY_BEHAVIOR`).
 * ioredis multiplexes every request over one connection per node, so the reference's "pool
 * exhausted" state only happens here while that connection is down; see
 * `docs/kv-backend.md` for the whole mapping.
 */
export type KvPoolOnEmptyBehavior = "CREATE" | "ERROR" | "WAIT";

/** Username and password sent with `AUTH` (or `AUTH <password>` alone). */
export interface KvCredentials {
  /** ACL user; absent for the plain `AUTH <password>` form. */
  readonly username?: string;
  /** Secret: never logged. */
  readonly password: string;
}

/** TLS material shared by both instances (`KV_TLS_*`), as PEM text or bytes. */
export interface KvTlsOptions {
  /** Client certificate chain (`KV_TLS_CLIENT_CERT`); sent only together with `clientKey`. */
  readonly clientCert?: string | Buffer;
  /** Client private key (`KV_TLS_CLIENT_KEY`). */
  readonly clientKey?: string | Buffer;
  /**
   * CA certificates trusted in addition to the system roots (`KV_TLS_CACERT`), as the
   * reference appends its CA to the system pool.
   */
  readonly ca?: string | Buffer;
  /**
   * Verify the certificate chain but not the host name (`KV_TLS_SKIP_HOSTNAME_VERIFICATION`).
   * @defaultValue false
   */
  readonly skipHostnameVerification?: boolean;
}

/** Options of one store instance: the main one (`KV_*`) or the per-second one (`KV_PERSECOND_*`). */
export interface KvInstanceOptions {
  /** Deployment (`KV_TYPE`). @defaultValue "single" */
  readonly type?: KvType;
  /**
   * Network for `single`: `tcp` (`host:port` or a `redis://` URL) or `unix` (a socket path)
   * (`KV_SOCKET_TYPE`). @defaultValue "unix"
   */
  readonly socketType?: KvSocketType;
  /**
   * Address (`KV_URL`): `host:port`, `redis://[user[:password]@]host:port[/db]` or a socket
   * path (single); `<master name>,<sentinel host:port>,…` (sentinel, at least 2 items);
   * `host:port,…` seed nodes (cluster). May carry credentials: only its masked form is logged.
   */
  readonly url: string;
  /**
   * Connections in the reference's pool (`KV_POOL_SIZE`), ≥ 1. ioredis multiplexes one
   * connection per node, so this only caps cluster pipeline parallelism (as upstream does).
   * @defaultValue 10
   */
  readonly poolSize?: number;
  /**
   * Milliseconds for connecting, and for a connection with commands pending to stay silent
   * before it is closed and its commands fail; also bounds how long WAIT and CREATE wait for a
   * connection. 0 disables them (`KV_TIMEOUT`). @defaultValue 10000
   */
  readonly timeoutMs?: number;
  /** See {@link KvPoolOnEmptyBehavior} (`KV_POOL_ON_EMPTY_BEHAVIOR`). @defaultValue "CREATE" */
  readonly poolOnEmptyBehavior?: KvPoolOnEmptyBehavior;
  /**
   * Milliseconds a request waits for a connection before `ERROR` fails it
   * (`KV_POOL_ON_EMPTY_WAIT_DURATION`), ≥ 0. @defaultValue 1000
   */
  readonly poolOnEmptyWaitMs?: number;
  /**
   * Milliseconds the commands of concurrent requests are collected before they are written
   * as one pipeline (`KV_PIPELINE_WINDOW`), ≥ 0. 0 writes each request's commands at once;
   * below 1 ms the batch is written at the end of the current event-loop turn (Node timers
   * cannot wait less than 1 ms). @defaultValue 0
   */
  readonly pipelineWindowMs?: number;
  /**
   * Cluster only: node pipelines of one batch run in parallel; 0 = `poolSize`, 1 = one after
   * another, larger values are capped at `poolSize` (`KV_CLUSTER_PIPELINE_PARALLELISM`), ≥ 0.
   * Same rule as upstream `driver_impl.go`. @defaultValue 1
   */
  readonly clusterPipelineParallelism?: number;
  /** Use TLS with the backend's {@link KvTlsOptions} (`KV_TLS`). @defaultValue false */
  readonly tls?: boolean;
  /**
   * `<password>` or `<username>:<password>` for master and replica nodes (`KV_AUTH`); takes
   * precedence over credentials in a `redis://` URL. Secret: never logged. @defaultValue ""
   */
  readonly auth?: string;
  /**
   * Same formats, for sentinel nodes only (`KV_SENTINEL_AUTH`); without it sentinels are not
   * authenticated. Secret: never logged. @defaultValue ""
   */
  readonly sentinelAuth?: string;
  /**
   * Upper bound of the delay between reconnect attempts after a lost connection, in
   * milliseconds (> 0). The app lowers it to `BACKEND_PROBE_INTERVAL`, so a circuit breaker
   * probe finds a store that came back within one interval. @defaultValue 2000
   */
  readonly reconnectMaxDelayMs?: number;
  /**
   * Single and sentinel deployments: a request that finds the connection down while a
   * reconnect is pending starts the attempt at once instead of waiting for the backoff. The
   * app turns it on behind its circuit breaker, where only the breaker's probes (and the
   * first few failures) reach a failed store, so a probe reconnects. @defaultValue false
   */
  readonly reconnectOnRequest?: boolean;
}

/** Options of {@link KvCounterBackend}. */
export interface KvBackendOptions {
  /** The instance for every limit (or every limit but SECOND ones when `perSecond` is set). */
  readonly main: KvInstanceOptions;
  /** Second instance for SECOND limits only (`KV_PERSECOND=true`). @defaultValue none */
  readonly perSecond?: KvInstanceOptions;
  /** TLS material for instances with `tls: true`. @defaultValue none (system roots only) */
  readonly tls?: KvTlsOptions;
  /**
   * The `backend` health component follows the connections: unhealthy while an instance has
   * no connection up (`KV_HEALTH_CHECK_ACTIVE_CONNECTION`). @defaultValue false
   */
  readonly healthCheckActiveConnection?: boolean;
  /** First wait between startup PINGs, ms, > 0 (`KV_STARTUP_INITIAL_INTERVAL`). @defaultValue 1000 */
  readonly startupInitialIntervalMs?: number;
  /** Largest wait between startup PINGs, ms, > 0 (`KV_STARTUP_MAX_INTERVAL`). @defaultValue 30000 */
  readonly startupMaxIntervalMs?: number;
  /**
   * Give up waiting for the store at startup after this many ms; 0 waits forever
   * (`KV_STARTUP_MAX_ELAPSED_TIME`). @defaultValue 0
   */
  readonly startupMaxElapsedTimeMs?: number;
  /** Logger for connection events (a child with `component: "kv"` is made). */
  readonly logger: Logger;
  /** Where the `backend` component is registered (healthy) and updated. @defaultValue none */
  readonly health?: HealthChecker;
  /** Where the `ratelimit.kv_pool.*` statistics live. @defaultValue none */
  readonly statsStore?: StatsStore;
  /** Random source in [0, 1) for the startup backoff jitter. @defaultValue Math.random */
  readonly random?: () => number;
  /** Time source for the startup elapsed time. @defaultValue the system clock */
  readonly clock?: Clock;
}

/**
 * Where one instance connects, parsed from its URL by {@link parseKvUrl}: a TCP address (with
 * the credentials and database of a `redis://` URL), a unix socket, a sentinel set with its
 * master name, or cluster seed nodes.
 */
export type KvTarget =
  | {
      readonly kind: "tcp";
      readonly host: string;
      readonly port: number;
      /** Credentials from a `redis://` URL (used when no `auth` is set). */
      readonly credentials?: KvCredentials;
      /** Database index from a `redis://` URL. */
      readonly db?: number;
    }
  | { readonly kind: "unix"; readonly path: string }
  | {
      readonly kind: "sentinel";
      readonly masterName: string;
      readonly sentinels: readonly KvNodeAddress[];
    }
  | { readonly kind: "cluster"; readonly nodes: readonly KvNodeAddress[] };

/** A `host:port` pair. */
export interface KvNodeAddress {
  /** Host name or IP address (IPv6 without brackets). */
  readonly host: string;
  /** TCP port, 1–65535. */
  readonly port: number;
}

/** One instance's options, checked and completed by {@link resolveKvInstanceOptions}. */
export interface ResolvedKvInstanceOptions {
  /** See {@link KvInstanceOptions.type}. */
  readonly type: KvType;
  /** See {@link KvInstanceOptions.socketType}. */
  readonly socketType: KvSocketType;
  /** The parsed URL. */
  readonly target: KvTarget;
  /** The URL with credentials masked, safe to log. */
  readonly maskedUrl: string;
  /** Connections of the reference's pool, ≥ 1; caps cluster parallelism. */
  readonly poolSize: number;
  /** Connect and read timeout in ms; 0 for none. */
  readonly timeoutMs: number;
  /** See {@link KvPoolOnEmptyBehavior}. */
  readonly poolOnEmptyBehavior: KvPoolOnEmptyBehavior;
  /** ERROR's wait for a connection, in ms. */
  readonly poolOnEmptyWaitMs: number;
  /** Batching window in ms; 0 writes each request at once. */
  readonly pipelineWindowMs: number;
  /** Effective cluster parallelism after the upstream rule (≥ 1). */
  readonly clusterPipelineParallelism: number;
  /** Whether to use TLS. */
  readonly tls: boolean;
  /** From `auth`, else from the URL; undefined for none. */
  readonly credentials: KvCredentials | undefined;
  /** From `sentinelAuth`; undefined: sentinels are not authenticated. */
  readonly sentinelCredentials: KvCredentials | undefined;
  /** See {@link KvInstanceOptions.reconnectMaxDelayMs}. */
  readonly reconnectMaxDelayMs: number;
  /** See {@link KvInstanceOptions.reconnectOnRequest}. */
  readonly reconnectOnRequest: boolean;
}

/** Which option field a problem is about. */
export type KvOptionName = keyof KvInstanceOptions | keyof KvBackendOptions;

/**
 * An option is invalid (bad URL, negative duration). A {@link BackendError} so the backend's
 * error set stays closed; `option` and `instance` name the field, so the composition root can
 * name the environment variable.
 */
export class KvOptionsError extends BackendError {
  /** The offending field of {@link KvInstanceOptions} or {@link KvBackendOptions}. */
  readonly option: KvOptionName;
  /** The instance whose option it is; undefined for backend-wide options. */
  readonly instance: "main" | "perSecond" | undefined;
  constructor(
    option: KvOptionName,
    message: string,
    instance?: "main" | "perSecond",
  ) {
    super("kv", message);
    this.option = option;
    this.instance = instance;
  }
}

/** Defaults of {@link KvInstanceOptions}, as the reference and the spec define them. */
export const kvInstanceDefaults = {
  type: "single", // single | sentinel | cluster
  socketType: "unix", // tcp | unix
  poolSize: 10, // connections (caps cluster parallelism only)
  timeoutMs: 10_000, // ms (10s)
  poolOnEmptyBehavior: "CREATE", // CREATE | ERROR | WAIT (spec default)
  poolOnEmptyWaitMs: 1_000, // ms (1s)
  pipelineWindowMs: 0, // ms; 0 = write each request at once
  clusterPipelineParallelism: 1, // node pipelines in parallel
  tls: false, // flag
  auth: "", // secret
  sentinelAuth: "", // secret
} as const;

/**
 * Parses `KV_AUTH` / `KV_SENTINEL_AUTH`: `""` → none, `user:password` (split at the first
 * `:`) → ACL user, anything else → password only (upstream `driver_impl.go`).
 */
export function parseKvAuth(auth: string): KvCredentials | undefined {
  if (auth === "") return undefined;
  const colon = auth.indexOf(":");
  if (colon < 0) return { password: auth };
  return { username: auth.slice(0, colon), password: auth.slice(colon + 1) };
}

/**
 * Returns the URL with the credentials of every comma-separated item replaced by `*****`
 * (`redis://user:pass@h:1` → `redis://*****@h:1`, `?password=x` → `?password=*****`), the
 * reference's masking for log lines.
 */
export function maskKvUrl(url: string): string {
  return url
    .split(",")
    .map((item) =>
      item
        .replace(/^([a-z][a-z0-9+.-]*:\/\/)[^@/]*@/i, "$1*****@")
        .replace(/([?&]password=)[^&]*/gi, "$1*****"),
    )
    .join(",");
}

function parseHostPort(text: string, option: KvOptionName): KvNodeAddress {
  const item = text.trim();
  // [v6]:port or host:port, split at the last colon.
  const match =
    /^\[([^\]]+)\]:(\d+)$/.exec(item) ?? /^([^:]+):(\d+)$/.exec(item);
  const port = match === null ? NaN : Number(match[2]);
  if (match === null || !Number.isInteger(port) || port < 1 || port > 65535) {
    throw new KvOptionsError(
      option,
      `${JSON.stringify(maskKvUrl(item))}: expected host:port with a port in 1–65535`,
    );
  }
  return { host: match[1]!, port };
}

function parseRedisUrl(text: string): KvTarget {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new KvOptionsError(
      "url",
      `${JSON.stringify(maskKvUrl(text))}: not a valid redis:// URL`,
    );
  }
  const host = url.hostname.replace(/^\[(.*)\]$/, "$1");
  const port = url.port === "" ? 6379 : Number(url.port);
  if (host === "") {
    throw new KvOptionsError(
      "url",
      `${JSON.stringify(maskKvUrl(text))}: the URL has no host`,
    );
  }
  const params = url.searchParams;
  const username =
    decodeURIComponent(url.username) || (params.get("username") ?? "");
  const password =
    decodeURIComponent(url.password) || (params.get("password") ?? "");
  const dbText =
    url.pathname.length > 1 ? url.pathname.slice(1) : (params.get("db") ?? "");
  let db: number | undefined;
  if (dbText !== "") {
    db = Number(dbText);
    if (!/^\d+$/.test(dbText) || !Number.isSafeInteger(db)) {
      throw new KvOptionsError(
        "url",
        `${JSON.stringify(maskKvUrl(text))}: database ${JSON.stringify(dbText)} is not a non-negative integer`,
      );
    }
  }
  // A user without a password cannot authenticate; like the reference, only a password
  // turns AUTH on.
  const credentials: KvCredentials | undefined =
    password === ""
      ? undefined
      : username === ""
        ? { password }
        : { username, password };
  return {
    kind: "tcp",
    host,
    port,
    ...(credentials !== undefined ? { credentials } : {}),
    ...(db !== undefined ? { db } : {}),
  };
}

/**
 * Parses an instance URL for its deployment (docs/reference-parity.md#kv-addresses):
 * - `single` + `tcp`: `host:port`, `[v6]:port`, or `redis://[user[:password]@]host[:port][/db]`
 *   (also `?username=&password=&db=`);
 * - `single` + `unix`: a socket path (a `redis://` URL is also accepted);
 * - `sentinel`: `<master name>,<host:port>,…` with at least one sentinel;
 * - `cluster`: `host:port,…` seed nodes.
 *
 * @throws {@link KvOptionsError} (option `url`) when the text does not fit
 */
export function parseKvUrl(
  type: KvType,
  socketType: KvSocketType,
  url: string,
): KvTarget {
  if (type === "single") {
    if (/^rediss?:\/\//i.test(url)) {
      if (/^rediss:/i.test(url)) {
        // As in the reference, TLS is switched on by KV_TLS, not by the scheme.
        throw new KvOptionsError(
          "url",
          `${JSON.stringify(maskKvUrl(url))}: rediss:// is not recognized; use redis:// with KV_TLS=true`,
        );
      }
      return parseRedisUrl(url);
    }
    if (socketType === "unix") {
      if (url === "")
        throw new KvOptionsError("url", "expected a unix socket path");
      return { kind: "unix", path: url };
    }
    const { host, port } = parseHostPort(url, "url");
    return { kind: "tcp", host, port };
  }
  const items = url.split(",").filter((item) => item.trim() !== "");
  if (type === "sentinel") {
    if (items.length < 2) {
      throw new KvOptionsError(
        "url",
        `${JSON.stringify(maskKvUrl(url))}: expected <master name>,<sentinel host:port>[,…] (at least 2 items)`,
      );
    }
    return {
      kind: "sentinel",
      masterName: items[0]!.trim(),
      sentinels: items.slice(1).map((item) => parseHostPort(item, "url")),
    };
  }
  if (items.length === 0) {
    throw new KvOptionsError(
      "url",
      "expected host:port[,host:port…] seed nodes",
    );
  }
  return {
    kind: "cluster",
    nodes: items.map((item) => parseHostPort(item, "url")),
  };
}

function checkRange(
  option: KvOptionName,
  value: number,
  min: number,
  integer: boolean,
): number {
  if (
    !Number.isFinite(value) ||
    value < min ||
    (integer && !Number.isInteger(value))
  ) {
    throw new KvOptionsError(
      option,
      `${option} ${String(value)}: expected ${integer ? "an integer" : "a number"} ≥ ${min}`,
    );
  }
  return value;
}

/**
 * Checks one instance's options and fills defaults ({@link kvInstanceDefaults}).
 *
 * @throws {@link KvOptionsError} naming the first invalid option
 */
export function resolveKvInstanceOptions(
  options: KvInstanceOptions,
): ResolvedKvInstanceOptions {
  const type = options.type ?? kvInstanceDefaults.type;
  const socketType = options.socketType ?? kvInstanceDefaults.socketType;
  const target = parseKvUrl(type, socketType, options.url);
  const poolSize = checkRange(
    "poolSize",
    options.poolSize ?? kvInstanceDefaults.poolSize,
    1,
    true,
  );
  const parallelism = checkRange(
    "clusterPipelineParallelism",
    options.clusterPipelineParallelism ??
      kvInstanceDefaults.clusterPipelineParallelism,
    0,
    true,
  );
  const credentials =
    parseKvAuth(options.auth ?? kvInstanceDefaults.auth) ??
    (target.kind === "tcp" ? target.credentials : undefined);
  return {
    type,
    socketType,
    target,
    maskedUrl: maskKvUrl(options.url),
    poolSize,
    timeoutMs: checkRange(
      "timeoutMs",
      options.timeoutMs ?? kvInstanceDefaults.timeoutMs,
      0,
      false,
    ),
    reconnectMaxDelayMs: checkRange(
      "reconnectMaxDelayMs",
      options.reconnectMaxDelayMs ?? 2000,
      1,
      false,
    ),
    reconnectOnRequest: options.reconnectOnRequest ?? false,
    poolOnEmptyBehavior:
      options.poolOnEmptyBehavior ?? kvInstanceDefaults.poolOnEmptyBehavior,
    poolOnEmptyWaitMs: checkRange(
      "poolOnEmptyWaitMs",
      options.poolOnEmptyWaitMs ?? kvInstanceDefaults.poolOnEmptyWaitMs,
      0,
      false,
    ),
    pipelineWindowMs: checkRange(
      "pipelineWindowMs",
      options.pipelineWindowMs ?? kvInstanceDefaults.pipelineWindowMs,
      0,
      false,
    ),
    // Upstream `driver_impl.go`: 1 stays serial; 0 means the pool size; larger values are
    // capped at the pool size.
    clusterPipelineParallelism:
      parallelism === 0 ? poolSize : Math.min(parallelism, poolSize),
    tls: options.tls ?? kvInstanceDefaults.tls,
    credentials,
    sentinelCredentials: parseKvAuth(
      options.sentinelAuth ?? kvInstanceDefaults.sentinelAuth,
    ),
  };
}

/** {@link KvBackendOptions} checked and completed by {@link resolveKvBackendOptions}. */
export interface ResolvedKvBackendOptions {
  /** The main instance. */
  readonly main: ResolvedKvInstanceOptions;
  /** The per-second instance; undefined when SECOND limits use the main one. */
  readonly perSecond: ResolvedKvInstanceOptions | undefined;
  /** See {@link KvBackendOptions.healthCheckActiveConnection}. */
  readonly healthCheckActiveConnection: boolean;
  /** First startup wait in ms, > 0. */
  readonly startupInitialIntervalMs: number;
  /** Largest startup wait in ms, > 0. */
  readonly startupMaxIntervalMs: number;
  /** Startup give-up time in ms; 0 waits forever. */
  readonly startupMaxElapsedTimeMs: number;
}

/** Defaults of the backend-wide {@link KvBackendOptions}. */
export const kvBackendDefaults = {
  healthCheckActiveConnection: false, // flag
  startupInitialIntervalMs: 1_000, // ms (1s)
  startupMaxIntervalMs: 30_000, // ms (30s)
  startupMaxElapsedTimeMs: 0, // ms; 0 = wait forever
} as const;

function resolveInstance(
  options: KvInstanceOptions,
  instance: "main" | "perSecond",
): ResolvedKvInstanceOptions {
  try {
    return resolveKvInstanceOptions(options);
  } catch (err) {
    if (err instanceof KvOptionsError)
      throw new KvOptionsError(err.option, err.message, instance);
    throw err;
  }
}

/**
 * Checks the backend options and fills defaults ({@link kvInstanceDefaults},
 * {@link kvBackendDefaults}).
 *
 * @throws {@link KvOptionsError} naming the first invalid option and its instance
 */
export function resolveKvBackendOptions(
  options: KvBackendOptions,
): ResolvedKvBackendOptions {
  const main = resolveInstance(options.main, "main");
  const perSecond =
    options.perSecond === undefined
      ? undefined
      : resolveInstance(options.perSecond, "perSecond");
  const startupInitialIntervalMs =
    options.startupInitialIntervalMs ??
    kvBackendDefaults.startupInitialIntervalMs;
  const startupMaxIntervalMs =
    options.startupMaxIntervalMs ?? kvBackendDefaults.startupMaxIntervalMs;
  if (!(startupInitialIntervalMs > 0)) {
    throw new KvOptionsError(
      "startupInitialIntervalMs",
      `startupInitialIntervalMs ${String(startupInitialIntervalMs)}: expected a number > 0`,
    );
  }
  if (!(startupMaxIntervalMs > 0)) {
    throw new KvOptionsError(
      "startupMaxIntervalMs",
      `startupMaxIntervalMs ${String(startupMaxIntervalMs)}: expected a number > 0`,
    );
  }
  const startupMaxElapsedTimeMs = checkRange(
    "startupMaxElapsedTimeMs",
    options.startupMaxElapsedTimeMs ??
      kvBackendDefaults.startupMaxElapsedTimeMs,
    0,
    false,
  );
  return {
    main,
    perSecond,
    healthCheckActiveConnection:
      options.healthCheckActiveConnection ??
      kvBackendDefaults.healthCheckActiveConnection,
    startupInitialIntervalMs,
    startupMaxIntervalMs,
    startupMaxElapsedTimeMs,
  };
}
