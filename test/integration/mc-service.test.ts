import { status as grpcStatus, type ServiceError } from "@grpc/grpc-js";
import { Client } from "memjs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RateLimitResponse_Code as Code } from "../../src/proto.js";
import { GrpcJsRateLimitClient } from "../helpers/grpc-js-client.js";
import {
  startMemcached,
  type MemcachedServer,
} from "../helpers/memcached-server.js";
import { windowAlignedClock } from "../helpers/aligned-clock.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";
import { jsonRequest, request } from "../helpers/requests.js";

const config = `
domain: svc
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: plan
    rate_limit: { unit: year, requests_per_unit: 100 }
`;

describe("the service with BACKEND_TYPE=mc over gRPC", () => {
  let nodes: MemcachedServer[] = [];
  let t: TestApp | undefined;
  let client: GrpcJsRateLimitClient | undefined;
  let raw: Client | undefined;
  // Three hits on a 2-per-minute rule: a clock 1 s into a minute keeps them in one window.
  const clock = windowAlignedClock(60);

  beforeAll(async () => {
    nodes = await Promise.all([startMemcached(), startMemcached()]);
    t = await startTestApp(
      { "svc.yaml": config },
      {
        BACKEND_TYPE: "mc",
        MC_HOST_PORT: nodes.map((n) => n.address).join(","),
        CACHE_KEY_PREFIX: "it:",
        DISABLE_STATS: "true",
      },
      undefined,
      { clock },
    );
    client = new GrpcJsRateLimitClient(t.addresses.grpc);
  });

  afterAll(async () => {
    client?.close();
    raw?.close();
    await t?.stop();
    await Promise.all(nodes.map((n) => n.stop()));
  });

  it("counts a user down to OVER_LIMIT and reports healthy", async () => {
    const codes: Code[] = [];
    for (let i = 0; i < 3; i++) {
      const response = await client!.shouldRateLimit(
        request("svc", [["user", "ann"]]),
      );
      codes.push(response.overallCode);
    }
    expect(codes).toEqual([Code.OK, Code.OK, Code.OVER_LIMIT]);
    const health = await fetch(`http://${t!.addresses.http}/healthcheck`);
    expect(health.status).toBe(200);
  });

  it("stores YEAR counters under the prefixed key on one of the nodes", async () => {
    await client!.shouldRateLimit(request("svc", [["plan", "pro"]]));
    await t!.app.close();
    const now = clock.nowSeconds();
    const key = `it:svc_plan_pro_${now - (now % 31_536_000)}`;
    const values: (string | null)[] = [];
    for (const node of nodes) {
      raw = Client.create(node.address, { logger: { log: () => undefined } });
      const { value } = await raw.get(key);
      values.push(value?.toString() ?? null);
      raw.close();
      raw = undefined;
    }
    expect(values.filter((v) => v !== null)).toEqual(["1"]);
  });
});

describe("the service with BACKEND_TYPE=mc and a descriptor memcached cannot store", () => {
  let node: MemcachedServer | undefined;
  let t: TestApp | undefined;
  let client: GrpcJsRateLimitClient | undefined;

  beforeAll(async () => {
    node = await startMemcached();
    // Three hits on a 2-per-minute rule: a clock 1 s into a minute keeps them in one window.
    t = await startTestApp(
      { "svc.yaml": config },
      { BACKEND_TYPE: "mc", MC_HOST_PORT: node.address, DISABLE_STATS: "true" },
      undefined,
      { clock: windowAlignedClock(60) },
    );
    client = new GrpcJsRateLimitClient(t.addresses.grpc);
  });

  afterAll(async () => {
    client?.close();
    await t?.stop();
    await node?.stop();
  });

  // Needs `CacheKeyError` mapped to INVALID_ARGUMENT in src/service/errors.ts (toConnectError).
  it("answers INVALID_ARGUMENT naming the entry, while other requests still count", async () => {
    const [bad, good] = await Promise.allSettled([
      client!.shouldRateLimit(
        request("svc", [["user", "bob"]], [["user", "has space"]]),
      ),
      client!.shouldRateLimit(request("svc", [["user", "bob"]])),
    ]);
    expect(bad.status).toBe("rejected");
    const err = (bad as PromiseRejectedResult).reason as ServiceError;
    expect(err.code).toBe(grpcStatus.INVALID_ARGUMENT);
    expect(err.details).toContain(
      'descriptors[1].entries[0].value "has space" contains whitespace',
    );
    expect(good.status).toBe("fulfilled");
    // The rejected request did not count for bob.
    const next = await client!.shouldRateLimit(
      request("svc", [["user", "bob"]]),
    );
    expect(next.statuses[0]!.limitRemaining).toBe(0);

    const json = await fetch(`http://${t!.addresses.http}/json`, {
      method: "POST",
      body: jsonRequest("svc", [["user", "tab\there"]]),
    });
    expect(json.status).toBe(400);
  });
});
