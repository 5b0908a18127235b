// The override audit log's actor from the caller's TLS client certificate (issue 25: "who: the
// caller's mTLS identity or a header"), on the gRPC port with mutual TLS and ADMIN_ENABLED, on
// both HTTP/2 engines.

import { readFileSync } from "node:fs";
import { createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  AdminService,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../../src/proto.js";
import { TestPki, type CertFiles } from "../helpers/certs.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";
import { spawnNode } from "../helpers/spawn-service.js";

const config = `
domain: api
descriptors:
  - key: tenant
    rate_limit: { unit: minute, requests_per_unit: 10 }
`;

const pki = new TestPki();
const ca = pki.ca("ca");
const server = pki.leaf("server", ca, "DNS:localhost,IP:127.0.0.1", "server");
const spiffeClient = pki.leaf(
  "ops-cli",
  ca,
  "URI:spiffe://example.org/ns/ops/sa/cli,DNS:cli.example",
  "client",
);
const dnsClient = pki.leaf("dns-cli", ca, "DNS:deployer.example", "client");
const cnClient = pki.leaf("cn-only", ca, undefined, "client");

afterAll(() => {
  pki.remove();
});

describe.each(["builtin", "node"])(
  "the audit actor over mutual TLS (GRPC_HTTP2_ENGINE=%s)",
  (engine) => {
    let t: TestApp;
    beforeAll(async () => {
      t = await startTestApp(
        { "api.yaml": config },
        {
          GRPC_HTTP2_ENGINE: engine,
          ADMIN_ENABLED: "true",
          GRPC_SERVER_USE_TLS: "true",
          GRPC_SERVER_TLS_CERT: server.cert,
          GRPC_SERVER_TLS_KEY: server.key,
          GRPC_CLIENT_TLS_CACERT: ca.cert,
        },
      );
    });
    afterAll(async () => {
      await t.stop();
    });

    function admin(client: CertFiles): Client<typeof AdminService> {
      return createClient(
        AdminService,
        createGrpcTransport({
          baseUrl: `https://${t.addresses.grpc}`,
          nodeOptions: {
            ca: readFileSync(ca.cert),
            cert: readFileSync(client.cert),
            key: readFileSync(client.key),
          },
        }),
      );
    }

    async function setBy(
      client: CertFiles,
      tenant: string,
      header?: string,
    ): Promise<string> {
      const answer = await admin(client).setOverride(
        {
          domain: "api",
          entries: [{ key: "tenant", value: tenant }],
          limit: { requestsPerUnit: 100, unit: Unit.MINUTE },
          reason: "mTLS actor test",
        },
        header !== undefined
          ? { headers: { "x-ratelimit-actor": header } }
          : {},
      );
      return answer.override?.actor ?? "";
    }

    it("records the certificate's URI SAN (a SPIFFE ID) as the actor", async () => {
      expect(await setBy(spiffeClient, "a")).toBe(
        "spiffe://example.org/ns/ops/sa/cli",
      );
    });

    it("records the header and the proven identity when both are given", async () => {
      expect(await setBy(spiffeClient, "b", "alice")).toBe(
        "alice via spiffe://example.org/ns/ops/sa/cli",
      );
    });

    it("falls back to the DNS SAN, then the subject CN", async () => {
      expect(await setBy(dnsClient, "c")).toBe("deployer.example");
      expect(await setBy(cnClient, "d")).toBe("cn-only");
    });

    it("records the identity of bin/ratelimit-client's certificate over https -admin_url", async () => {
      const client = spawnNode(
        "dist/src/cli/client.js",
        [
          "-set-override",
          "-admin_url",
          `https://${t.addresses.grpc}`,
          "-grpc-server-ca-file",
          ca.cert,
          "-grpc-cert-file",
          spiffeClient.cert,
          "-grpc-key-file",
          spiffeClient.key,
          "-actor",
          "",
          "-domain",
          "api",
          "-descriptors",
          "tenant=e",
          "-limit",
          "9/minute",
        ],
        {},
      );
      expect(await client.exited).toBe(0);
      expect(client.output()).toContain(
        "set by spiffe://example.org/ns/ops/sa/cli",
      );
    });

    it("writes the same actors to the audit log", async () => {
      const log = await admin(cnClient).getAuditLog({ domain: "api" });
      const byTenant = new Map(
        log.records.map((r) => [r.after?.entries[0]?.value ?? "", r.actor]),
      );
      expect(byTenant.get("a")).toBe("spiffe://example.org/ns/ops/sa/cli");
      expect(byTenant.get("b")).toBe(
        "alice via spiffe://example.org/ns/ops/sa/cli",
      );
      expect(byTenant.get("c")).toBe("deployer.example");
      expect(byTenant.get("d")).toBe("cn-only");
    });
  },
);
