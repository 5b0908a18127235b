import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { RateLimitRequestSchema } from "../../../../src/proto.js";
import {
  decodeUnaryEnvelope,
  envelopePrefixBytes,
  dropDeadlinesBeyondTimerRange,
  isDeadlineBeyondTimerRange,
  parseGrpcTimeoutMs,
  writeEnvelopePrefix,
} from "../../../../src/server/grpc/envelope.js";

function envelope(message: Uint8Array, flags = 0): Buffer {
  const frame = Buffer.alloc(envelopePrefixBytes + message.length);
  writeEnvelopePrefix(frame, message.length);
  frame[0] = flags;
  frame.set(message, envelopePrefixBytes);
  return frame;
}

function errorOf(body: Buffer, maxBytes = 1024): ConnectError {
  try {
    decodeUnaryEnvelope(body, maxBytes);
  } catch (err) {
    return ConnectError.from(err);
  }
  throw new Error("decoded");
}

describe("decodeUnaryEnvelope", () => {
  const message = toBinary(
    RateLimitRequestSchema,
    create(RateLimitRequestSchema, { domain: "d", hitsAddend: 2 }),
  );

  it("decodes one uncompressed message", () => {
    const request = decodeUnaryEnvelope(envelope(message), 1024);
    expect(request.domain).toBe("d");
    expect(request.hitsAddend).toBe(2);
  });

  it("answers each malformed body with Connect's code and text", () => {
    expect(errorOf(Buffer.alloc(0))).toMatchObject({
      code: Code.Unimplemented,
      rawMessage: "protocol error: missing input message for unary method",
    });
    expect(errorOf(Buffer.from([0, 0]))).toMatchObject({
      code: Code.InvalidArgument,
      rawMessage: "protocol error: incomplete envelope",
    });
    expect(errorOf(envelope(message).subarray(0, 7))).toMatchObject({
      code: Code.InvalidArgument,
      rawMessage: "protocol error: incomplete envelope",
    });
    expect(
      errorOf(Buffer.concat([envelope(message), envelope(message)])),
    ).toMatchObject({
      code: Code.Unimplemented,
      rawMessage:
        "protocol error: received extra input message for unary method",
    });
    expect(errorOf(envelope(message, 1))).toMatchObject({
      code: Code.Internal,
      rawMessage:
        "received compressed envelope, but do not know how to decompress",
    });
    expect(errorOf(envelope(message, 2))).toMatchObject({
      code: Code.Internal,
      rawMessage: "protocol error: invalid envelope flags 2",
    });
    expect(errorOf(envelope(message), 3)).toMatchObject({
      code: Code.ResourceExhausted,
      rawMessage: `message size ${message.length} is larger than configured readMaxBytes 3`,
    });
    expect(errorOf(envelope(Buffer.from([0xff])))).toMatchObject({
      code: Code.InvalidArgument,
    });
  });
});

describe("parseGrpcTimeoutMs", () => {
  it("converts each unit to milliseconds", () => {
    expect(parseGrpcTimeoutMs("2H")).toBe(7_200_000);
    expect(parseGrpcTimeoutMs("3M")).toBe(180_000);
    expect(parseGrpcTimeoutMs("4S")).toBe(4000);
    expect(parseGrpcTimeoutMs("5m")).toBe(5);
    expect(parseGrpcTimeoutMs("6000u")).toBe(6);
    expect(parseGrpcTimeoutMs("7000000n")).toBeCloseTo(7);
    expect(parseGrpcTimeoutMs(["8m", "9m"])).toBe(8);
  });

  it("is undefined when absent and NaN when malformed", () => {
    expect(parseGrpcTimeoutMs(undefined)).toBeUndefined();
    expect(parseGrpcTimeoutMs("")).toBeNaN();
    expect(parseGrpcTimeoutMs("123456789m")).toBeNaN();
    expect(parseGrpcTimeoutMs("1x")).toBeNaN();
    expect(parseGrpcTimeoutMs("-1m")).toBeNaN();
    expect(parseGrpcTimeoutMs("m")).toBeNaN();
    expect(parseGrpcTimeoutMs("1")).toBeNaN();
    expect(parseGrpcTimeoutMs("1.5m")).toBeNaN();
    expect(parseGrpcTimeoutMs("1 m")).toBeNaN();
    expect(parseGrpcTimeoutMs("1mm")).toBeNaN();
    expect(parseGrpcTimeoutMs("1h")).toBeNaN();
    expect(parseGrpcTimeoutMs([])).toBeNaN();
  });

  it("takes up to 8 digits, leading zeros included", () => {
    expect(parseGrpcTimeoutMs("99999999S")).toBe(99_999_999_000);
    expect(parseGrpcTimeoutMs("00000020m")).toBe(20);
    expect(parseGrpcTimeoutMs("9999982u")).toBeCloseTo(9999.982, 6);
  });
});

describe("deadline headers beyond the timer range", () => {
  it("are the ones longer than 2^31 - 1 ms, in either header", () => {
    expect(isDeadlineBeyondTimerRange("grpc-timeout", "99999999H")).toBe(true);
    expect(isDeadlineBeyondTimerRange("grpc-timeout", "596H")).toBe(false);
    expect(isDeadlineBeyondTimerRange("grpc-timeout", "597H")).toBe(true);
    expect(isDeadlineBeyondTimerRange("grpc-timeout", "20m")).toBe(false);
    expect(isDeadlineBeyondTimerRange("grpc-timeout", "soon")).toBe(false);
    expect(isDeadlineBeyondTimerRange("connect-timeout-ms", "2147483647")).toBe(
      false,
    );
    expect(isDeadlineBeyondTimerRange("connect-timeout-ms", "2147483648")).toBe(
      true,
    );
    expect(isDeadlineBeyondTimerRange("connect-timeout-ms", "-1")).toBe(false);
    expect(isDeadlineBeyondTimerRange("x-timeout", "99999999H")).toBe(false);
  });

  it("are dropped from node's header object, the rest kept", () => {
    const headers: Record<string, string | string[] | undefined> = {
      "grpc-timeout": "99999999H",
      "connect-timeout-ms": "9999999999",
      "content-type": "application/grpc",
    };
    dropDeadlinesBeyondTimerRange(headers);
    expect(headers).toEqual({ "content-type": "application/grpc" });
    const kept = { "grpc-timeout": "20m" };
    dropDeadlinesBeyondTimerRange(kept);
    expect(kept).toEqual({ "grpc-timeout": "20m" });
  });
});
