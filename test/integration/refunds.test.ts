// Refunds (`is_negative_hits`, field 4 of RateLimitDescriptor, sent by Envoy >= 1.38) over
// real gRPC on both HTTP/2 engines and over `/json`, on the memory and kv backends: an
// in-flight limit of 2 where every start is followed by the refund of its stream's end.

import { createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, describe, expect, it } from "vitest";
import {
  RateLimitResponse_Code as Code,
  RateLimitService,
} from "../../src/proto.js";
import {
  startRedisServer,
  stopAllRedisServers,
  type RedisServer,
} from "../helpers/redis-server.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";
import {
  jsonRequest,
  request,
  type DescriptorSpec,
} from "../helpers/requests.js";

const config = `
domain: inflight
descriptors:
  - key: route
    rate_limit: { unit: hour, requests_per_unit: 2 }
`;

let redis: RedisServer | undefined;
afterAll(async () => {
  await stopAllRedisServers();
});

/** One hit on the slow route, its own hits addend: a start, or with `refund` its end. */
const slowRoute = (refund: boolean): DescriptorSpec => ({
  entries: [["route", "slow"]],
  hits: 1,
  isNegativeHits: refund,
});

const setups: { name: string; env: () => Promise<Record<string, string>> }[] = [
  { name: "memory, builtin engine", env: () => Promise.resolve({}) },
  {
    name: "memory, node engine",
    env: () => Promise.resolve({ GRPC_HTTP2_ENGINE: "node" }),
  },
  {
    name: "kv",
    env: async () => {
      redis ??= await startRedisServer();
      return {
        BACKEND_TYPE: "kv",
        KV_SOCKET_TYPE: "tcp",
        KV_URL: redis.address,
      };
    },
  },
];

describe.each(setups)("refunds over gRPC and /json: $name", ({ env }) => {
  it("an in-flight limit of 2: starts over it are refused, refunds free the slots, round after round", async () => {
    const t: TestApp = await startTestApp(
      { "inflight.yaml": config },
      await env(),
    );
    try {
      const client: Client<typeof RateLimitService> = createClient(
        RateLimitService,
        createGrpcTransport({ baseUrl: `http://${t.addresses.grpc}` }),
      );
      for (let round = 0; round < 3; round++) {
        const starts = await Promise.all(
          [0, 1, 2, 3].map(() =>
            client.shouldRateLimit(request("inflight", slowRoute(false))),
          ),
        );
        expect(starts.map((r) => r.overallCode).sort((a, b) => a - b)).toEqual([
          Code.OK,
          Code.OK,
          Code.OVER_LIMIT,
          Code.OVER_LIMIT,
        ]);
        // Each stream's end, refused ones included: always OK.
        const ends = await Promise.all(
          starts.map(() =>
            client.shouldRateLimit(request("inflight", slowRoute(true))),
          ),
        );
        expect(ends.every((r) => r.overallCode === Code.OK)).toBe(true);
      }
      // /json takes the field by its JSON name.
      const json = async (isNegativeHits: boolean) => {
        const res = await fetch(`http://${t.addresses.http}/json`, {
          method: "POST",
          body: jsonRequest("inflight", {
            entries: [["route", "slow"]],
            isNegativeHits,
          }),
        });
        return res.status;
      };
      expect([await json(false), await json(false), await json(false)]).toEqual(
        [200, 200, 429],
      );
      expect(await json(true)).toBe(200);
      expect(await json(true)).toBe(200);
      expect(await json(true)).toBe(200);
      expect(await json(false)).toBe(200);
    } finally {
      await t.stop();
    }
  });
});
