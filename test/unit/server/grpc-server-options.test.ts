import { describe, expect, it } from "vitest";
import {
  grpcServerDefaults,
  http2ServerOptions,
} from "../../../src/server/grpc-server.js";
import { http2LimitDefaults } from "../../../src/server/h2/limits.js";

describe("node:http2 options of the gRPC listener", () => {
  it("passes the default limits, memory in whole megabytes rounded up", () => {
    expect(grpcServerDefaults.streamResetLimit).toEqual(
      http2LimitDefaults.streamResetLimit,
    );
    expect(http2ServerOptions({})).toEqual({
      streamResetBurst: 1000,
      streamResetRate: 1000,
      // 16 MiB = 16,777,216 bytes: 17 node megabytes (1,000,000 bytes each).
      maxSessionMemory: 17,
      maxSessionInvalidFrames: 1000,
      maxSessionRejectedStreams: 100,
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
      http2ServerOptions({ maxConnectionMemoryBytes: 3_000_000 })
        .maxSessionMemory,
    ).toBe(3);
    expect(
      http2ServerOptions({ maxConnectionMemoryBytes: 3_000_001 })
        .maxSessionMemory,
    ).toBe(4);
  });
});
