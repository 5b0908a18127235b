import { readFile } from "node:fs/promises";
import { isIP } from "node:net";
import * as tls from "node:tls";
import type { SecureClientSessionOptions } from "node:http2";
import { create } from "@bufbuild/protobuf";
import { createClient, type Transport } from "@connectrpc/connect";
import {
  createGrpcTransport,
  Http2SessionManager,
} from "@connectrpc/connect-node";
import type { Logger } from "pino";
import {
  AggregatedDiscoveryService,
  DiscoveryRequestSchema,
  NodeSchema,
  StatusSchema,
  type DiscoveryRequest,
  type DiscoveryResponse,
  type Node,
} from "../../proto.js";
import type { Backoff } from "../../util/backoff.js";

/**
 * Schedules `callback` once after `delayMs` milliseconds and returns a function that cancels it.
 * The default is a plain (ref'd) `setTimeout`: while the client waits to reconnect, the process
 * must stay alive even when nothing else is running yet (startup waiting for the first config).
 */
export type ScheduleTimer = (
  callback: () => void,
  delayMs: number,
) => () => void;

/** TLS towards the management server; present = TLS on (`CONFIG_GRPC_XDS_SERVER_USE_TLS`). */
export interface AdsTlsOptions {
  /**
   * PEM file of CA certificates trusted in addition to Node's bundled roots
   * (`CONFIG_GRPC_XDS_SERVER_TLS_CACERT`); "" trusts the bundled roots only.
   * @defaultValue ""
   */
  readonly caFile?: string;
  /**
   * PEM client certificate chain presented to the server (`CONFIG_GRPC_XDS_CLIENT_TLS_CERT`);
   * "" presents none. Needs `keyFile`.
   * @defaultValue ""
   */
  readonly certFile?: string;
  /** PEM private key of `certFile` (`CONFIG_GRPC_XDS_CLIENT_TLS_KEY`). @defaultValue "" */
  readonly keyFile?: string;
  /**
   * Name the server certificate must carry (SAN), instead of the host of the server address
   * (`CONFIG_GRPC_XDS_SERVER_TLS_SAN`); also sent as SNI unless it is an IP address. Same as
   * upstream `xds_grpc_sotw_provider.go`, which sets it as the Go `tls.Config.ServerName`.
   * @defaultValue "" (verify the host of the server address)
   */
  readonly serverName?: string;
}

/** Options of {@link createAdsConnection}. */
export interface AdsConnectionOptions {
  /**
   * Management server address, `host:port` as a gRPC dial target
   * (`CONFIG_GRPC_XDS_SERVER_URL`); a `dns:///` or `passthrough:///` prefix is accepted and a
   * missing port means 443. See {@link toAdsBaseUrl}.
   */
  readonly serverUrl: string;
  /** TLS settings; undefined for cleartext HTTP/2 (h2c). */
  readonly tls?: AdsTlsOptions | undefined;
  /**
   * Largest response message accepted, in bytes; a larger one fails the stream, which is then
   * re-opened with backoff (`XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES`; 0 means the gRPC default).
   * @defaultValue 4 MiB (4_194_304), grpc-go's default receive limit
   */
  readonly maxReceiveBytes?: number;
}

/** One HTTP/2 connection to the management server and the Connect transport over it. */
export interface AdsConnection {
  /** gRPC transport whose calls use this connection. */
  readonly transport: Transport;
  /**
   * Opens the connection (TCP, TLS handshake, HTTP/2 settings).
   * @throws the connection error, e.g. a refused connection or a certificate that fails
   *   verification
   */
  connect(): Promise<void>;
  /** Closes the connection and every stream on it; idempotent. */
  close(): void;
}

/** grpc-go's default limit on received messages. */
const defaultMaxReceiveBytes = 4 * 1024 * 1024;

/**
 * Turns a gRPC dial target into the base URL of the Connect transport: `https://host:port` with
 * TLS, `http://host:port` (h2c) without.
 *
 * @throws Error naming the address when it is not `host[:port]` (after an optional `dns:///` or
 *   `passthrough:///` prefix)
 */
export function toAdsBaseUrl(serverUrl: string, useTls: boolean): string {
  let target = serverUrl.trim();
  for (const prefix of ["dns:///", "passthrough:///"]) {
    if (target.startsWith(prefix)) target = target.slice(prefix.length);
  }
  const invalid = () =>
    new Error(
      `invalid xDS server address '${serverUrl}': expected host:port, e.g. localhost:18000`,
    );
  if (target === "" || /[/?#@\s]/.test(target)) throw invalid();
  // A bare IPv6 address needs brackets; without an explicit `:port`, gRPC's default 443 applies.
  if (!target.startsWith("[") && target.split(":").length > 2) throw invalid();
  if (!/^(\[[^\]]*\]|[^:[\]]+):\d+$/.test(target)) target += ":443";
  const scheme = useTls ? "https" : "http";
  let url: URL;
  try {
    url = new URL(`${scheme}://${target}`);
  } catch {
    throw invalid();
  }
  if (url.hostname === "") throw invalid();
  return `${scheme}://${url.host}`;
}

/**
 * Creates one connection to the management server: a Connect gRPC transport over its own
 * `Http2SessionManager`, so that {@link AdsConnection.close} really drops the connection (the
 * reference closes its `grpc.ClientConn` before redialling). TLS files are read on every call,
 * so rotated certificates are picked up at the next reconnect.
 *
 * @throws Error when the address is invalid ({@link toAdsBaseUrl}) or a TLS file cannot be read
 */
export async function createAdsConnection(
  options: AdsConnectionOptions,
): Promise<AdsConnection> {
  const baseUrl = toAdsBaseUrl(options.serverUrl, options.tls !== undefined);
  const nodeOptions =
    options.tls === undefined ? {} : await loadTlsOptions(options.tls);
  const sessionManager = new Http2SessionManager(baseUrl, {}, nodeOptions);
  const maxReceiveBytes =
    options.maxReceiveBytes !== undefined && options.maxReceiveBytes > 0
      ? options.maxReceiveBytes
      : defaultMaxReceiveBytes;
  const transport = createGrpcTransport({
    baseUrl,
    sessionManager,
    readMaxBytes: maxReceiveBytes,
  });
  return {
    transport,
    async connect() {
      const state = await sessionManager.connect();
      if (state === "error") {
        const reason = sessionManager.error();
        throw reason instanceof Error
          ? reason
          : new Error(`cannot connect to ${baseUrl}`, { cause: reason });
      }
    },
    close() {
      sessionManager.abort();
    },
  };
}

/**
 * The roots Node trusts by default: bundled, plus `NODE_EXTRA_CA_CERTS` and, with
 * `--use-system-ca`, the system store (Node ≥ 22.15; the bundled roots before).
 */
function defaultCaCertificates(): readonly string[] {
  // Widened on purpose: the typings assume the current Node, the engines range starts earlier.
  const { getCACertificates } = tls as {
    getCACertificates?: typeof tls.getCACertificates;
  };
  return getCACertificates !== undefined
    ? getCACertificates("default")
    : tls.rootCertificates;
}

async function loadTlsOptions(
  settings: AdsTlsOptions,
): Promise<SecureClientSessionOptions> {
  const options: SecureClientSessionOptions = {};
  if (settings.caFile !== undefined && settings.caFile !== "") {
    // Node's `ca` replaces the default roots; the reference adds the CA to the system pool.
    options.ca = [
      ...defaultCaCertificates(),
      await readFile(settings.caFile, "utf8"),
    ];
  }
  if (settings.certFile !== undefined && settings.certFile !== "") {
    options.cert = await readFile(settings.certFile);
  }
  if (settings.keyFile !== undefined && settings.keyFile !== "") {
    options.key = await readFile(settings.keyFile);
  }
  const serverName = settings.serverName ?? "";
  if (serverName !== "") {
    // SNI must not be an IP address (RFC 6066); the identity check below still applies.
    if (isIP(serverName) === 0) options.servername = serverName;
    options.checkServerIdentity = (_host: string, cert: tls.PeerCertificate) =>
      tls.checkServerIdentity(serverName, cert);
  }
  return options;
}

/** The provider's decision on one response: ACK, or NACK with the reason. */
export type AdsVerdict =
  { readonly ok: true } | { readonly ok: false; readonly message: string };

/** Options of {@link AdsStream}. */
export interface AdsStreamOptions {
  /** Management server address, for logs only (the connection is built by `connect`). */
  readonly serverUrl: string;
  /**
   * `Node.id` of every request (`CONFIG_GRPC_XDS_NODE_ID`).
   * @defaultValue "default" (in settings)
   */
  readonly nodeId: string;
  /**
   * `Node.metadata` string fields of every request (`CONFIG_GRPC_XDS_NODE_METADATA`).
   * @defaultValue \{\}
   */
  readonly nodeMetadata?: Readonly<Record<string, string>>;
  /** Resource type requested, e.g. the `RateLimitConfig` type URL. */
  readonly typeUrl: string;
  /**
   * Extra request headers (gRPC metadata) on the stream, e.g. authorization
   * (`CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS`). Values are never logged.
   * @defaultValue \{\}
   */
  readonly headers?: Readonly<Record<string, string>>;
  /** Opens one connection per attempt; {@link createAdsConnection} in production. */
  readonly connect: () => Promise<AdsConnection>;
  /** Waits between attempts; reset when a response arrives. */
  readonly backoff: Backoff;
  /**
   * Processes one response of `typeUrl` (decode, load, deliver) and says whether to ACK it.
   * Called in order, one at a time; the ACK or NACK is sent after it returns. If it throws,
   * the response is NACKed with the error message.
   */
  readonly onResponse: (response: DiscoveryResponse) => AdsVerdict;
  /** Logger for connection state, ACKs and NACKs. */
  readonly logger: Logger;
  /** Timer for the backoff waits; tests inject a fake. @defaultValue `setTimeout` */
  readonly schedule?: ScheduleTimer;
}

const defaultSchedule: ScheduleTimer = (callback, delayMs) => {
  const timer = setTimeout(callback, delayMs);
  return () => {
    clearTimeout(timer);
  };
};

/**
 * State-of-the-world client of one resource type over ADS
 * (`envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources`), in the
 * shape of upstream `xds_grpc_sotw_provider.go` over go-control-plane `pkg/client/sotw/v3`:
 *
 * - connect, open the stream, send a request with the node, the type URL, no resource names
 *   (wildcard), the last ACKed `version_info` and the last received `response_nonce`;
 * - for each response: `onResponse`, then ACK (`version_info` = the response's) or NACK
 *   (`version_info` = the last ACKed one, `error_detail.message` = the reason), both with the
 *   response's nonce. Responses of another (non-empty) type URL are logged and ignored, as
 *   Envoy does;
 * - when the connection or stream fails (or the server ends it), close the connection, wait
 *   {@link AdsStreamOptions.backoff} and start again. Version and nonce survive reconnects.
 *
 * The reference dials with no timeout and retries connection failures inside grpc-go; here a
 * failed connection is a failed attempt like a failed stream, and waits the same backoff.
 */
export class AdsStream {
  private readonly options: AdsStreamOptions;
  private readonly logger: Logger;
  private readonly schedule: ScheduleTimer;
  private readonly node: Node;
  private versionInfo = "";
  private responseNonce = "";
  private running: Promise<void> | undefined;
  private closed = false;
  /** Ends the current attempt (connection, stream or backoff wait) at once. */
  private interrupt: (() => void) | undefined;

  constructor(options: AdsStreamOptions) {
    this.options = options;
    this.logger = options.logger;
    this.schedule = options.schedule ?? defaultSchedule;
    this.node = create(NodeSchema, {
      id: options.nodeId,
      metadata: { ...options.nodeMetadata },
    });
  }

  /** Version of the last ACKed response; "" before the first. */
  get lastAcceptedVersion(): string {
    return this.versionInfo;
  }

  /** Nonce of the last received response; "" before the first. */
  get lastNonce(): string {
    return this.responseNonce;
  }

  /** Starts the connect / stream / backoff loop in the background; later calls do nothing. */
  start(): void {
    if (this.closed || this.running !== undefined) return;
    this.running = this.run();
  }

  /** Stops the loop, closing the stream and connection; resolves when it has ended. Idempotent. */
  async close(): Promise<void> {
    this.closed = true;
    this.interrupt?.();
    await this.running;
  }

  /** A method, not a field read, so the compiler does not narrow it across awaits. */
  private isClosed(): boolean {
    return this.closed;
  }

  private async run(): Promise<void> {
    this.logger.info(
      { url: this.options.serverUrl },
      "starting xds client connection for rate limit configurations",
    );
    while (!this.isClosed()) {
      await this.attempt();
      if (this.isClosed()) break;
      const delayMs = this.options.backoff.next();
      this.logger.warn(
        {
          url: this.options.serverUrl,
          delayMs,
          attempt: this.options.backoff.attempt,
        },
        "reconnecting to xds management server after backoff",
      );
      await this.sleep(delayMs);
    }
  }

  private sleep(delayMs: number): Promise<void> {
    return new Promise((resolve) => {
      let done = false;
      const finish = () => {
        if (done) return;
        done = true;
        this.interrupt = undefined;
        resolve();
      };
      let cancel: () => void = () => undefined;
      this.interrupt = () => {
        cancel();
        finish();
      };
      // A timer that fires synchronously has already cleared `interrupt` in `finish`.
      cancel = this.schedule(finish, delayMs);
    });
  }

  /** One connection and stream, until either fails; never throws. */
  private async attempt(): Promise<void> {
    const abort = new AbortController();
    const requests = new RequestQueue();
    let connection: AdsConnection | undefined;
    this.interrupt = () => {
      abort.abort();
      connection?.close();
    };
    try {
      this.logger.info(
        { url: this.options.serverUrl },
        "dialing xds management server",
      );
      try {
        connection = await this.options.connect();
        if (this.isClosed()) return;
        await connection.connect();
      } catch (err) {
        if (!this.isClosed()) {
          this.logger.error(
            { err, url: this.options.serverUrl },
            "error initializing grpc connection to xds management server",
          );
        }
        return;
      }
      if (this.isClosed()) return;
      this.logger.info(
        { url: this.options.serverUrl },
        "connection to xds management server is successful",
      );
      requests.push(this.request());
      const client = createClient(
        AggregatedDiscoveryService,
        connection.transport,
      );
      const responses = client.streamAggregatedResources(requests, {
        signal: abort.signal,
        headers: { ...this.options.headers },
      });
      let received = false;
      for await (const response of responses) {
        if (!received) {
          received = true;
          // The server answers: the connection works, so the next failure starts from the
          // initial interval again (the reference never resets).
          this.options.backoff.reset();
        }
        this.handle(response, requests);
      }
      if (!this.isClosed()) {
        this.logger.error(
          { url: this.options.serverUrl, reason: "stream closed by server" },
          "failed to receive configuration from xds management server",
        );
      }
    } catch (err) {
      if (!this.isClosed()) {
        this.logger.error(
          { err, url: this.options.serverUrl },
          "failed to receive configuration from xds management server",
        );
      }
    } finally {
      this.interrupt = undefined;
      requests.end();
      abort.abort();
      connection?.close();
    }
  }

  private handle(response: DiscoveryResponse, requests: RequestQueue): void {
    const typeUrl = this.options.typeUrl;
    // On a stream that asked for one type, a response without a type URL can only be that type.
    if (response.typeUrl !== typeUrl && response.typeUrl !== "") {
      this.logger.warn(
        { typeUrl: response.typeUrl, expected: typeUrl, nonce: response.nonce },
        "ignoring xds response of an unrequested type",
      );
      return;
    }
    this.responseNonce = response.nonce;
    let verdict: AdsVerdict;
    try {
      verdict = this.options.onResponse(response);
    } catch (err) {
      // A bug in processing must not kill the stream; reject the response instead.
      this.logger.error({ err }, "unexpected error processing xds response");
      verdict = {
        ok: false,
        message: err instanceof Error ? err.message : String(err),
      };
    }
    if (verdict.ok) {
      this.versionInfo = response.versionInfo;
      this.logger.debug(
        { version: response.versionInfo, nonce: response.nonce },
        "acking xds response",
      );
      requests.push(this.request());
    } else {
      this.logger.warn(
        {
          version: response.versionInfo,
          nonce: response.nonce,
          acceptedVersion: this.versionInfo,
          error: verdict.message,
        },
        "nacking xds response",
      );
      requests.push(this.request(verdict.message));
    }
  }

  /** A request with the current version and nonce; a NACK when `errorMessage` is given. */
  private request(errorMessage?: string): DiscoveryRequest {
    return create(DiscoveryRequestSchema, {
      versionInfo: this.versionInfo,
      node: this.node,
      typeUrl: this.options.typeUrl,
      responseNonce: this.responseNonce,
      ...(errorMessage !== undefined
        ? { errorDetail: create(StatusSchema, { message: errorMessage }) }
        : {}),
    });
  }
}

/**
 * The request side of the bidi stream: requests pushed by the client, ended on teardown. Iterated
 * through an async generator, because Connect needs `throw()` and `return()` on the iterator.
 */
class RequestQueue implements AsyncIterable<DiscoveryRequest> {
  private readonly items: DiscoveryRequest[] = [];
  private wake: (() => void) | undefined;
  private ended = false;

  push(item: DiscoveryRequest): void {
    if (this.ended) return;
    this.items.push(item);
    this.notify();
  }

  end(): void {
    this.ended = true;
    this.items.length = 0;
    this.notify();
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<DiscoveryRequest, void> {
    for (;;) {
      const item = this.items.shift();
      if (item !== undefined) {
        yield item;
        continue;
      }
      if (this.ended) return;
      await new Promise<void>((resolve) => {
        this.wake = resolve;
      });
    }
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = undefined;
    wake?.();
  }
}
