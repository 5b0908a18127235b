import { describe, expect, it } from "vitest";
import { http2LimitDefaults } from "../../../src/http2/limits.js";
import { durationMs } from "../../../src/settings/schema/codecs.js";
import { SettingsError } from "../../../src/settings/settings-error.js";
import { loadSettings } from "../../../src/settings/settings.js";

/** The problem lines of loading `env`. */
function problems(env: Record<string, string>): readonly string[] {
  try {
    loadSettings(env);
  } catch (err) {
    if (err instanceof SettingsError) return err.problems;
    throw err;
  }
  throw new Error("expected a SettingsError");
}

describe("gRPC HTTP/2 abuse limit settings", () => {
  it("default to http2LimitDefaults", () => {
    const { settings } = loadSettings({});
    const d = http2LimitDefaults;
    expect(settings.grpcMaxConnections).toBe(d.maxConnections);
    expect(settings.grpcHandshakeTimeoutMs).toBe(d.handshakeTimeoutMs);
    expect(settings.grpcMaxConnectionIdleMs).toBe(d.maxConnectionIdleMs);
    expect(settings.grpcKeepaliveMinTimeMs).toBe(d.keepaliveMinTimeMs);
    expect(settings.grpcStreamResetBurst).toBe(d.streamResetLimit.burst);
    expect(settings.grpcStreamResetRate).toBe(d.streamResetLimit.ratePerSecond);
    expect(settings.grpcMaxConnectionMemoryBytes).toBe(
      d.maxConnectionMemoryBytes,
    );
    expect(settings.grpcMaxConnectionMemoryBytes).toBe(16 * 1024 * 1024);
  });

  it("read valid values: counts as integers, times as Go durations", () => {
    const { settings } = loadSettings({
      GRPC_MAX_CONNECTIONS: "1",
      GRPC_HANDSHAKE_TIMEOUT: "1.5s",
      GRPC_MAX_CONNECTION_IDLE: "0",
      GRPC_KEEPALIVE_MIN_TIME: "10s",
      GRPC_STREAM_RESET_BURST: "5000",
      GRPC_STREAM_RESET_RATE: "0x10",
      GRPC_MAX_CONNECTION_MEMORY: "65536",
    });
    expect(settings).toMatchObject({
      grpcMaxConnections: 1,
      grpcHandshakeTimeoutMs: 1500,
      grpcMaxConnectionIdleMs: 0,
      grpcKeepaliveMinTimeMs: 10_000,
      grpcStreamResetBurst: 5000,
      grpcStreamResetRate: 16,
      grpcMaxConnectionMemoryBytes: 65_536,
    });
    expect(
      loadSettings({
        GRPC_MAX_CONNECTION_IDLE: "2h30m",
        GRPC_KEEPALIVE_MIN_TIME: "0",
      }).settings,
    ).toMatchObject({
      grpcMaxConnectionIdleMs: 9_000_000,
      grpcKeepaliveMinTimeMs: 0,
    });
  });

  it("reject invalid values, each with what was expected", () => {
    expect(
      problems({
        GRPC_MAX_CONNECTIONS: "0",
        GRPC_HANDSHAKE_TIMEOUT: "0",
        GRPC_MAX_CONNECTION_IDLE: "-1s",
        GRPC_KEEPALIVE_MIN_TIME: "5",
        GRPC_STREAM_RESET_BURST: "many",
        GRPC_STREAM_RESET_RATE: "0",
        GRPC_MAX_CONNECTION_MEMORY: "65535",
      }),
    ).toEqual([
      'GRPC_MAX_CONNECTIONS="0": out of range; expected a positive integer',
      'GRPC_HANDSHAKE_TIMEOUT="0": not positive; expected a positive duration such as 300ms, 1.5h or 2h45m (units ns, us, µs, ms, s, m, h)',
      'GRPC_MAX_CONNECTION_IDLE="-1s": negative; expected a non-negative duration such as 300ms, 1.5h or 2h45m (units ns, us, µs, ms, s, m, h)',
      'GRPC_KEEPALIVE_MIN_TIME="5": expected a non-negative duration such as 300ms, 1.5h or 2h45m (units ns, us, µs, ms, s, m, h)',
      'GRPC_STREAM_RESET_BURST="many": expected a positive integer',
      'GRPC_STREAM_RESET_RATE="0": out of range; expected a positive integer',
      'GRPC_MAX_CONNECTION_MEMORY="65535": out of range; expected an integer of at least 65536',
    ]);
  });

  it("reject timer durations longer than a Node timer takes", () => {
    expect(
      problems({
        GRPC_HANDSHAKE_TIMEOUT: "577h",
        GRPC_MAX_CONNECTION_IDLE: "1000h",
      }),
    ).toEqual([
      'GRPC_HANDSHAKE_TIMEOUT="577h": too long; expected a duration of at most 576h',
      'GRPC_MAX_CONNECTION_IDLE="1000h": too long; expected a duration of at most 576h',
    ]);
    expect(
      loadSettings({ GRPC_MAX_CONNECTION_IDLE: "576h" }).settings
        .grpcMaxConnectionIdleMs,
    ).toBe(576 * 3_600_000);
  });
});

describe("durationMs codec with a maximum", () => {
  it("reads up to the maximum and spells values as Go durations", () => {
    const codec = durationMs("non-negative", 60_000);
    expect(codec.parse("1m")).toBe(60_000);
    expect(codec.parse("0")).toBe(0);
    expect(() => codec.parse("61s")).toThrow(
      "too long; expected a duration of at most 1m",
    );
    expect(() => codec.parse("-1s")).toThrow("negative");
    expect(codec.format(90_000)).toBe("1m30s");
  });
});
