import { Resolver } from "node:dns/promises";
import type { ConnectionOptions } from "node:tls";
import type { Logger } from "pino";
import type { HealthChecker } from "../../health/health.js";
import { StatsStore } from "../../stats/stats-store.js";
import type { Clock } from "../../util/clock.js";
import { nodeTls } from "../../util/lazy-tls.js";

/** One SRV answer, as `node:dns` returns it. */
export interface SrvAnswer {
  /** Target host name (with or without the trailing dot). */
  readonly name: string;
  readonly port: number;
  readonly priority: number;
  readonly weight: number;
}

/**
 * Looks up SRV records; `node:dns/promises` `Resolver` satisfies it. Tests inject a resolver
 * pointed at their own DNS server with `resolver.setServers(["127.0.0.1:<port>"])`.
 */
export interface SrvResolver {
  /** @throws the resolver's error (e.g. `ENOTFOUND`, `ENODATA`) when the lookup fails */
  resolveSrv(name: string): Promise<readonly SrvAnswer[]>;
}

/** Client TLS for the node connections (`MC_TLS*`); file contents, not paths. */
export interface McTlsOptions {
  /**
   * PEM CA certificate(s) trusted in addition to Node's bundled roots (`MC_TLS_CACERT`).
   * @defaultValue the bundled roots only
   */
  readonly ca?: string | Buffer;
  /** PEM client certificate chain (`MC_TLS_CLIENT_CERT`); needs {@link key}. @defaultValue none */
  readonly cert?: string | Buffer;
  /** PEM private key of {@link cert} (`MC_TLS_CLIENT_KEY`). @defaultValue none */
  readonly key?: string | Buffer;
  /**
   * Verify the server's chain but not that its certificate names the host
   * (`MC_TLS_SKIP_HOSTNAME_VERIFICATION`). @defaultValue false
   */
  readonly skipHostnameVerification?: boolean;
}

/**
 * Options of {@link McCounterBackend} (`BACKEND_TYPE=mc`). Exactly one of {@link hostPorts}
 * and {@link srv} is set; `app/mc-cache.ts` builds this from the `MC_*` settings.
 */
export interface McBackendOptions {
  /** Time source; also the "now" of absolute expirations (> 30 days). */
  readonly clock: Clock;
  /** Logger of the backend (the app passes a child with `component: "mc"`). */
  readonly logger: Logger;
  /**
   * Health checker; the backend registers its `backend` component, healthy while at least
   * one node answers. @defaultValue none (health not reported)
   */
  readonly health?: HealthChecker;
  /** Where the `ratelimit.mc.*` counters live. @defaultValue a private store */
  readonly statsStore?: StatsStore;
  /**
   * Nodes as `host:port` (`[v6]:port` for IPv6 literals), in key-mapping order
   * (`MC_HOST_PORT`). Every instance sharing counters must list the same nodes in the same
   * order. @defaultValue []
   */
  readonly hostPorts?: readonly string[];
  /**
   * SRV record `_service._proto.name` listing the nodes (`MC_SRV`), resolved in
   * {@link McCounterBackend.start}. @defaultValue "" (use {@link hostPorts})
   */
  readonly srv?: string;
  /**
   * Milliseconds between SRV re-resolutions (`MC_SRV_REFRESH`); 0 never refreshes.
   * @defaultValue 0
   */
  readonly srvRefreshMs?: number;
  /** SRV resolver. @defaultValue a `node:dns/promises` `Resolver` with the system servers */
  readonly srvResolver?: SrvResolver;
  /**
   * `MC_MAX_IDLE_CONNS`, ≥ 0. The reference's client opens one connection per concurrent
   * operation and keeps this many idle per node; we pipeline every operation over persistent
   * connections instead, so nothing is ever idle. We keep `max(1, maxIdleConns)` persistent
   * pipelined connections per node; a cache key always uses the same one (chosen from its
   * checksum), so an instance's increment and next read of a key stay in order.
   * @defaultValue 2
   */
  readonly maxIdleConns?: number;
  /** Use TLS to every node (`MC_TLS` with the `MC_TLS_*` files). @defaultValue undefined (plain TCP) */
  readonly tls?: McTlsOptions;
  /**
   * Milliseconds an operation may wait for its reply before the connection is dropped and the
   * operation fails open. @defaultValue 500 (the reference client's read/write timeout)
   */
  readonly timeoutMs?: number;
  /** Milliseconds a connect (and TLS handshake) may take. @defaultValue 1000 */
  readonly connectTimeoutMs?: number;
  /**
   * Milliseconds between health probes (a NOOP to every node). @defaultValue 5000
   */
  readonly healthCheckIntervalMs?: number;
  /**
   * Whether a failed multi-get reads the node's keys as 0 and the request succeeds (the
   * reference's behaviour); false rejects the request with `BackendError`, so a failure mode
   * (`BACKEND_FAILURE_MODE` other than `error`) can answer it. @defaultValue true
   */
  readonly failOpen?: boolean;
}

/** {@link McBackendOptions} checked and completed by {@link resolveMcBackendOptions}. */
export interface ResolvedMcBackendOptions {
  readonly clock: Clock;
  readonly logger: Logger;
  readonly health: HealthChecker | undefined;
  readonly statsStore: StatsStore;
  /** Parsed {@link McBackendOptions.hostPorts}; empty when {@link srv} is used. */
  readonly nodes: readonly McNodeAddress[];
  readonly srv: string;
  readonly srvRefreshMs: number;
  readonly srvResolver: SrvResolver;
  /** Persistent connections per node, ≥ 1. */
  readonly connectionsPerNode: number;
  /** Node TLS options for `tls.connect`, or undefined for plain TCP. */
  readonly tls: ConnectionOptions | undefined;
  readonly timeoutMs: number;
  readonly connectTimeoutMs: number;
  readonly healthCheckIntervalMs: number;
  readonly failOpen: boolean;
}

/** A node of the list: where to connect, and the name it has in the ordered list. */
export interface McNodeAddress {
  /**
   * The node's name in the ordered list: `host:port` as configured, or `target.:port` for SRV
   * answers (with the trailing dot, as the reference spells them, so both sort alike).
   */
  readonly address: string;
  /** Host to connect to (no brackets, no trailing dot). */
  readonly host: string;
  /** TCP port, 1–65535. */
  readonly port: number;
}

const srvName = /^_(.+?)\._(.+?)\.(.+)$/;

/**
 * Parses one `MC_HOST_PORT` item: `host:port`, or `[v6]:port` for IPv6 literals.
 *
 * @throws {@link RangeError} naming the item when it has no host or no valid port
 */
export function parseNodeAddress(text: string): McNodeAddress {
  const colon = text.lastIndexOf(":");
  let host = colon > 0 ? text.slice(0, colon) : "";
  const portText = colon > 0 ? text.slice(colon + 1) : "";
  if (host.startsWith("[") && host.endsWith("]")) host = host.slice(1, -1);
  else if (host.includes(":")) host = "";
  const port = /^\d{1,5}$/.test(portText) ? Number(portText) : 0;
  if (host === "" || port < 1 || port > 65535) {
    throw new RangeError(
      `${JSON.stringify(text)}: expected host:port (or [ipv6]:port) with a port from 1 to 65535`,
    );
  }
  return { address: text, host, port };
}

/**
 * Returns the ordered node list of an SRV answer: `target.:port` strings sorted bytewise,
 * ignoring priority and weight, exactly as upstream `srv/srv.go` `ServerStringsFromSrv` does,
 * so a fleet mixing both services maps keys to the same nodes.
 */
export function nodesFromSrv(answers: readonly SrvAnswer[]): McNodeAddress[] {
  const nodes = answers.map((answer) => {
    const host = answer.name.endsWith(".")
      ? answer.name.slice(0, -1)
      : answer.name;
    // Node's resolver drops the trailing dot Go keeps; put it back so the order matches.
    return { address: `${host}.:${answer.port}`, host, port: answer.port };
  });
  nodes.sort((a, b) =>
    a.address < b.address ? -1 : a.address > b.address ? 1 : 0,
  );
  return nodes;
}

/** Builds `tls.connect` options from {@link McTlsOptions}. */
function toConnectionOptions(options: McTlsOptions): ConnectionOptions {
  if ((options.cert === undefined) !== (options.key === undefined)) {
    throw new RangeError(
      "tls: a client certificate needs its key and a key needs its certificate (MC_TLS_CLIENT_CERT, MC_TLS_CLIENT_KEY)",
    );
  }
  const result: ConnectionOptions = {
    ...(options.ca !== undefined
      ? { ca: [...nodeTls().rootCertificates, options.ca] }
      : {}),
    ...(options.cert !== undefined ? { cert: options.cert } : {}),
    ...(options.key !== undefined ? { key: options.key } : {}),
  };
  if (options.skipHostnameVerification === true) {
    // The chain is still verified (rejectUnauthorized stays true); only the name check goes.
    result.checkServerIdentity = () => undefined;
  }
  return result;
}

function nonNegative(name: string, value: number): number {
  if (!Number.isFinite(value) || value < 0) {
    throw new RangeError(`${name}: expected a number ≥ 0, got ${value}`);
  }
  return value;
}

function positive(name: string, value: number): number {
  if (!Number.isFinite(value) || value <= 0) {
    throw new RangeError(`${name}: expected a number > 0, got ${value}`);
  }
  return value;
}

/**
 * Checks {@link McBackendOptions} and fills in the defaults.
 *
 * @throws {@link RangeError} naming the option: both or neither of `hostPorts` and `srv`, a
 *   malformed node or SRV name, a negative duration, a certificate without key
 */
export function resolveMcBackendOptions(
  options: McBackendOptions,
): ResolvedMcBackendOptions {
  const hostPorts = options.hostPorts ?? [];
  const srv = options.srv ?? "";
  if (hostPorts.length > 0 && srv !== "") {
    throw new RangeError(
      "hostPorts and srv are both set: expected exactly one (MC_HOST_PORT, MC_SRV)",
    );
  }
  if (hostPorts.length === 0 && srv === "") {
    throw new RangeError(
      "hostPorts and srv are both empty: expected exactly one (MC_HOST_PORT, MC_SRV)",
    );
  }
  if (srv !== "" && !srvName.test(srv)) {
    throw new RangeError(
      `srv: ${JSON.stringify(srv)} is not an SRV record name _service._proto.name`,
    );
  }
  return {
    clock: options.clock,
    logger: options.logger,
    health: options.health,
    statsStore: options.statsStore ?? new StatsStore(),
    nodes: hostPorts.map(parseNodeAddress),
    srv,
    srvRefreshMs: nonNegative("srvRefreshMs", options.srvRefreshMs ?? 0),
    srvResolver: options.srvResolver ?? new Resolver(),
    connectionsPerNode: Math.max(
      1,
      Math.floor(nonNegative("maxIdleConns", options.maxIdleConns ?? 2)),
    ),
    tls:
      options.tls !== undefined ? toConnectionOptions(options.tls) : undefined,
    timeoutMs: positive("timeoutMs", options.timeoutMs ?? 500),
    connectTimeoutMs: positive(
      "connectTimeoutMs",
      options.connectTimeoutMs ?? 1000,
    ),
    healthCheckIntervalMs: positive(
      "healthCheckIntervalMs",
      options.healthCheckIntervalMs ?? 5000,
    ),
    failOpen: options.failOpen ?? true,
  };
}
