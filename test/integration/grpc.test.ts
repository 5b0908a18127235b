import { connect as http2Connect } from "node:http2";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import {
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
} from "@connectrpc/connect-node";
import type { ServiceError } from "@grpc/grpc-js";
import { status as grpcStatus } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  OverrideRateLimitUnit,
  Health,
  HealthCheckResponse_ServingStatus as Serving,
  RateLimitRequestSchema,
  RateLimitResponse_Code as RlCode,
  RateLimitResponse_RateLimit_Unit as Unit,
  RateLimitService,
} from "../../src/proto.js";
import { GrpcJsRateLimitClient } from "../helpers/grpc-js-client.js";
import { windowAlignedClock } from "../helpers/aligned-clock.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";
import { request } from "../helpers/requests.js";

const config = `
domain: rl
descriptors:
  - key: category
    value: account
    rate_limit: { unit: minute, requests_per_unit: 4 }
  - key: foo
    descriptors:
      - key: bar
        value: bkthomps
        rate_limit: { name: bkthomps, unit: minute, requests_per_unit: 1 }
      - key: bay
        rate_limit: { unlimited: true }
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 2 }
`;

let t: TestApp;
beforeAll(async () => {
  // Several hits per minute window below: a clock 1 s into a minute keeps them in one.
  t = await startTestApp({ "rl.yaml": config }, {}, undefined, {
    clock: windowAlignedClock(60),
  });
});
afterAll(async () => {
  await t.stop();
});

describe("gRPC ShouldRateLimit (Connect client)", () => {
  it("counts down limitRemaining, then answers OVER_LIMIT", async () => {
    const client = createClient(
      RateLimitService,
      createGrpcTransport({ baseUrl: `http://${t.addresses.grpc}` }),
    );
    const remaining: number[] = [];
    for (let i = 0; i < 4; i++) {
      const r = await client.shouldRateLimit(
        request("rl", [["category", "account"]]),
      );
      expect(r.overallCode).toBe(RlCode.OK);
      expect(r.statuses[0]!.currentLimit?.unit).toBe(Unit.MINUTE);
      remaining.push(r.statuses[0]!.limitRemaining);
    }
    expect(remaining).toEqual([3, 2, 1, 0]);
    const over = await client.shouldRateLimit(
      request("rl", [["category", "account"]]),
    );
    expect(over.overallCode).toBe(RlCode.OVER_LIMIT);
    expect(over.statuses[0]!.code).toBe(RlCode.OVER_LIMIT);
    const reset = Number(over.statuses[0]!.durationUntilReset?.seconds);
    expect(reset).toBeGreaterThanOrEqual(1);
    expect(reset).toBeLessThanOrEqual(60);
  });

  it("answers unlimited, unmatched and unknown-domain descriptors as the reference does", async () => {
    const client = createClient(
      RateLimitService,
      createGrpcTransport({ baseUrl: `http://${t.addresses.grpc}` }),
    );
    const r = await client.shouldRateLimit(
      request(
        "rl",
        [
          ["foo", "x"],
          ["bay", "y"],
        ],
        [["nope", "z"]],
        [["foo", "x"]],
      ),
    );
    expect(r.overallCode).toBe(RlCode.OK);
    expect(
      r.statuses.map((s) => [
        s.code,
        s.limitRemaining,
        s.currentLimit === undefined,
      ]),
    ).toEqual([
      [RlCode.OK, 4294967295, true],
      [RlCode.OK, 0, true],
      [RlCode.OK, 0, true],
    ]);
    const unknown = await client.shouldRateLimit(
      request("other", [["a", "b"]]),
    );
    expect(unknown.statuses[0]!.code).toBe(RlCode.OK);
  });

  it("maps invalid requests to INVALID_ARGUMENT naming the field, and keeps serving", async () => {
    const client = createClient(
      RateLimitService,
      createGrpcTransport({ baseUrl: `http://${t.addresses.grpc}` }),
    );
    const cases: [ReturnType<typeof request>, string][] = [
      [request("", [["a", "b"]]), "rate limit domain must not be empty"],
      [request("rl"), "rate limit descriptor list must not be empty"],
      [
        request("rl", [["", "b"]]),
        "descriptors[0].entries[0].key must not be empty",
      ],
      [
        create(RateLimitRequestSchema, {
          domain: "rl",
          descriptors: [
            {
              entries: [{ key: "user", value: "u" }],
              limit: {
                requestsPerUnit: 5,
                unit: OverrideRateLimitUnit.UNKNOWN,
              },
            },
          ],
        }),
        "descriptors[0].limit.unit",
      ],
    ];
    for (const [req, message] of cases) {
      const err = await client.shouldRateLimit(req).then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
      expect(err?.code).toBe(Code.InvalidArgument);
      expect(err?.rawMessage).toContain(message);
    }
    const ok = await client.shouldRateLimit(
      request("rl", [["user", "after-errors"]]),
    );
    expect(ok.statuses[0]!.limitRemaining).toBe(1);
  });

  it("honours request-level and per-descriptor hits addends and overrides", async () => {
    const client = createClient(
      RateLimitService,
      createGrpcTransport({ baseUrl: `http://${t.addresses.grpc}` }),
    );
    const overridden = create(RateLimitRequestSchema, {
      domain: "rl",
      hitsAddend: 3,
      descriptors: [
        {
          entries: [{ key: "user", value: "ov" }],
          limit: { requestsPerUnit: 10, unit: OverrideRateLimitUnit.MINUTE },
        },
        { entries: [{ key: "user", value: "zero" }], hitsAddend: 0n },
      ],
    });
    const r = await client.shouldRateLimit(overridden);
    expect(r.statuses[0]!.currentLimit?.requestsPerUnit).toBe(10);
    expect(r.statuses[0]!.currentLimit?.unit).toBe(Unit.MINUTE);
    expect(r.statuses[0]!.limitRemaining).toBe(7);
    expect(r.statuses[1]!.limitRemaining).toBe(2);
  });
});

describe("gRPC ShouldRateLimit (@grpc/grpc-js client)", () => {
  it("decides the same way through an independent client", async () => {
    const client = new GrpcJsRateLimitClient(t.addresses.grpc);
    try {
      const first = await client.shouldRateLimit(
        request("rl", [
          ["foo", "a"],
          ["bar", "bkthomps"],
        ]),
      );
      expect(first.overallCode).toBe(RlCode.OK);
      expect(first.statuses[0]!.currentLimit?.name).toBe("bkthomps");
      const second = await client.shouldRateLimit(
        request("rl", [
          ["foo", "a"],
          ["bar", "bkthomps"],
        ]),
      );
      expect(second.overallCode).toBe(RlCode.OVER_LIMIT);
    } finally {
      client.close();
    }
  });

  it("answers a malformed protobuf with INVALID_ARGUMENT and keeps serving", async () => {
    const client = new GrpcJsRateLimitClient(t.addresses.grpc);
    try {
      // Field 1 (domain) declared as a 100-byte string, but only 2 bytes follow.
      const err = (await client
        .raw(new Uint8Array([0x0a, 100, 0x61, 0x62]))
        .then(
          () => undefined,
          (e: unknown) => e,
        )) as ServiceError | undefined;
      expect(err?.code).toBe(grpcStatus.INVALID_ARGUMENT);
      const ok = await client.shouldRateLimit(
        request("rl", [["user", "after-garbage"]]),
      );
      expect(ok.overallCode).toBe(RlCode.OK);
    } finally {
      client.close();
    }
  });
});

describe("other protocols on the same router", () => {
  it("serves gRPC-web and Connect on the HTTP port", async () => {
    for (const transport of [
      createGrpcWebTransport({
        baseUrl: `http://${t.addresses.http}`,
        httpVersion: "1.1",
      }),
      createConnectTransport({
        baseUrl: `http://${t.addresses.http}`,
        httpVersion: "1.1",
      }),
    ]) {
      const client = createClient(RateLimitService, transport);
      const r = await client.shouldRateLimit(request("rl", [["user", "web"]]));
      expect(r.overallCode).toBe(RlCode.OK);
    }
  });

  it("refuses a wrong content type on the gRPC port", async () => {
    const session = http2Connect(`http://${t.addresses.grpc}`);
    try {
      const status = await new Promise<number>((resolve, reject) => {
        const stream = session.request({
          ":method": "POST",
          ":path":
            "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
          "content-type": "text/plain",
        });
        stream.on("response", (headers) => {
          resolve(Number(headers[":status"]));
        });
        stream.on("error", reject);
        stream.end("hello");
      });
      expect(status).toBe(415);
    } finally {
      session.close();
    }
  });
});

describe("gRPC health", () => {
  it("reports SERVING for the service and NOT_FOUND for unknown names", async () => {
    const client = createClient(
      Health,
      createGrpcTransport({ baseUrl: `http://${t.addresses.grpc}` }),
    );
    expect((await client.check({ service: "ratelimit" })).status).toBe(
      Serving.SERVING,
    );
    expect((await client.check({ service: "" })).status).toBe(Serving.SERVING);
    const err = await client.check({ service: "nope" }).then(
      () => undefined,
      (e: unknown) => ConnectError.from(e),
    );
    expect(err?.code).toBe(Code.NotFound);
  });
});
