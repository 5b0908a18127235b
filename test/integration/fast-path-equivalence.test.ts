import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { silentLogger } from "../helpers/silent-logger.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  OverrideRateLimitUnit,
  RateLimitRequestSchema,
  RateLimitResponseSchema,
  type RateLimitResponse,
} from "../../src/proto.js";
import { HealthChecker } from "../../src/health/health.js";
import { createRoutes } from "../../src/server/routes.js";
import { createStatsManager } from "../../src/stats/stats-manager.js";
import { parseGrpcTimeoutMs } from "../../src/server/grpc/envelope.js";
import { startGrpcServer } from "../../src/server/grpc/grpc-server.js";
import { envelope, rawGrpc, type RawGrpcResult } from "../helpers/raw-grpc.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";

const path = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
const config = `
domain: rl
descriptors:
  - key: k
    rate_limit: { unit: hour, requests_per_unit: 2 }
  - key: named
    value: v
    rate_limit: { name: the-name, unit: day, requests_per_unit: 5 }
  - key: free
    rate_limit: { unlimited: true }
`;

function message(
  domain: string,
  ...descriptors: [string, string][][]
): Uint8Array {
  return toBinary(
    RateLimitRequestSchema,
    create(RateLimitRequestSchema, {
      domain,
      descriptors: descriptors.map((entries) => ({
        entries: entries.map(([key, value]) => ({ key, value })),
      })),
    }),
  );
}

/** What must be identical between the two paths. */
function comparable(r: RawGrpcResult): unknown {
  let response: RateLimitResponse | undefined;
  if (r.grpcStatus === 0 && r.body.length >= 5) {
    response = fromBinary(RateLimitResponseSchema, r.body.subarray(5));
    // The reset depends on the second the call was decided.
    for (const s of response.statuses)
      if (s.durationUntilReset !== undefined) s.durationUntilReset.seconds = 0n;
  }
  return {
    httpStatus: r.httpStatus,
    grpcStatus: r.grpcStatus,
    grpcMessage: r.grpcMessage,
    response,
  };
}

const cases: [string, Buffer, Record<string, string>?][] = [
  [
    "a valid request",
    envelope(
      message(
        "rl",
        [["k", "a"]],
        [["named", "v"]],
        [["free", "x"]],
        [["none", "y"]],
      ),
    ),
  ],
  [
    "a request going over the limit (1)",
    envelope(message("rl", [["k", "over"]])),
  ],
  [
    "a request going over the limit (2)",
    envelope(message("rl", [["k", "over"]])),
  ],
  [
    "a request going over the limit (3)",
    envelope(message("rl", [["k", "over"]])),
  ],
  ["an unknown domain", envelope(message("elsewhere", [["k", "a"]]))],
  ["an empty domain", envelope(message("", [["k", "a"]]))],
  ["no descriptors", envelope(message("rl"))],
  ["an entry with an empty key", envelope(message("rl", [["", "a"]]))],
  [
    "an override with unit UNKNOWN",
    envelope(
      toBinary(
        RateLimitRequestSchema,
        create(RateLimitRequestSchema, {
          domain: "rl",
          descriptors: [
            {
              entries: [{ key: "k", value: "o" }],
              limit: {
                requestsPerUnit: 3,
                unit: OverrideRateLimitUnit.UNKNOWN,
              },
            },
          ],
        }),
      ),
    ),
  ],
  [
    "+proto content type",
    envelope(message("rl", [["k", "proto"]])),
    { "content-type": "application/grpc+proto" },
  ],
  ["a malformed protobuf", envelope(Buffer.from([0x0a, 100, 0x61]))],
  ["an empty message (all defaults)", envelope(new Uint8Array(0))],
  [
    "the compressed flag without an encoding",
    envelope(message("rl", [["k", "a"]]), 1),
  ],
  [
    "a truncated envelope",
    envelope(message("rl", [["k", "a"]])).subarray(0, 8),
  ],
  [
    "two messages",
    Buffer.concat([
      envelope(message("rl", [["k", "a"]])),
      envelope(message("rl", [["k", "b"]])),
    ]),
  ],
  ["an empty body", Buffer.alloc(0)],
  ["a message larger than the limit", Buffer.from([0, 0x7f, 0xff, 0xff, 0xff])],
  [
    "a malformed grpc-timeout",
    envelope(message("rl", [["k", "t"]])),
    { "grpc-timeout": "soon" },
  ],
  [
    "a generous grpc-timeout",
    envelope(message("rl", [["k", "t2"]])),
    { "grpc-timeout": "5S" },
  ],
  // Beyond what a Node timer holds (Node would fire it after 1 ms): no deadline.
  [
    "the largest grpc-timeout",
    envelope(message("rl", [["k", "t3"]])),
    { "grpc-timeout": "99999999H" },
  ],
  [
    "the largest grpc-timeout on an invalid request",
    envelope(message("", [["k", "t4"]])),
    { "grpc-timeout": "99999999H" },
  ],
];

// The built-in engine's inline ShouldRateLimit (grpc-unary.ts) against the Connect router, on
// the built-in engine and on the node engine (which serves every call through the router).
describe.each([
  ["builtin", "builtin"],
  ["builtin", "node"],
] as const)(
  "HTTP/2 fast path (%s engine) equivalence with the Connect path (%s engine)",
  (fastEngine, connectEngine) => {
    let fast: TestApp;
    let connect: TestApp;
    beforeAll(async () => {
      fast = await startTestApp(
        { "rl.yaml": config },
        { GRPC_HTTP2_ENGINE: fastEngine },
      );
      connect = await startTestApp(
        { "rl.yaml": config },
        { GRPC_HTTP2_ENGINE: connectEngine },
        silentLogger(),
        { grpcFastPath: false },
      );
    });
    afterAll(async () => {
      await fast.stop();
      await connect.stop();
    });

    for (const [what, body, headers] of cases) {
      it(`answers ${what} identically`, async () => {
        const viaFast = await rawGrpc(fast.addresses.grpc, path, body, headers);
        const viaConnect = await rawGrpc(
          connect.addresses.grpc,
          path,
          body,
          headers,
        );
        expect(comparable(viaFast)).toEqual(comparable(viaConnect));
      });
    }

    it("counts server stats on both paths", () => {
      for (const t of [fast, connect]) {
        expect(
          t.app.statsManager.serverTotalRequests("ShouldRateLimit").value(),
        ).toBeGreaterThan(5);
      }
    });
  },
);

describe("node engine deadlines and cancellation (Connect router)", () => {
  it("answers DEADLINE_EXCEEDED when the decision outlives grpc-timeout, and survives a client reset", async () => {
    let release: (() => void) | undefined;
    // The service's routes, over a decision that waits to be released.
    const listening = await startGrpcServer({
      engine: "node",
      routes: createRoutes({
        shouldRateLimit: () =>
          new Promise((resolve) => {
            release = () => {
              resolve(create(RateLimitResponseSchema, {}));
            };
          }),
        health: new HealthChecker([{ name: "sigterm", healthy: true }]),
        statsManager: createStatsManager(),
      }),
      readMaxBytes: 1024,
      logger: silentLogger(),
      host: "127.0.0.1",
      port: 0,
    });
    try {
      const started = Date.now();
      const r = await rawGrpc(
        listening.address,
        path,
        envelope(message("rl", [["k", "a"]])),
        { "grpc-timeout": "100m" },
      );
      expect(r.grpcStatus).toBe(4);
      // What the built-in engine's inline path answers (unary-call.ts).
      expect(r.grpcMessage).toBe("the operation timed out");
      expect(Date.now() - started).toBeGreaterThanOrEqual(90);
      release?.();

      // A client that resets before the answer: nothing is written, the server keeps going.
      const { connect: h2 } = await import("node:http2");
      const session = h2(`http://${listening.address}`);
      const stream = session.request({
        ":method": "POST",
        ":path": path,
        "content-type": "application/grpc",
      });
      stream.on("error", () => undefined);
      stream.end(envelope(message("rl", [["k", "a"]])));
      await new Promise((r2) => setTimeout(r2, 50));
      stream.close(8 /* CANCEL */);
      await new Promise((r2) => setTimeout(r2, 50));
      release?.();
      session.close();
      const again = await rawGrpc(
        listening.address,
        path,
        envelope(message("rl", [["k", "a"]])),
        { "grpc-timeout": "50m" },
      );
      expect(again.grpcStatus).toBe(4);
    } finally {
      await listening.close(100);
    }
  });

  it.each([
    ["1S", 1000],
    ["250m", 250],
    ["2M", 120_000],
    ["1H", 3_600_000],
    ["1000u", 1],
    ["5000000n", 5],
  ])("parses grpc-timeout %s as %d ms", (value, ms) => {
    expect(parseGrpcTimeoutMs(value)).toBe(ms);
  });

  it("rejects malformed grpc-timeout values", () => {
    for (const v of ["", "1", "S", "123456789S", "1s", "-1S"])
      expect(parseGrpcTimeoutMs(v)).toBeNaN();
    expect(parseGrpcTimeoutMs(undefined)).toBeUndefined();
  });
});
