import { TestPki } from "./certs.js";
import {
  createSecureServer,
  createServer,
  type Http2SecureServer,
  type Http2Server,
  type Http2Session,
} from "node:http2";
import type { AddressInfo } from "node:net";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { anyPack, type Any } from "@bufbuild/protobuf/wkt";
import type { ConnectRouter } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import {
  AggregatedDiscoveryService,
  ConfigRateLimitConfigSchema,
  DiscoveryResponseSchema,
  type DiscoveryRequest,
  type DiscoveryResponse,
} from "../../src/proto.js";
import { waitFor } from "./wait-for.js";

/** The type URL the service requests (RateLimitConfig). */
export const rateLimitConfigTypeUrl =
  "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/** One request received by the test management server. */
export interface RecordedRequest {
  /** Increments per stream opened (1 for the first stream, 2 after a reconnect, …). */
  readonly streamId: number;
  readonly request: DiscoveryRequest;
  /** Request headers of the stream (gRPC metadata), lower-case names. */
  readonly headers: Headers;
}

/** TLS for the test management server (PEM text). */
export interface AdsServerTls {
  readonly cert: string;
  readonly key: string;
  /** When set, client certificates signed by this CA are required. */
  readonly clientCa?: string;
}

/** Packs a `RateLimitConfig` resource as the management server sends it. */
export function rateLimitConfigResource(
  init: MessageInitShape<typeof ConfigRateLimitConfigSchema>,
): Any {
  return anyPack(
    ConfigRateLimitConfigSchema,
    create(ConfigRateLimitConfigSchema, init),
  );
}

/** A resource with the right type URL whose bytes are not a valid message. */
export function undecodableResource(): Any {
  return {
    $typeName: "google.protobuf.Any",
    typeUrl: rateLimitConfigTypeUrl,
    // Field 1 (name), wire type 2, length 10, but only 1 byte follows.
    value: new Uint8Array([0x0a, 0x0a, 0x41]),
  };
}

/** Per-stream outbox: responses waiting to be yielded by the handler. */
class Outbox {
  private readonly queue: DiscoveryResponse[] = [];
  private wake: (() => void) | undefined;
  ended = false;

  send(response: DiscoveryResponse): void {
    this.queue.push(response);
    this.notify();
  }

  end(): void {
    this.ended = true;
    this.notify();
  }

  async take(): Promise<DiscoveryResponse | undefined> {
    for (;;) {
      const next = this.queue.shift();
      if (next !== undefined) return next;
      if (this.ended) return undefined;
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

/**
 * The state of a state-of-the-world management server for one type, independent of the
 * transport: its `routes` go to a Connect router (an HTTP/2 server, or `createRouterTransport`
 * in unit tests). It behaves like a go-control-plane snapshot server: a new stream gets the
 * current snapshot after its first request, and every {@link AdsManagement.push} goes to all
 * open streams.
 */
export interface AdsManagement {
  /** Registers the ADS service on a Connect router. */
  readonly routes: (router: ConnectRouter) => void;
  /** Every request received, in arrival order, across streams and restarts. */
  readonly requests: readonly RecordedRequest[];
  /** Number of streams opened so far. */
  readonly streamCount: number;
  /** Nonce of the last response sent ("" before the first). */
  readonly lastNonce: string;
  /**
   * Sets the snapshot and pushes it at once to every open stream; streams opened later get it
   * after their first request. Each response has a fresh nonce (`"1"`, `"2"`, …).
   */
  readonly push: (versionInfo: string, resources: readonly Any[]) => void;
  /** Sends one response as given (plus a fresh nonce) to every open stream; the snapshot stays. */
  readonly sendRaw: (
    init: MessageInitShape<typeof DiscoveryResponseSchema>,
  ) => void;
  /** Ends every open stream with status OK, as a server shutting a stream down does. */
  readonly endStreams: () => void;
  /** Waits for a request matching `predicate` (searching all recorded ones). */
  readonly waitForRequest: (
    predicate: (r: RecordedRequest) => boolean,
    description: string,
    timeoutMs?: number,
  ) => Promise<RecordedRequest>;
}

/** Creates the transport-independent management server state; see {@link AdsManagement}. */
export function createAdsManagement(): AdsManagement {
  const requests: RecordedRequest[] = [];
  const outboxes = new Set<Outbox>();
  let snapshot: { versionInfo: string; resources: readonly Any[] } | undefined;
  let nonce = 0;
  let lastNonce = "";
  let streamCount = 0;

  const response = (
    init: MessageInitShape<typeof DiscoveryResponseSchema> = {
      versionInfo: snapshot?.versionInfo ?? "",
      resources: [...(snapshot?.resources ?? [])],
      typeUrl: rateLimitConfigTypeUrl,
    },
  ): DiscoveryResponse => {
    lastNonce = String(++nonce);
    return create(DiscoveryResponseSchema, { ...init, nonce: lastNonce });
  };

  const routes = (router: ConnectRouter): void => {
    router.service(AggregatedDiscoveryService, {
      async *streamAggregatedResources(incoming, context) {
        const streamId = ++streamCount;
        const outbox = new Outbox();
        outboxes.add(outbox);
        void (async () => {
          let first = true;
          for await (const request of incoming) {
            requests.push({
              streamId,
              request,
              headers: context.requestHeader,
            });
            if (first && snapshot !== undefined) outbox.send(response());
            first = false;
          }
        })().catch(() => {
          // The stream was torn down (server stopped, client gone): nothing to record.
        });
        try {
          for (;;) {
            const next = await outbox.take();
            if (next === undefined) break;
            yield next;
          }
        } finally {
          outboxes.delete(outbox);
          outbox.end();
        }
      },
    });
  };

  return {
    routes,
    requests,
    get streamCount() {
      return streamCount;
    },
    get lastNonce() {
      return lastNonce;
    },
    push(versionInfo, resources) {
      snapshot = { versionInfo, resources };
      for (const outbox of outboxes) outbox.send(response());
    },
    sendRaw(init) {
      for (const outbox of outboxes) outbox.send(response(init));
    },
    endStreams() {
      for (const outbox of outboxes) outbox.end();
    },
    waitForRequest(predicate, description, timeoutMs = 5_000) {
      return waitFor(() => requests.find(predicate), description, timeoutMs);
    },
  };
}

/** A management server listening on loopback; see {@link startAdsServer}. */
export interface AdsServer extends AdsManagement {
  /** `127.0.0.1:<port>`, the value for `CONFIG_GRPC_XDS_SERVER_URL`. */
  readonly address: string;
  /** TLS handshakes that failed (e.g. the client refused the server certificate). */
  readonly tlsClientErrors: number;
  /** Stops listening and drops every connection (the client sees the stream fail). */
  stop(): Promise<void>;
  /** Listens again on the same port with the same snapshot. */
  restart(): Promise<void>;
}

/**
 * Starts an {@link AdsManagement} on 127.0.0.1 (port 0 unless given) over
 * `http2.createServer` (h2c) or `createSecureServer`, through `connectNodeAdapter`: the peer is
 * built from the same generated code as the service. Call `stop()` in `afterAll`.
 */
export async function startAdsServer(
  options: { readonly tls?: AdsServerTls; readonly port?: number } = {},
): Promise<AdsServer> {
  const management = createAdsManagement();
  const handler = connectNodeAdapter({ routes: management.routes });
  let server: Http2Server | Http2SecureServer | undefined;
  const sessions = new Set<Http2Session>();
  let port = options.port ?? 0;
  let tlsClientErrors = 0;

  const listen = async (): Promise<void> => {
    const tls = options.tls;
    const s: Http2Server | Http2SecureServer =
      tls === undefined
        ? createServer(handler)
        : createSecureServer(
            {
              cert: tls.cert,
              key: tls.key,
              ...(tls.clientCa !== undefined
                ? {
                    ca: tls.clientCa,
                    requestCert: true,
                    rejectUnauthorized: true,
                  }
                : {}),
            },
            handler,
          );
    s.on("session", (session: Http2Session) => {
      sessions.add(session);
      session.once("close", () => sessions.delete(session));
    });
    s.on("tlsClientError", () => {
      tlsClientErrors++;
    });
    await new Promise<void>((resolve, reject) => {
      s.once("error", reject);
      s.listen(port, "127.0.0.1", () => {
        s.off("error", reject);
        resolve();
      });
    });
    port = (s.address() as AddressInfo).port;
    server = s;
  };

  const stop = async (): Promise<void> => {
    const s = server;
    server = undefined;
    if (s === undefined) return;
    management.endStreams();
    const closed = new Promise<void>((resolve) =>
      s.close(() => {
        resolve();
      }),
    );
    for (const session of sessions) session.destroy();
    sessions.clear();
    await closed;
  };

  await listen();
  return {
    routes: management.routes,
    requests: management.requests,
    get streamCount() {
      return management.streamCount;
    },
    get lastNonce() {
      return management.lastNonce;
    },
    push: management.push,
    sendRaw: management.sendRaw,
    endStreams: management.endStreams,
    waitForRequest: management.waitForRequest,
    get address() {
      return `127.0.0.1:${port}`;
    },
    get tlsClientErrors() {
      return tlsClientErrors;
    },
    stop,
    restart: listen,
  };
}

/** PEM files of a test PKI, as paths. */
export interface TestCertificates {
  readonly caCert: string;
  readonly serverCert: string;
  readonly serverKey: string;
  readonly clientCert: string;
  readonly clientKey: string;
}

/**
 * Creates a CA, a server certificate carrying `serverSan` as its only DNS SAN and a client
 * certificate, with `openssl` (EC P-256, valid one day), in `dir`.
 */
export function createTestCertificates(
  dir: string,
  serverSan: string,
): TestCertificates {
  const pki = new TestPki(dir);
  const ca = pki.ca("ca");
  const server = pki.leaf("server", ca, `DNS:${serverSan}`, "server");
  const client = pki.leaf("client", ca, undefined, "client");
  return {
    caCert: ca.cert,
    serverCert: server.cert,
    serverKey: server.key,
    clientCert: client.cert,
    clientKey: client.key,
  };
}
