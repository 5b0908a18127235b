// Translation of a resolved kv instance into ioredis constructor options: timeouts, reconnect
// policy, credentials, TLS, sentinel and cluster settings. Pure functions; no connection.

import type { ConnectionOptions } from "node:tls";
import type { ClusterOptions, RedisOptions } from "ioredis";
import { nodeTls } from "../../util/lazy-tls.js";
import type {
  KvCredentials,
  KvNodeAddress,
  KvTlsOptions,
  ResolvedKvInstanceOptions,
} from "./kv-options.js";

/** ioredis constructor arguments for one instance, as built by {@link toKvConnectionOptions}. */
export type KvConnectionOptions =
  | { readonly kind: "redis"; readonly options: RedisOptions }
  | {
      readonly kind: "cluster";
      readonly nodes: readonly KvNodeAddress[];
      readonly options: ClusterOptions;
    };

/**
 * Delay before ioredis's next reconnect attempt after a lost connection, in ms: 100, 200,
 * 400, … capped at 2000 (or the instance's lower `reconnectMaxDelayMs`), so service resumes
 * within about 2 s of the store coming back.
 *
 * @param attempt - 1 for the first retry
 */
export function reconnectDelayMs(attempt: number): number {
  return Math.min(100 * 2 ** Math.min(Math.max(attempt, 1) - 1, 5), 2000);
}

/**
 * Node TLS options for {@link KvTlsOptions}: the chain is always verified; the CA is added to
 * the system roots (not instead of them), a client certificate is sent when both certificate
 * and key are given, and skipping hostname verification keeps the chain check
 * (upstream `utils/tls.go`).
 */
export function toTlsConnectionOptions(
  tls: KvTlsOptions | undefined,
): ConnectionOptions {
  const options: ConnectionOptions = { rejectUnauthorized: true };
  if (tls?.ca !== undefined)
    options.ca = [...nodeTls().rootCertificates, tls.ca];
  if (tls?.clientCert !== undefined && tls.clientKey !== undefined) {
    options.cert = tls.clientCert;
    options.key = tls.clientKey;
  }
  if (tls?.skipHostnameVerification === true) {
    options.checkServerIdentity = () => undefined;
  }
  return options;
}

/**
 * Whether a store's error reply says the connection reaches a node that cannot take writes
 * now, so it should be closed and opened again (issue 33, docs/failure-modes.md#failover-behind-one-name):
 * - `READONLY`: the node is a replica (a managed store failed over by moving its DNS name,
 *   and this connection still reaches the old primary); also inside a script's error
 *   (`… -READONLY …` on Redis 6, `READONLY … script: …` on Redis 7);
 * - `LOADING`: the node is loading its dataset (restart, or a replica's full resync);
 * - `MASTERDOWN`: a replica that lost its primary and does not serve stale data.
 *
 * A new connection looks the configured host name up again (ioredis hands the name to
 * `net.connect`, which resolves it on every connection; Node keeps no DNS cache), so it
 * reaches what the name points at now.
 *
 * @param err - an error reply, as ioredis's `reconnectOnError` receives it
 */
export function isFailoverReply(err: Error): boolean {
  const message = err.message;
  return (
    message.startsWith("READONLY") ||
    message.startsWith("LOADING") ||
    message.startsWith("MASTERDOWN") ||
    message.includes(" -READONLY ")
  );
}

function credentialOptions(
  credentials: KvCredentials | undefined,
): Pick<RedisOptions, "username" | "password"> {
  if (credentials === undefined) return {};
  return credentials.username === undefined
    ? { password: credentials.password }
    : { username: credentials.username, password: credentials.password };
}

/**
 * Maps one resolved instance to ioredis options (the table in `docs/kv-backend.md`):
 * - `KV_TIMEOUT` → `connectTimeout` and `socketTimeout` (0: neither): connecting, and a
 *   connection with commands pending that receives nothing, fail after it;
 * - no offline queue and no resending of in-flight commands after a reconnect (an INCRBY must
 *   not be applied twice; waiting for a connection is done by the client, bounded);
 * - RESP2 (no `HELLO`, so proxies without it work) and no `CLIENT SETINFO`;
 * - TCP keep-alive 10 s as upstream; reconnects by {@link reconnectDelayMs}, forever;
 * - an error reply that {@link isFailoverReply} recognises (`READONLY`, `LOADING`,
 *   `MASTERDOWN`) fails its command as any error does, and closes that connection, which
 *   reconnects (with a new name lookup) after {@link reconnectDelayMs} (ioredis's
 *   `reconnectOnError` returning `true`: the failed command is not sent again);
 * - sentinel: `failoverDetector` (hears of promotions from the sentinels), TLS for sentinels
 *   too; cluster: node connections get the same options.
 */
export function toKvConnectionOptions(
  instance: ResolvedKvInstanceOptions,
  tls?: KvTlsOptions,
): KvConnectionOptions {
  const timeoutMs = instance.timeoutMs;
  const tlsOptions = instance.tls ? toTlsConnectionOptions(tls) : undefined;
  const maxDelayMs = instance.reconnectMaxDelayMs;
  const retry = (attempt: number): number =>
    Math.min(reconnectDelayMs(attempt), maxDelayMs);
  const connection = {
    protocol: 2,
    disableClientInfo: true,
    keepAlive: 10_000,
    connectTimeout: timeoutMs,
    // A read timeout on the connection rather than ioredis's per-command `commandTimeout`:
    // replies come in order, so a connection silent for `timeoutMs` with commands pending
    // bounds every one of them, without two timers per key (about 6 µs CPU per decision).
    ...(timeoutMs > 0 ? { socketTimeout: timeoutMs } : {}),
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    reconnectOnError: isFailoverReply,
    ...credentialOptions(instance.credentials),
    ...(tlsOptions !== undefined ? { tls: tlsOptions } : {}),
  } satisfies RedisOptions;
  const target = instance.target;
  switch (target.kind) {
    case "tcp":
      return {
        kind: "redis",
        options: {
          ...connection,
          host: target.host,
          port: target.port,
          ...(target.db !== undefined ? { db: target.db } : {}),
          lazyConnect: true,
          enableOfflineQueue: false,
          retryStrategy: retry,
        },
      };
    case "unix":
      return {
        kind: "redis",
        options: {
          ...connection,
          path: target.path,
          lazyConnect: true,
          enableOfflineQueue: false,
          retryStrategy: retry,
        },
      };
    case "sentinel": {
      const sentinel = instance.sentinelCredentials;
      return {
        kind: "redis",
        options: {
          ...connection,
          name: target.masterName,
          sentinels: target.sentinels.map(({ host, port }) => ({ host, port })),
          ...(sentinel?.username !== undefined
            ? { sentinelUsername: sentinel.username }
            : {}),
          ...(sentinel !== undefined
            ? { sentinelPassword: sentinel.password }
            : {}),
          ...(tlsOptions !== undefined
            ? { enableTLSForSentinelMode: true, sentinelTLS: tlsOptions }
            : {}),
          ...(timeoutMs > 0 ? { sentinelCommandTimeout: timeoutMs } : {}),
          failoverDetector: true,
          lazyConnect: true,
          enableOfflineQueue: false,
          retryStrategy: retry,
        },
      };
    }
    case "cluster":
      return {
        kind: "cluster",
        nodes: target.nodes,
        options: {
          redisOptions: connection,
          lazyConnect: true,
          enableOfflineQueue: false,
          clusterRetryStrategy: retry,
          ...(timeoutMs > 0 ? { slotsRefreshTimeout: timeoutMs } : {}),
        },
      };
  }
}
