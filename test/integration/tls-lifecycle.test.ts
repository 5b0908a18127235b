import { copyFileSync, readFileSync } from "node:fs";
import { connect as http2Connect } from "node:http2";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect as tlsConnect } from "node:tls";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  RateLimitResponse_Code as Code,
  RateLimitService,
} from "../../src/proto.js";
import { TestPki, type CertFiles } from "../helpers/certs.js";
import { GrpcJsRateLimitClient } from "../helpers/grpc-js-client.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";
import { freePort, repoRoot, spawnNode } from "../helpers/spawn-service.js";
import { waitFor } from "../helpers/wait-for.js";
import { request } from "../helpers/requests.js";

const config = `
domain: rl
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 100000 }
`;

function tlsClient(address: string, ca: string, client?: CertFiles) {
  return createClient(
    RateLimitService,
    createGrpcTransport({
      baseUrl: `https://${address}`,
      nodeOptions: {
        ca: readFileSync(ca),
        ...(client !== undefined
          ? { cert: readFileSync(client.cert), key: readFileSync(client.key) }
          : {}),
      },
    }),
  );
}

function peerSerial(
  port: number,
  ca: string,
  client: CertFiles,
): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = tlsConnect({
      host: "127.0.0.1",
      port,
      ca: readFileSync(ca),
      cert: readFileSync(client.cert),
      key: readFileSync(client.key),
      ALPNProtocols: ["h2"],
    });
    socket.once("secureConnect", () => {
      resolve(socket.getPeerCertificate().serialNumber);
      socket.destroy();
    });
    socket.once("error", reject);
  });
}

describe("gRPC over TLS with mutual TLS", () => {
  const pki = new TestPki();
  const ca = pki.ca("ca");
  const otherCa = pki.ca("other-ca");
  const server1 = pki.leaf("server1", ca, "DNS:localhost,IP:127.0.0.1");
  const server2 = pki.leaf("server2", ca, "DNS:localhost,IP:127.0.0.1");
  const goodClient = pki.leaf("client", ca, "DNS:proxy.example");
  const wrongSanClient = pki.leaf(
    "client-wrong-san",
    ca,
    "DNS:intruder.example",
  );
  const foreignClient = pki.leaf(
    "client-foreign",
    otherCa,
    "DNS:proxy.example",
  );
  const serverCert = join(pki.dir, "serving.crt");
  const serverKey = join(pki.dir, "serving.key");
  let t: TestApp;

  beforeAll(async () => {
    copyFileSync(server1.cert, serverCert);
    copyFileSync(server1.key, serverKey);
    t = await startTestApp(
      { "rl.yaml": config },
      {
        GRPC_SERVER_USE_TLS: "true",
        GRPC_SERVER_TLS_CERT: serverCert,
        GRPC_SERVER_TLS_KEY: serverKey,
        GRPC_CLIENT_TLS_CACERT: ca.cert,
        GRPC_CLIENT_TLS_SAN: "proxy.example",
      },
    );
  });
  afterAll(async () => {
    await t.stop();
  });

  it("serves a client with a certificate from the CA and the required SAN", async () => {
    const r = await tlsClient(
      t.addresses.grpc,
      ca.cert,
      goodClient,
    ).shouldRateLimit(request("rl", [["user", "a"]]));
    expect(r.overallCode).toBe(Code.OK);
  });

  it.each([
    ["no certificate", undefined],
    ["a certificate from another CA", foreignClient],
    ["a certificate without the required SAN", wrongSanClient],
  ])("refuses a client with %s", async (_what, client) => {
    await expect(
      tlsClient(t.addresses.grpc, ca.cert, client).shouldRateLimit(
        request("rl", [["user", "b"]]),
        { timeoutMs: 3000 },
      ),
    ).rejects.toThrow();
  });

  it("serves a rotated certificate to new handshakes, keeps the old one on a bad pair", async () => {
    const port = Number(t.addresses.grpc.split(":").pop());
    const before = await peerSerial(port, ca.cert, goodClient);
    // A bad pair (server2's certificate with server1's key) must be ignored.
    copyFileSync(server2.cert, serverCert);
    await new Promise((r) => setTimeout(r, 600));
    expect(await peerSerial(port, ca.cert, goodClient)).toBe(before);
    copyFileSync(server2.key, serverKey);
    const after = await waitFor(async () => {
      const serial = await peerSerial(port, ca.cert, goodClient);
      return serial !== before ? serial : undefined;
    }, "the rotated certificate");
    expect(after).not.toBe(before);
    const r = await tlsClient(
      t.addresses.grpc,
      ca.cert,
      goodClient,
    ).shouldRateLimit(request("rl", [["user", "c"]]));
    expect(r.overallCode).toBe(Code.OK);
  });
});

describe("gRPC on a unix socket", () => {
  it("serves calls on the socket and removes it at exit", async () => {
    const path = join(tmpdir(), `rls-${process.pid}-${Date.now()}.sock`);
    const t = await startTestApp({ "rl.yaml": config }, { GRPC_UDS: path });
    try {
      expect(t.addresses.grpc).toBe(`unix:${path}`);
      const client = new GrpcJsRateLimitClient(`unix:${path}`);
      try {
        const r = await client.shouldRateLimit(
          request("rl", [["user", "uds"]]),
        );
        expect(r.overallCode).toBe(Code.OK);
      } finally {
        client.close();
      }
    } finally {
      await t.stop();
    }
    const { existsSync } = await import("node:fs");
    expect(existsSync(path)).toBe(false);
  });
});

describe("maximum connection age", () => {
  it.each(["builtin", "node"])(
    "sends GOAWAY to a long-lived connection after the configured age (%s engine)",
    async (engine) => {
      const t = await startTestApp(
        { "rl.yaml": config },
        {
          GRPC_HTTP2_ENGINE: engine,
          GRPC_MAX_CONNECTION_AGE: "400ms",
          GRPC_MAX_CONNECTION_AGE_GRACE: "200ms",
        },
      );
      try {
        const session = http2Connect(`http://${t.addresses.grpc}`);
        const started = Date.now();
        const goaway = new Promise<number>((resolve) => {
          session.once("goaway", () => {
            resolve(Date.now() - started);
          });
        });
        const closed = new Promise<void>((resolve) =>
          session.once("close", () => {
            resolve();
          }),
        );
        const elapsedMs = await goaway;
        expect(elapsedMs).toBeGreaterThanOrEqual(300);
        await closed;
      } finally {
        await t.stop();
      }
    },
  );
});

describe("graceful shutdown", () => {
  it("finishes every in-flight call on SIGTERM and exits 0", async () => {
    const grpc = await freePort();
    const p = spawnNode("dist/src/main.js", [], {
      BACKEND_TYPE: "memory",
      HOST: "127.0.0.1",
      PORT: String(await freePort()),
      GRPC_HOST: "127.0.0.1",
      GRPC_PORT: String(grpc),
      DEBUG_HOST: "127.0.0.1",
      DEBUG_PORT: String(await freePort()),
      RUNTIME_ROOT: join(repoRoot, "examples"),
      RUNTIME_WATCH_ROOT: "false",
      LOG_LEVEL: "info",
    });
    try {
      await waitFor(
        () => p.output().includes("ratelimit started"),
        "the service to listen",
        20_000,
      );
      const client = new GrpcJsRateLimitClient(`127.0.0.1:${grpc}`);
      try {
        await client.shouldRateLimit(request("rl", [["user", "warm-up"]]));
        const calls = Array.from({ length: 200 }, (_, i) =>
          client.shouldRateLimit(request("rl", [["user", `u${i}`]])),
        );
        // Signal once the first answer is back: the rest are on the wire or being decided.
        await Promise.race(calls);
        p.child.kill("SIGTERM");
        const results = await Promise.allSettled(calls);
        expect(results.filter((r) => r.status === "rejected")).toEqual([]);
      } finally {
        client.close();
      }
      expect(await p.exited).toBe(0);
    } finally {
      if (p.child.exitCode === null) p.child.kill("SIGKILL");
    }
  });
});

describe("health", () => {
  it("keeps /healthcheck, gRPC Check and Watch in sync with the components", async () => {
    const t = await startTestApp(
      { "rl.yaml": config },
      { HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: "true" },
    );
    try {
      const { Health, HealthCheckResponse_ServingStatus: Serving } =
        await import("../../src/proto.js");
      const health = createClient(
        Health,
        createGrpcTransport({ baseUrl: `http://${t.addresses.grpc}` }),
      );
      const abort = new AbortController();
      const seen: number[] = [];
      const watching = (async () => {
        for await (const r of health.watch(
          { service: "ratelimit" },
          { signal: abort.signal },
        ))
          seen.push(r.status);
      })().catch(() => undefined);
      await waitFor(() => seen.length === 1, "the first Watch status");
      expect(seen).toEqual([Serving.SERVING]);
      expect(
        (await fetch(`http://${t.addresses.http}/healthcheck`)).status,
      ).toBe(200);

      // Removing the only file leaves no domain: the config component fails.
      const { rm } = await import("node:fs/promises");
      await rm(join(t.configDir, "rl.yaml"));
      await waitFor(() => seen.length === 2, "the NOT_SERVING update");
      expect(seen[1]).toBe(Serving.NOT_SERVING);
      const res = await fetch(`http://${t.addresses.http}/healthcheck`);
      expect(res.status).toBe(500);
      expect(await res.text()).toContain("config");
      expect((await health.check({ service: "ratelimit" })).status).toBe(
        Serving.NOT_SERVING,
      );

      await t.writeConfig("rl.yaml", config);
      await waitFor(() => seen.length === 3, "the SERVING update");
      expect(seen[2]).toBe(Serving.SERVING);
      t.app.health.fail("sigterm");
      await waitFor(() => seen.length === 4, "the termination update");
      expect(seen[3]).toBe(Serving.NOT_SERVING);
      abort.abort();
      await watching;
    } finally {
      await t.stop();
    }
  });
});
