import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import {
  createGrpcTransport,
  Http2SessionManager,
} from "@connectrpc/connect-node";
import { silentLogger } from "../helpers/silent-logger.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApp } from "../../src/app/create-app.js";
import {
  ConfigRateLimitUnit,
  RateLimitRequestSchema,
  RateLimitResponse_Code as RlCode,
  RateLimitResponse_RateLimit_Unit as Unit,
  RateLimitService,
  type ConfigRateLimitConfigSchema,
  type RateLimitResponse,
} from "../../src/proto.js";
import { SettingsError } from "../../src/settings/settings-error.js";
import { loadSettings } from "../../src/settings/settings.js";
import {
  createTestCertificates,
  rateLimitConfigResource,
  rateLimitConfigTypeUrl,
  startAdsServer,
  undecodableResource,
  type AdsServer,
  type RecordedRequest,
} from "../helpers/ads-server.js";
import { windowAlignedClock } from "../helpers/aligned-clock.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";
import { waitFor } from "../helpers/wait-for.js";

type ConfigInit = MessageInitShape<typeof ConfigRateLimitConfigSchema>;

/** One domain with one rule `k` limited to `requestsPerUnit` per `unit`. */
const domainConfig = (
  name: string,
  domain: string,
  requestsPerUnit: number,
  unit = ConfigRateLimitUnit.MINUTE,
): ConfigInit => ({
  name,
  domain,
  descriptors: [{ key: "k", rateLimit: { unit, requestsPerUnit } }],
});

const resources = (...configs: ConfigInit[]) =>
  configs.map(rateLimitConfigResource);

/** The xDS env of the service under test, with fast backoff. */
const xdsEnv = (
  server: AdsServer,
  extra: Record<string, string> = {},
): Record<string, string> => ({
  CONFIG_TYPE: "GRPC_XDS_SOTW",
  CONFIG_GRPC_XDS_SERVER_URL: server.address,
  CONFIG_GRPC_XDS_NODE_ID: "it-node",
  XDS_CLIENT_BACKOFF_INITIAL_INTERVAL: "50ms",
  XDS_CLIENT_BACKOFF_MAX_INTERVAL: "200ms",
  XDS_CLIENT_BACKOFF_JITTER: "false",
  ...extra,
});

/** A Connect gRPC client of the service, closed with `close()`. */
function rlsClient(t: TestApp) {
  const baseUrl = `http://${t.addresses.grpc}`;
  const sessionManager = new Http2SessionManager(baseUrl);
  const client = createClient(
    RateLimitService,
    createGrpcTransport({ baseUrl, sessionManager }),
  );
  return {
    shouldRateLimit: (
      domain: string,
      value = "v",
    ): Promise<RateLimitResponse> =>
      client.shouldRateLimit(
        create(RateLimitRequestSchema, {
          domain,
          descriptors: [{ entries: [{ key: "k", value }] }],
        }),
      ),
    close: () => {
      sessionManager.abort();
    },
  };
}

const rlconfig = async (t: TestApp): Promise<string> =>
  (await fetch(`http://${t.addresses.debug}/rlconfig`)).text();

async function stat(t: TestApp, name: string): Promise<number> {
  const body = await (await fetch(`http://${t.addresses.debug}/stats`)).text();
  const line = body.split("\n").find((l) => l.startsWith(`${name}: `));
  return line === undefined ? 0 : Number(line.slice(name.length + 2));
}

const isAck = (version: string) => (r: RecordedRequest) =>
  r.request.versionInfo === version &&
  r.request.responseNonce !== "" &&
  r.request.errorDetail === undefined;

describe("xDS provider against a management server", () => {
  let server: AdsServer;
  let t: TestApp;
  let rls: ReturnType<typeof rlsClient>;

  beforeAll(async () => {
    server = await startAdsServer();
    server.push("1", resources(domainConfig("a-config", "a", 2)));
    t = await startTestApp(
      {},
      xdsEnv(server, {
        CONFIG_GRPC_XDS_NODE_METADATA: "cluster=it,zone=z1",
        CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS:
          "authorization:Bearer it-token,x-tenant:rl",
        HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: "true",
      }),
      undefined,
      // Three hits on a 2-per-minute rule: a clock 1 s into a minute keeps them in one window.
      { clock: windowAlignedClock(60) },
    );
    rls = rlsClient(t);
  });
  afterAll(async () => {
    rls.close();
    await t.stop();
    await server.stop();
  });

  it("sends node, type URL and extra headers, then ACKs version 1 before serving", async () => {
    const first = server.requests[0]!;
    expect(first.request.versionInfo).toBe("");
    expect(first.request.responseNonce).toBe("");
    expect(first.request.typeUrl).toBe(rateLimitConfigTypeUrl);
    expect(first.request.resourceNames).toEqual([]);
    expect(first.request.node?.id).toBe("it-node");
    expect(first.request.node?.metadata).toEqual({
      cluster: "it",
      zone: "z1",
    });
    expect(first.headers.get("authorization")).toBe("Bearer it-token");
    expect(first.headers.get("x-tenant")).toBe("rl");

    const ack = await server.waitForRequest(isAck("1"), "ACK of version 1");
    expect(ack.request.responseNonce).toBe("1");
    expect(ack.request.node?.id).toBe("it-node");

    expect(await rlconfig(t)).toBe(
      "a.k: unit=MINUTE requests_per_unit=2, shadow_mode: false, quota_mode: false\n",
    );
    const codes = [];
    for (let i = 0; i < 3; i++)
      codes.push((await rls.shouldRateLimit("a")).overallCode);
    expect(codes).toEqual([RlCode.OK, RlCode.OK, RlCode.OVER_LIMIT]);
    expect((await fetch(`http://${t.addresses.http}/healthcheck`)).status).toBe(
      200,
    );
  });

  it("version 2 adds a domain", async () => {
    server.push(
      "2",
      resources(
        domainConfig("a-config", "a", 2),
        domainConfig("b-config", "b", 1),
      ),
    );
    await server.waitForRequest(isAck("2"), "ACK of version 2");
    expect(await rlconfig(t)).toContain("b.k: unit=MINUTE requests_per_unit=1");
    const b = await rls.shouldRateLimit("b");
    expect(b.statuses[0]?.currentLimit?.requestsPerUnit).toBe(1);
  });

  it("version 3 changes a limit", async () => {
    server.push(
      "3",
      resources(
        domainConfig("a-config", "a", 5, ConfigRateLimitUnit.HOUR),
        domainConfig("b-config", "b", 1),
      ),
    );
    await server.waitForRequest(isAck("3"), "ACK of version 3");
    const a = await rls.shouldRateLimit("a", "other");
    expect(a.statuses[0]?.currentLimit).toMatchObject({
      requestsPerUnit: 5,
      unit: Unit.HOUR,
    });
    expect(a.statuses[0]?.limitRemaining).toBe(4);
  });

  it("version 4 removes a domain whose resource is left out", async () => {
    server.push(
      "4",
      resources(domainConfig("a-config", "a", 5, ConfigRateLimitUnit.HOUR)),
    );
    await server.waitForRequest(isAck("4"), "ACK of version 4");
    expect(await rlconfig(t)).toBe(
      "a.k: unit=HOUR requests_per_unit=5, shadow_mode: false, quota_mode: false\n",
    );
    const b = await rls.shouldRateLimit("b");
    expect(b.overallCode).toBe(RlCode.OK);
    expect(b.statuses[0]?.currentLimit).toBeUndefined();
  });

  it("NACKs an invalid resource, counts config_load_error and keeps the last good config", async () => {
    const errorsBefore = await stat(t, "ratelimit.service.config_load_error");
    server.push(
      "5",
      resources(domainConfig("a-config", "a", 9), {
        name: "bad-config",
        domain: "bad",
        descriptors: [{ key: "k", rateLimit: { requestsPerUnit: 1 } }],
      }),
    );
    const nonce = server.lastNonce;
    const nack = await server.waitForRequest(
      (r) => r.request.responseNonce === nonce,
      "NACK of version 5",
    );
    expect(nack.request.versionInfo).toBe("4");
    expect(nack.request.errorDetail?.message).toBe(
      "bad-config: invalid rate limit unit 'UNKNOWN'",
    );
    expect(await rlconfig(t)).toContain("a.k: unit=HOUR requests_per_unit=5");
    expect(await stat(t, "ratelimit.service.config_load_error")).toBe(
      errorsBefore + 1,
    );
    const a = await rls.shouldRateLimit("a", "other");
    expect(a.statuses[0]?.currentLimit?.requestsPerUnit).toBe(5);
  });

  it("NACKs a resource that does not decode and keeps the last good config", async () => {
    const errorsBefore = await stat(t, "ratelimit.service.config_load_error");
    server.push("6", [undecodableResource()]);
    const nonce = server.lastNonce;
    const nack = await server.waitForRequest(
      (r) => r.request.responseNonce === nonce,
      "NACK of version 6",
    );
    expect(nack.request.versionInfo).toBe("4");
    expect(nack.request.errorDetail?.message).toMatch(
      /^resources\[0\]: cannot decode ratelimit\.config\.ratelimit\.v3\.RateLimitConfig: /,
    );
    expect(await stat(t, "ratelimit.service.config_load_error")).toBe(
      errorsBefore + 1,
    );
    expect(await rlconfig(t)).toContain("a.k: unit=HOUR requests_per_unit=5");
  });

  it("reconnects with backoff when the server restarts and resumes from the last ACKed version", async () => {
    const streamsBefore = server.streamCount;
    const lastNonce = server.lastNonce;
    await server.stop();
    // The last good config keeps serving while the server is away.
    const during = await rls.shouldRateLimit("a", "during");
    expect(during.statuses[0]?.currentLimit?.requestsPerUnit).toBe(5);
    server.push(
      "7",
      resources(
        domainConfig("a-config", "a", 5, ConfigRateLimitUnit.HOUR),
        domainConfig("c-config", "c", 3),
      ),
    );
    await server.restart();
    const resumed = await server.waitForRequest(
      (r) => r.streamId > streamsBefore,
      "first request after the restart",
    );
    expect(resumed.request.versionInfo).toBe("4");
    expect(resumed.request.responseNonce).toBe(lastNonce);
    await server.waitForRequest(isAck("7"), "ACK of version 7");
    expect(await rlconfig(t)).toContain("c.k: unit=MINUTE requests_per_unit=3");
  });
});

describe("FORCE_START_WITHOUT_INITIAL_CONFIG with xDS", () => {
  let server: AdsServer;
  beforeAll(async () => {
    server = await startAdsServer();
  });
  afterAll(async () => {
    await server.stop();
  });

  it("false: the listeners open only after the first response", async () => {
    let started: TestApp | undefined;
    const starting = startTestApp(
      {},
      xdsEnv(server, { CONFIG_GRPC_XDS_NODE_ID: "wait-node" }),
    ).then((app) => (started = app));
    try {
      await server.waitForRequest(
        (r) => r.request.node?.id === "wait-node",
        "the waiting service's first request",
      );
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(started).toBeUndefined();
      server.push("1", resources(domainConfig("w", "w", 1)));
      const t = await starting;
      expect(await rlconfig(t)).toContain("w.k: unit=MINUTE");
    } finally {
      await (await starting).stop();
    }
  });

  it("true: the service starts at once, answers UNAVAILABLE and is unhealthy until a config arrives", async () => {
    const quiet = await startAdsServer();
    const t = await startTestApp(
      {},
      xdsEnv(quiet, {
        FORCE_START_WITHOUT_INITIAL_CONFIG: "true",
        HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: "true",
      }),
    );
    const rls = rlsClient(t);
    try {
      await quiet.waitForRequest(() => true, "first request");
      const err = await rls.shouldRateLimit("f").catch((e: unknown) => e);
      expect(ConnectError.from(err).code).toBe(Code.Unavailable);
      expect(
        (await fetch(`http://${t.addresses.http}/healthcheck`)).status,
      ).not.toBe(200);
      quiet.push("1", resources(domainConfig("f", "f", 1)));
      await quiet.waitForRequest(isAck("1"), "ACK of version 1");
      expect((await rls.shouldRateLimit("f")).overallCode).toBe(RlCode.OK);
      expect(
        (await fetch(`http://${t.addresses.http}/healthcheck`)).status,
      ).toBe(200);
    } finally {
      rls.close();
      await t.stop();
      await quiet.stop();
    }
  });
});

describe("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", () => {
  it("fails the stream on a larger response and retries, keeping no config", async () => {
    const server = await startAdsServer();
    server.push("1", resources(domainConfig("x".repeat(200), "big", 1)));
    const t = await startTestApp(
      {},
      xdsEnv(server, {
        XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: "64",
        FORCE_START_WITHOUT_INITIAL_CONFIG: "true",
      }),
    );
    try {
      await waitFor(() => server.streamCount >= 2, "a second stream");
      expect(
        server.requests.filter((r) => r.request.responseNonce !== ""),
      ).toEqual([]);
      expect(await rlconfig(t)).toBe("");
    } finally {
      await t.stop();
      await server.stop();
    }
  });
});

describe("xDS over TLS", () => {
  let dir: string;
  let server: AdsServer;
  let tlsEnv: Record<string, string>;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "rls-xds-tls-"));
    const certs = createTestCertificates(dir, "xds.test.local");
    server = await startAdsServer({
      tls: {
        cert: await readFile(certs.serverCert, "utf8"),
        key: await readFile(certs.serverKey, "utf8"),
        clientCa: await readFile(certs.caCert, "utf8"),
      },
    });
    server.push("1", resources(domainConfig("tls-config", "tls", 4)));
    tlsEnv = {
      CONFIG_GRPC_XDS_SERVER_USE_TLS: "true",
      CONFIG_GRPC_XDS_SERVER_TLS_CACERT: certs.caCert,
      CONFIG_GRPC_XDS_CLIENT_TLS_CERT: certs.clientCert,
      CONFIG_GRPC_XDS_CLIENT_TLS_KEY: certs.clientKey,
    };
  });
  afterAll(async () => {
    await server.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it("accepts the server when its certificate carries the SAN override", async () => {
    const t = await startTestApp(
      {},
      xdsEnv(server, {
        ...tlsEnv,
        CONFIG_GRPC_XDS_SERVER_TLS_SAN: "xds.test.local",
        CONFIG_GRPC_XDS_NODE_ID: "good-san",
      }),
    );
    try {
      expect(await rlconfig(t)).toContain("tls.k: unit=MINUTE");
      await server.waitForRequest(
        (r) => r.request.node?.id === "good-san" && isAck("1")(r),
        "ACK over TLS",
      );
    } finally {
      await t.stop();
    }
  });

  it("refuses a server whose certificate lacks the SAN, so no config arrives", async () => {
    const errorsBefore = server.tlsClientErrors;
    const t = await startTestApp(
      {},
      xdsEnv(server, {
        ...tlsEnv,
        CONFIG_GRPC_XDS_SERVER_TLS_SAN: "wrong.test.local",
        CONFIG_GRPC_XDS_NODE_ID: "wrong-san",
        FORCE_START_WITHOUT_INITIAL_CONFIG: "true",
      }),
    );
    try {
      // Two refused handshakes: the client retried with backoff and was refused again.
      await waitFor(
        () => server.tlsClientErrors >= errorsBefore + 2,
        "two refused TLS handshakes",
      );
      expect(
        server.requests.filter((r) => r.request.node?.id === "wrong-san"),
      ).toEqual([]);
      expect(await rlconfig(t)).toBe("");
    } finally {
      await t.stop();
    }
  });
});

describe("xDS settings checks", () => {
  it("rejects an invalid server address, a zero backoff and half a client key pair at once", async () => {
    const { settings } = loadSettings({
      BACKEND_TYPE: "memory",
      USE_PUSHSTATS: "false",
      CONFIG_TYPE: "GRPC_XDS_SOTW",
      CONFIG_GRPC_XDS_SERVER_URL: "http://xds:18000",
      XDS_CLIENT_BACKOFF_INITIAL_INTERVAL: "0s",
      CONFIG_GRPC_XDS_SERVER_USE_TLS: "true",
      CONFIG_GRPC_XDS_CLIENT_TLS_CERT: "/nonexistent/client.crt",
    });
    let error: unknown;
    try {
      await createApp(settings, { logger: silentLogger() });
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(SettingsError);
    expect((error as SettingsError).problems).toEqual([
      `CONFIG_GRPC_XDS_SERVER_URL="http://xds:18000": invalid xDS server address 'http://xds:18000': expected host:port, e.g. localhost:18000`,
      "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL: expected a duration greater than 0, e.g. 10s",
      "CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY: set both or neither",
      `CONFIG_GRPC_XDS_CLIENT_TLS_CERT="/nonexistent/client.crt": cannot read file`,
    ]);
  });
});
