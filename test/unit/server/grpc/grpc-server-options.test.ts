import { describe, expect, it } from "vitest";
import { grpcServerDefaults } from "../../../../src/server/grpc/grpc-server.js";
import { http2ServerOptions } from "../../../../src/server/grpc/node-listener.js";
import { http2LimitDefaults } from "../../../../src/http2/limits.js";

describe("node:http2 options of the gRPC listener", () => {
  it("passes the default limits, memory a quarter over the budget in whole megabytes, the builtin engine's stream limit", () => {
    expect(grpcServerDefaults.streamResetLimit).toEqual(
      http2LimitDefaults.streamResetLimit,
    );
    expect(http2ServerOptions({})).toEqual({
      streamResetBurst: 1000,
      streamResetRate: 1000,
      // 16 MiB = 16,777,216 bytes, and a quarter more: 21 node megabytes (of 1,000,000 bytes).
      maxSessionMemory: 21,
      maxSessionInvalidFrames: 1000,
      maxSessionRejectedStreams: 100,
      settings: { maxConcurrentStreams: 1000 },
    });
  });

  it("passes configured limits, at least one megabyte", () => {
    expect(
      http2ServerOptions({
        streamResetLimit: { burst: 7, ratePerSecond: 3 },
        maxConnectionMemoryBytes: 65_536,
      }),
    ).toMatchObject({
      streamResetBurst: 7,
      streamResetRate: 3,
      maxSessionMemory: 1,
    });
    expect(
      http2ServerOptions({ maxConnectionMemoryBytes: 4_000_000 })
        .maxSessionMemory,
    ).toBe(5);
    expect(
      http2ServerOptions({ maxConnectionMemoryBytes: 4_000_001 })
        .maxSessionMemory,
    ).toBe(6);
  });
});
