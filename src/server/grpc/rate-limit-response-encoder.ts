import { toBinary } from "@bufbuild/protobuf";
import {
  RateLimitResponseSchema,
  type HeaderValue,
  type RateLimitResponse,
  type RateLimitResponse_DescriptorStatus,
} from "../../proto.js";
import { envelopePrefixBytes, writeEnvelopePrefix } from "./envelope.js";

/**
 * Encodes a `RateLimitResponse` as one gRPC message frame (`flags:u8 length:u32be message`),
 * byte for byte what `toBinary(RateLimitResponseSchema, response)` produces behind the same
 * 5-byte prefix (test/unit/server/grpc/rate-limit-response-encoder.test.ts checks it with random
 * messages).
 *
 * Why: protobuf-es's reflective writer walks the schema and allocates a writer and a chunk
 * list per message; the response of a decision has a fixed, small shape (overall code,
 * statuses with code, current limit, remaining and reset, optional headers), written here in
 * one pass into a reused scratch buffer, then copied once into the frame. Anything outside
 * that shape (dynamic metadata, quota, unknown fields, negative enum values, durations outside
 * 0…2^53 s) is encoded by protobuf-es: the result is the same, only slower.
 *
 * @returns a new buffer owned by the caller (safe to hand to an asynchronous write)
 */
export function encodeRateLimitResponseFrame(
  response: RateLimitResponse,
): Buffer {
  if (isSpecialised(response)) {
    pos = envelopePrefixBytes;
    writeResponse(response);
    const frame = Buffer.allocUnsafe(pos);
    scratch.copy(frame, 0, 0, pos);
    writeEnvelopePrefix(frame, pos - envelopePrefixBytes);
    return frame;
  }
  const payload = toBinary(RateLimitResponseSchema, response);
  const frame = Buffer.allocUnsafe(envelopePrefixBytes + payload.length);
  writeEnvelopePrefix(frame, payload.length);
  frame.set(payload, envelopePrefixBytes);
  return frame;
}

const maxSafeSeconds = BigInt(Number.MAX_SAFE_INTEGER);

function isPlainEnum(value: number): boolean {
  return value >= 0 && value <= 0x7fffffff && Number.isInteger(value);
}

/** True when {@link writeResponse} encodes `response` exactly as protobuf-es does. */
function isSpecialised(response: RateLimitResponse): boolean {
  if (
    response.dynamicMetadata !== undefined ||
    response.quota !== undefined ||
    response.$unknown !== undefined ||
    !isPlainEnum(response.overallCode)
  )
    return false;
  for (const s of response.statuses) {
    if (
      s.quota !== undefined ||
      s.$unknown !== undefined ||
      !isPlainEnum(s.code)
    )
      return false;
    const limit = s.currentLimit;
    if (
      limit !== undefined &&
      (limit.$unknown !== undefined || !isPlainEnum(limit.unit))
    )
      return false;
    const reset = s.durationUntilReset;
    if (
      reset !== undefined &&
      (reset.$unknown !== undefined ||
        reset.seconds < 0n ||
        reset.seconds > maxSafeSeconds ||
        !isPlainEnum(reset.nanos))
    )
      return false;
  }
  return (
    plainHeaders(response.responseHeadersToAdd) &&
    plainHeaders(response.requestHeadersToAdd)
  );
}

function plainHeaders(headers: readonly HeaderValue[]): boolean {
  for (const header of headers) if (header.$unknown !== undefined) return false;
  return true;
}

// One scratch buffer per process (the encoder is synchronous), grown on demand.
let scratch = Buffer.allocUnsafe(16 * 1024);
let pos = 0;

function ensure(extra: number): void {
  if (pos + extra <= scratch.length) return;
  const grown = Buffer.allocUnsafe(Math.max(scratch.length * 2, pos + extra));
  scratch.copy(grown, 0, 0, pos);
  scratch = grown;
}

function writeVarint(value: number): void {
  // `value` is a non-negative integer below 2^53.
  while (value > 0x7f) {
    scratch[pos++] = (value % 0x80) | 0x80;
    value = Math.floor(value / 0x80);
  }
  scratch[pos++] = value;
}

function varintSize(value: number): number {
  let size = 1;
  while (value > 0x7f) {
    value = Math.floor(value / 0x80);
    size++;
  }
  return size;
}

/** Writes tag + varint when `value` is not 0 (proto3 implicit presence). */
function writeVarintField(tag: number, value: number): void {
  if (value === 0) return;
  ensure(16);
  scratch[pos++] = tag;
  writeVarint(value);
}

function writeStringField(tag: number, value: string): void {
  if (value.length === 0) return;
  ensure(value.length * 3 + 11);
  scratch[pos++] = tag;
  if (value.length < 43) {
    // At most 126 UTF-8 bytes: a one-byte length, written after the body.
    const bytes = scratch.write(value, pos + 1, "utf8");
    scratch[pos] = bytes;
    pos += 1 + bytes;
    return;
  }
  writeVarint(Buffer.byteLength(value, "utf8"));
  pos += scratch.write(value, pos, "utf8");
}

function writeBytesField(tag: number, value: Uint8Array): void {
  if (value.length === 0) return;
  ensure(value.length + 11);
  scratch[pos++] = tag;
  writeVarint(value.length);
  scratch.set(value, pos);
  pos += value.length;
}

/**
 * Starts a length-delimited field: writes the tag, reserves one length byte, returns where
 * the body starts. {@link endMessage} fills the length (moving the body when it needs more
 * than one byte).
 */
function beginMessage(tag: number): number {
  ensure(2);
  scratch[pos++] = tag;
  pos++;
  return pos;
}

function endMessage(bodyAt: number): void {
  const length = pos - bodyAt;
  if (length < 0x80) {
    scratch[bodyAt - 1] = length;
    return;
  }
  const extra = varintSize(length) - 1;
  ensure(extra);
  scratch.copyWithin(bodyAt + extra, bodyAt, pos);
  pos = bodyAt - 1;
  writeVarint(length);
  pos += length;
}

// Field tags: (number << 3) | wire type (0 varint, 2 length-delimited).
function writeResponse(response: RateLimitResponse): void {
  writeVarintField(0x08, response.overallCode);
  for (const status of response.statuses) {
    const at = beginMessage(0x12);
    writeStatus(status);
    endMessage(at);
  }
  writeHeaders(0x1a, response.responseHeadersToAdd);
  writeHeaders(0x22, response.requestHeadersToAdd);
  writeBytesField(0x2a, response.rawBody);
}

function writeStatus(status: RateLimitResponse_DescriptorStatus): void {
  writeVarintField(0x08, status.code);
  const limit = status.currentLimit;
  if (limit !== undefined) {
    const at = beginMessage(0x12);
    writeVarintField(0x08, limit.requestsPerUnit);
    writeVarintField(0x10, limit.unit);
    writeStringField(0x1a, limit.name);
    endMessage(at);
  }
  writeVarintField(0x18, status.limitRemaining);
  const reset = status.durationUntilReset;
  if (reset !== undefined) {
    const at = beginMessage(0x22);
    writeVarintField(0x08, Number(reset.seconds));
    writeVarintField(0x10, reset.nanos);
    endMessage(at);
  }
}

function writeHeaders(tag: number, headers: readonly HeaderValue[]): void {
  for (const header of headers) {
    const at = beginMessage(tag);
    writeStringField(0x0a, header.key);
    writeStringField(0x12, header.value);
    writeBytesField(0x1a, header.rawValue);
    endMessage(at);
  }
}
