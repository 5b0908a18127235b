import { Code, ConnectError } from "@connectrpc/connect";
import { maxTimerDelayMs } from "../../util/timer-range.js";
import type { RateLimitRequest } from "../../proto.js";
import { decodeRateLimitRequest } from "./rate-limit-request-decoder.js";

// The gRPC wire format of a unary call as the built-in engine's inline path reads and writes it:
// the message envelope (`flags:u8 length:u32be message`) and the `grpc-timeout` header. The
// errors are the ones Connect's gRPC handler raises for the same input, code and text.

/** Bytes of an envelope's prefix: the flags byte and the 32-bit message length. */
export const envelopePrefixBytes = 5;

/**
 * Writes the prefix of an uncompressed envelope (flags 0, then `messageBytes` big-endian) at
 * the start of `frame`, whose message follows at {@link envelopePrefixBytes}.
 */
export function writeEnvelopePrefix(frame: Buffer, messageBytes: number): void {
  frame[0] = 0;
  frame.writeUInt32BE(messageBytes, 1);
}

/**
 * Decodes the body of a unary gRPC call: exactly one uncompressed envelope
 * (`flags:u8 length:u32be message`) holding a `RateLimitRequest`.
 *
 * @throws {@link ConnectError} (codes as Connect's gRPC handler answers them) UNIMPLEMENTED
 *   for zero or several messages (gRPC's cardinality rule), INVALID_ARGUMENT for a truncated
 *   envelope or an undecodable message, INTERNAL for a compressed flag without an encoding,
 *   RESOURCE_EXHAUSTED when the message is larger than `maxBytes`
 */
export function decodeUnaryEnvelope(
  body: Buffer,
  maxBytes: number,
): RateLimitRequest {
  if (body.length === 0) {
    throw new ConnectError(
      "protocol error: missing input message for unary method",
      Code.Unimplemented,
    );
  }
  if (body.length < 5)
    throw new ConnectError(
      "protocol error: incomplete envelope",
      Code.InvalidArgument,
    );
  const flags = body.readUInt8(0);
  const length = body.readUInt32BE(1);
  if (length > maxBytes) {
    throw new ConnectError(
      `message size ${length} is larger than configured readMaxBytes ${maxBytes}`,
      Code.ResourceExhausted,
    );
  }
  if (body.length < 5 + length)
    throw new ConnectError(
      "protocol error: incomplete envelope",
      Code.InvalidArgument,
    );
  if (body.length > 5 + length) {
    throw new ConnectError(
      "protocol error: received extra input message for unary method",
      Code.Unimplemented,
    );
  }
  if ((flags & 0b1) === 0b1) {
    throw new ConnectError(
      "received compressed envelope, but do not know how to decompress",
      Code.Internal,
    );
  }
  if (flags !== 0)
    throw new ConnectError(
      `protocol error: invalid envelope flags ${flags}`,
      Code.Internal,
    );
  try {
    return decodeRateLimitRequest(body, 5, 5 + length);
  } catch (err) {
    throw new ConnectError(
      `parse binary: ${err instanceof Error ? err.message : String(err)}`,
      Code.InvalidArgument,
    );
  }
}

/**
 * Parses a `grpc-timeout` header (`<1-8 digits><H|M|S|m|u|n>`) into milliseconds.
 *
 * @returns the timeout in ms, `undefined` when absent, `NaN` when malformed
 */
export function parseGrpcTimeoutMs(
  value: string | string[] | undefined,
): number | undefined {
  if (value === undefined) return undefined;
  const text = Array.isArray(value) ? (value[0] ?? "") : value;
  // By hand rather than a regular expression: it runs on every call (2 µs per call at
  // 2,000/s in the kv profile for the expression, docs/performance.md#round-4-timer-lists).
  const digits = text.length - 1;
  if (digits < 1 || digits > 8) return Number.NaN;
  let amount = 0;
  for (let i = 0; i < digits; i++) {
    const d = text.charCodeAt(i) - 48;
    if (d < 0 || d > 9) return Number.NaN;
    amount = amount * 10 + d;
  }
  return amount * msPerTimeoutUnit(text.charCodeAt(digits));
}

/**
 * Whether a deadline header (`grpc-timeout`, or the Connect protocol's `connect-timeout-ms`)
 * asks for more time than a Node timer holds ({@link maxTimerDelayMs}, about 24.8 days). The
 * Connect router arms its deadline with `setTimeout`, which Node turns into 1 ms past that, so
 * the engines drop such a header before the router sees it: no deadline, as the inline path
 * treats it. A malformed value is not beyond the range (the router refuses it as malformed).
 *
 * @param name - the header's name, lower case
 */
export function isDeadlineBeyondTimerRange(
  name: string,
  value: string,
): boolean {
  if (name === "grpc-timeout") {
    const ms = parseGrpcTimeoutMs(value);
    return ms !== undefined && ms > maxTimerDelayMs;
  }
  if (name === "connect-timeout-ms")
    return /^\d{1,10}$/.test(value) && Number(value) > maxTimerDelayMs;
  return false;
}

/**
 * Drops from node's header object the deadline headers beyond the timer range
 * ({@link isDeadlineBeyondTimerRange}).
 */
export function dropDeadlinesBeyondTimerRange(
  headers: Record<string, string | string[] | undefined>,
): void {
  for (const name of ["grpc-timeout", "connect-timeout-ms"]) {
    const value = headers[name];
    if (typeof value === "string" && isDeadlineBeyondTimerRange(name, value))
      // eslint-disable-next-line @typescript-eslint/no-dynamic-delete -- one of two known names
      delete headers[name];
  }
}

/** Milliseconds per unit of a `grpc-timeout` value, by the unit's character code; NaN: none. */
function msPerTimeoutUnit(unit: number): number {
  switch (unit) {
    case 72: // H
      return 3_600_000;
    case 77: // M
      return 60_000;
    case 83: // S
      return 1000;
    case 109: // m
      return 1;
    case 117: // u
      return 0.001;
    case 110: // n
      return 0.000001;
    default:
      return Number.NaN;
  }
}
