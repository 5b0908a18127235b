import { fromBinary } from "@bufbuild/protobuf";
import {
  RateLimitRequestSchema,
  type RateLimitDescriptor,
  type RateLimitDescriptor_Entry,
  type RateLimitDescriptor_RateLimitOverride,
  type RateLimitRequest,
} from "../../proto.js";

/**
 * Decodes a `RateLimitRequest` from `bytes[start, end)` into the same plain objects protobuf-es's
 * `fromBinary(RateLimitRequestSchema, …)` returns (same `$typeName`s, fields, key order, and
 * `limit` / `hitsAddend` present only when on the wire), with a few allocations per descriptor.
 *
 * Only the common shape is decoded by hand: each known field once per message in its declared
 * wire type, ASCII strings, varints below 2^28, no unknown fields. Anything else (non-ASCII
 * strings, repeated singular message fields that protobuf would merge, unknown fields, large
 * or negative numbers, truncated or malformed input) is decoded by protobuf-es itself, so the
 * result and the errors thrown are protobuf-es's in every case
 * (test/unit/server/grpc/rate-limit-request-decoder.test.ts checks both agree).
 *
 * @param bytes - the buffer holding the message
 * @param start - offset of the message's first byte
 * @param end - offset just past the message's last byte
 * @throws the error of protobuf-es's `fromBinary` when the message cannot be decoded
 */
export function decodeRateLimitRequest(
  bytes: Buffer,
  start: number,
  end: number,
): RateLimitRequest {
  return (
    decodeCommon(bytes, start, end) ??
    fromBinary(RateLimitRequestSchema, bytes.subarray(start, end))
  );
}

// Cursor of the hand decoder; module-level so that no per-call object holds it (single thread,
// no re-entrance: nothing here calls out).
let pos = 0;

/** Reads a varint below 2^28 (at most 4 bytes) at `pos`; -1 for anything else. */
function varint(bytes: Buffer, end: number): number {
  let result = 0;
  for (let shift = 0; shift < 28; shift += 7) {
    if (pos >= end) return -1;
    const byte = bytes[pos++] ?? 0;
    result |= (byte & 0x7f) << shift;
    if (byte < 0x80) return result;
  }
  return -1;
}

// Domains and entry keys repeat from call to call: the last few decoded are reused when the
// bytes match, instead of allocating the same string again (values are usually distinct).
const recentNames: string[] = ["", "", "", "", "", "", "", ""];
let nextRecentName = 0;

/**
 * Reads a length-delimited ASCII string at `pos`; undefined for anything else. With `recent`,
 * a string equal to one of the last few such names is returned instead of a new copy.
 */
function asciiString(
  bytes: Buffer,
  end: number,
  recent: boolean,
): string | undefined {
  const length = varint(bytes, end);
  if (length < 0 || pos + length > end) return undefined;
  const from = pos;
  const to = pos + length;
  for (let i = from; i < to; i++) if ((bytes[i] ?? 0) >= 0x80) return undefined;
  pos = to;
  if (length === 0) return "";
  if (!recent) return bytes.toString("latin1", from, to);
  for (const name of recentNames) {
    if (name.length !== length) continue;
    let i = 0;
    while (i < length && name.charCodeAt(i) === bytes[from + i]) i++;
    if (i === length) return name;
  }
  const name = bytes.toString("latin1", from, to);
  recentNames[nextRecentName] = name;
  nextRecentName = (nextRecentName + 1) & 7;
  return name;
}

function decodeCommon(
  bytes: Buffer,
  start: number,
  end: number,
): RateLimitRequest | undefined {
  pos = start;
  let domain: string | undefined;
  let hitsAddend: number | undefined;
  const descriptors: RateLimitDescriptor[] = [];
  while (pos < end) {
    const tag = varint(bytes, end);
    if (tag === 0x0a && domain === undefined) {
      domain = asciiString(bytes, end, true);
      if (domain === undefined) return undefined;
    } else if (tag === 0x12) {
      const length = varint(bytes, end);
      if (length < 0 || pos + length > end) return undefined;
      const descriptor = decodeDescriptor(bytes, pos + length);
      if (descriptor === undefined) return undefined;
      descriptors.push(descriptor);
    } else if (tag === 0x18 && hitsAddend === undefined) {
      hitsAddend = varint(bytes, end);
      if (hitsAddend < 0) return undefined;
    } else {
      return undefined;
    }
  }
  return {
    $typeName: "envoy.service.ratelimit.v3.RateLimitRequest",
    domain: domain ?? "",
    descriptors,
    hitsAddend: hitsAddend ?? 0,
  };
}

/** Decodes one descriptor from `pos` to `end` (its own end). */
function decodeDescriptor(
  bytes: Buffer,
  end: number,
): RateLimitDescriptor | undefined {
  const entries: RateLimitDescriptor_Entry[] = [];
  const descriptor: RateLimitDescriptor = {
    $typeName: "envoy.extensions.common.ratelimit.v3.RateLimitDescriptor",
    entries,
    isNegativeHits: false,
  };
  while (pos < end) {
    const tag = varint(bytes, end);
    if (tag === 0x0a) {
      const length = varint(bytes, end);
      if (length < 0 || pos + length > end) return undefined;
      const entry = decodeEntry(bytes, pos + length);
      if (entry === undefined) return undefined;
      entries.push(entry);
    } else if (tag === 0x12 && descriptor.limit === undefined) {
      const length = varint(bytes, end);
      if (length < 0 || pos + length > end) return undefined;
      const limit = decodeOverride(bytes, pos + length);
      if (limit === undefined) return undefined;
      descriptor.limit = limit;
    } else if (tag === 0x1a && !("hitsAddend" in descriptor)) {
      // google.protobuf.UInt64Value, unboxed by protobuf-es to a bigint.
      const length = varint(bytes, end);
      if (length < 0 || pos + length > end) return undefined;
      const wrapperEnd = pos + length;
      let value = 0;
      if (pos < wrapperEnd) {
        if (varint(bytes, wrapperEnd) !== 0x08) return undefined;
        value = varint(bytes, wrapperEnd);
        if (value < 0 || pos !== wrapperEnd) return undefined;
      }
      descriptor.hitsAddend = BigInt(value);
    } else if (tag === 0x20) {
      // is_negative_hits (bool; the last value on the wire wins, as protobuf decoders do).
      const value = varint(bytes, end);
      if (value < 0) return undefined;
      descriptor.isNegativeHits = value !== 0;
    } else {
      return undefined;
    }
  }
  return descriptor;
}

function decodeEntry(
  bytes: Buffer,
  end: number,
): RateLimitDescriptor_Entry | undefined {
  let key: string | undefined;
  let value: string | undefined;
  while (pos < end) {
    const tag = varint(bytes, end);
    if (tag === 0x0a && key === undefined) {
      key = asciiString(bytes, end, true);
      if (key === undefined) return undefined;
    } else if (tag === 0x12 && value === undefined) {
      value = asciiString(bytes, end, false);
      if (value === undefined) return undefined;
    } else {
      return undefined;
    }
  }
  return {
    $typeName: "envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.Entry",
    key: key ?? "",
    value: value ?? "",
  };
}

function decodeOverride(
  bytes: Buffer,
  end: number,
): RateLimitDescriptor_RateLimitOverride | undefined {
  let requestsPerUnit: number | undefined;
  let unit: number | undefined;
  while (pos < end) {
    const tag = varint(bytes, end);
    if (tag === 0x08 && requestsPerUnit === undefined) {
      requestsPerUnit = varint(bytes, end);
      if (requestsPerUnit < 0) return undefined;
    } else if (tag === 0x10 && unit === undefined) {
      unit = varint(bytes, end);
      if (unit < 0) return undefined;
    } else {
      return undefined;
    }
  }
  return {
    $typeName:
      "envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.RateLimitOverride",
    requestsPerUnit: requestsPerUnit ?? 0,
    // Proto3 enums are open: protobuf-es keeps any number, declared or not.
    // eslint-disable-next-line @typescript-eslint/no-unsafe-enum-assignment -- see above
    unit: unit ?? 0,
  };
}
