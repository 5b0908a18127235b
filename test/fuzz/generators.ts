import { create, toBinary } from "@bufbuild/protobuf";
import fc from "fast-check";
import { RateLimitRequestSchema } from "../../src/proto.js";

/**
 * Seeded generators of hostile ShouldRateLimit inputs: protobuf `RateLimitRequest` bodies
 * (valid, mutated, random), gRPC frames around them, and proto3 JSON bodies for `/json` and
 * the Connect protocol. Every generator yields plain bytes so the same input can go through
 * an in-process path and over a socket.
 */

/** Domain of the fuzz config (test/fuzz/fuzz-corpus.test.ts). */
export const fuzzDomain = "fuzz";

const maxUint64 = 2n ** 64n - 1n;

/** Keys and values: known config words, random text, NUL, lone surrogates. */
const text: fc.Arbitrary<string> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.constantFrom("a", "b", "1", "path", "remote_address", ""),
  },
  { weight: 4, arbitrary: fc.string({ maxLength: 12 }) },
  { weight: 2, arbitrary: fc.string({ unit: "binary", maxLength: 12 }) },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      "\u0000",
      "a\u0000b",
      "\ud800",
      "x\udfff",
      "é",
      "😀",
      "key with spaces",
      "%ff",
    ),
  },
);

/** Keys and values around the 65536-byte bound (in their own, rare, request shape). */
const longText = fc
  .constantFrom(65535, 65536, 65537, 30000)
  .chain((n) => fc.constantFrom("v".repeat(n), "é".repeat(Math.ceil(n / 2))));

const hitsAddend: fc.Arbitrary<bigint> = fc.oneof(
  { weight: 4, arbitrary: fc.bigInt(0n, 10n) },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      2n ** 53n - 1n,
      2n ** 53n,
      2n ** 63n - 1n,
      2n ** 63n,
      maxUint64,
    ),
  },
  { weight: 1, arbitrary: fc.bigInt(0n, maxUint64) },
);

const descriptor = fc.record(
  {
    entries: fc.array(fc.record({ key: text, value: text }), { maxLength: 5 }),
    limit: fc.record({
      requestsPerUnit: fc.nat(),
      // Valid units are 1..6 (SECOND..YEAR); the rest are unknown or out of range.
      unit: fc.integer({ min: -2, max: 12 }),
    }),
    hitsAddend,
  },
  { requiredKeys: ["entries"] },
);

type RequestInit = Parameters<typeof create<typeof RateLimitRequestSchema>>[1];

/** `RateLimitRequest` field values, mostly in the fuzz domain. */
export const requestInit: fc.Arbitrary<RequestInit> = fc.oneof(
  {
    weight: 20,
    arbitrary: fc.record({
      domain: fc.oneof(
        { weight: 4, arbitrary: fc.constant(fuzzDomain) },
        { weight: 1, arbitrary: text },
      ),
      descriptors: fc.array(descriptor, { maxLength: 6 }),
      hitsAddend: fc.oneof(fc.constant(0), fc.nat(5), fc.constant(4294967295)),
    }),
  },
  // Long keys and values, around the 65536-byte bound.
  {
    weight: 1,
    arbitrary: fc
      .record({
        key: fc.oneof(text, longText),
        value: fc.oneof(text, longText),
      })
      .map((entry) => ({
        domain: fuzzDomain,
        descriptors: [{ entries: [{ key: "a", value: "1" }, entry] }],
      })),
  },
  // Around the descriptor and entry bounds (1000 and 100).
  {
    weight: 1,
    arbitrary: fc
      .constantFrom(
        [999, 1],
        [1000, 1],
        [1001, 1],
        [1, 100],
        [1, 101],
        [2, 101],
      )
      .map(([descriptors, entries]) => ({
        domain: fuzzDomain,
        descriptors: Array.from({ length: descriptors }, (_, i) => ({
          entries: Array.from({ length: entries }, () => ({
            key: "c",
            value: String(i),
          })),
        })),
      })),
  },
);

/** Encodes generated field values as a binary `RateLimitRequest`. */
export function encodeRequest(init: RequestInit): Uint8Array {
  return toBinary(RateLimitRequestSchema, create(RateLimitRequestSchema, init));
}

/** One change to an encoded message. */
type Mutation =
  | { readonly op: "flip"; readonly at: number; readonly byte: number }
  | { readonly op: "truncate"; readonly at: number }
  | { readonly op: "insert"; readonly at: number; readonly bytes: Uint8Array }
  | { readonly op: "duplicate"; readonly at: number; readonly length: number }
  | {
      readonly op: "nest";
      readonly depth: number;
      readonly wire: "group" | "length";
    };

const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      op: fc.constant("flip" as const),
      at: fc.nat(),
      byte: fc.nat(255),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant("truncate" as const),
      at: fc.nat(),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      op: fc.constant("insert" as const),
      at: fc.nat(),
      bytes: fc.uint8Array({ minLength: 1, maxLength: 12 }),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant("duplicate" as const),
      at: fc.nat(),
      length: fc.integer({ min: 1, max: 40 }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      op: fc.constant("nest" as const),
      depth: fc.constantFrom(10, 101, 1000, 100, 100_000),
      wire: fc.constantFrom("group" as const, "length" as const),
    }),
  },
);

/** Applies `mutations` to a copy of `bytes`. */
function mutate(bytes: Uint8Array, mutations: readonly Mutation[]): Uint8Array {
  let out = Buffer.from(bytes);
  for (const m of mutations) {
    const at = out.length === 0 ? 0 : m.op === "nest" ? 0 : m.at % out.length;
    switch (m.op) {
      case "flip":
        if (out.length > 0) out[at] = m.byte;
        break;
      case "truncate":
        out = out.subarray(0, at);
        break;
      case "insert":
        out = Buffer.concat([out.subarray(0, at), m.bytes, out.subarray(at)]);
        break;
      case "duplicate":
        out = Buffer.concat([
          out.subarray(0, at),
          out.subarray(at, at + m.length),
          out.subarray(at),
        ]);
        break;
      case "nest":
        out = Buffer.concat([nested(m.depth, m.wire), out]);
        break;
    }
  }
  return out;
}

/**
 * An unknown field nested `depth` times: start-group tags (field 15, wire type 3) with their
 * end tags, or length-delimited fields (field 15, wire type 2) each holding the next.
 */
function nested(depth: number, wire: "group" | "length"): Buffer {
  const key = `${wire}${depth}`;
  let bytes = nestedCache.get(key);
  if (bytes === undefined) {
    bytes = buildNested(depth, wire);
    nestedCache.set(key, bytes);
  }
  return bytes;
}

const nestedCache = new Map<string, Buffer>();

function buildNested(depth: number, wire: "group" | "length"): Buffer {
  if (wire === "group") {
    return Buffer.concat([
      Buffer.alloc(depth, (15 << 3) | 3),
      Buffer.alloc(depth, (15 << 3) | 4),
    ]);
  }
  let inner = Buffer.alloc(0);
  for (let i = 0; i < Math.min(depth, 1000); i++) {
    inner = Buffer.concat([
      Buffer.from([(15 << 3) | 2]),
      varint(inner.length),
      inner,
    ]);
  }
  return inner;
}

function varint(value: number): Buffer {
  const bytes: number[] = [];
  let v = value;
  while (v > 0x7f) {
    bytes.push((v & 0x7f) | 0x80);
    v >>>= 7;
  }
  bytes.push(v);
  return Buffer.from(bytes);
}

/** A binary `RateLimitRequest` body: valid, mutated (1 to 4 changes) or random bytes. */
export const protoBody: fc.Arbitrary<Uint8Array> = fc.oneof(
  { weight: 3, arbitrary: requestInit.map(encodeRequest) },
  {
    weight: 4,
    arbitrary: fc
      .tuple(requestInit, fc.array(mutation, { minLength: 1, maxLength: 4 }))
      .map(([init, mutations]) => mutate(encodeRequest(init), mutations)),
  },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 64 }) },
);

/** A gRPC request body (envelopes) and how to split it into writes. */
export interface GrpcFrameInput {
  readonly body: Uint8Array;
  /** Byte offsets at which a sender splits the body into separate writes. */
  readonly splits: readonly number[];
}

/** Largest gRPC message the service accepts by default (4 MiB). */
export const maxGrpcMessageBytes = 4 * 1024 * 1024;

/**
 * gRPC bodies: an envelope around {@link protoBody} with a wrong declared length (short, long,
 * over 4 MiB, 2^32 − 1), the compressed flag or unknown flag bits, extra bytes or a second
 * envelope; or a bare header fragment.
 */
export const grpcFrame: fc.Arbitrary<GrpcFrameInput> = fc.oneof(
  {
    weight: 12,
    arbitrary: fc
      .record({
        message: protoBody,
        flags: fc.oneof(
          { weight: 8, arbitrary: fc.constant(0) },
          { weight: 1, arbitrary: fc.constantFrom(1, 2, 0x80, 0xff) },
        ),
        length: fc.oneof(
          { weight: 8, arbitrary: fc.constant("exact" as const) },
          { weight: 2, arbitrary: fc.integer({ min: -8, max: 8 }) },
          {
            weight: 1,
            arbitrary: fc.constantFrom(
              maxGrpcMessageBytes,
              maxGrpcMessageBytes + 1,
              0xffffffff,
            ),
          },
        ),
        trailing: fc.oneof(
          { weight: 8, arbitrary: fc.constant(new Uint8Array(0)) },
          {
            weight: 1,
            arbitrary: fc.uint8Array({ minLength: 1, maxLength: 9 }),
          },
          {
            weight: 1,
            arbitrary: protoBody.map((m) => envelope(m, 0, m.length)),
          },
        ),
        splits: fc.array(fc.nat(), { maxLength: 4 }),
      })
      .map(({ message, flags, length, trailing, splits }) => {
        const declared =
          length === "exact"
            ? message.length
            : typeof length === "number" && Math.abs(length) <= 8
              ? Math.max(0, message.length + length)
              : length;
        const body = Buffer.concat([
          envelope(message, flags, declared),
          trailing,
        ]);
        return { body, splits: splits.map((s) => s % (body.length + 1)) };
      }),
  },
  {
    weight: 1,
    arbitrary: fc
      .uint8Array({ maxLength: 6 })
      .map((body) => ({ body, splits: [] })),
  },
);

/** A gRPC envelope with the given flags and declared length around `message`. */
export function envelope(
  message: Uint8Array,
  flags: number,
  declaredLength: number,
): Buffer {
  const header = Buffer.alloc(5);
  header[0] = flags;
  header.writeUInt32BE(declaredLength >>> 0, 1);
  return Buffer.concat([header, message]);
}

/** Splits `body` at `splits` (sorted, deduplicated) into the chunks a sender writes. */
export function splitBody(
  body: Uint8Array,
  splits: readonly number[],
): Uint8Array[] {
  const points = [...new Set(splits)].sort((a, b) => a - b);
  const chunks: Uint8Array[] = [];
  let from = 0;
  for (const at of points) {
    if (at <= from || at >= body.length) continue;
    chunks.push(body.subarray(from, at));
    from = at;
  }
  chunks.push(body.subarray(from));
  return chunks;
}

/** Number texts put verbatim into JSON (outside what JSON.stringify would write). */
const jsonNumberText = fc.constantFrom(
  "18446744073709551615",
  "18446744073709551616",
  "9007199254740991",
  "9007199254740992",
  "9007199254740993",
  "-1",
  "1.5",
  "1e3",
  "1e400",
  "-0",
  '"18446744073709551615"',
  '"9007199254740993"',
  '"0x10"',
  '" 5"',
  '""',
  "null",
  "true",
  "[]",
  "{}",
);

/** A proto3 JSON request object before serialization. */
const jsonRequest = fc.record(
  {
    domain: fc.oneof(fc.constant(fuzzDomain), text),
    hitsAddend: fc.oneof(fc.nat(10), fc.constant(4294967295)),
    descriptors: fc.array(
      fc.record(
        {
          entries: fc.array(fc.record({ key: text, value: text }), {
            maxLength: 4,
          }),
          hitsAddend: fc.oneof(hitsAddend.map(String), fc.nat(10)),
          limit: fc.record({
            requestsPerUnit: fc.nat(),
            unit: fc.constantFrom(
              "SECOND",
              "MINUTE",
              "UNKNOWN",
              "WEEK",
              "x",
              3,
              99,
            ),
          }),
        },
        { requiredKeys: ["entries"] },
      ),
      { maxLength: 5 },
    ),
  },
  { requiredKeys: [] },
);

/** A change to a JSON request: a wrong type, an unknown field, a raw number, a snake name. */
type JsonTwist =
  | {
      readonly op: "wrongType";
      readonly path: number;
      readonly value: fc.JsonValue;
    }
  | {
      readonly op: "unknown";
      readonly name: string;
      readonly value: fc.JsonValue;
    }
  | {
      readonly op: "rawHits";
      readonly number: string;
      readonly where: "request" | "descriptor";
    }
  | { readonly op: "snake" }
  | { readonly op: "none" };

const jsonTwist: fc.Arbitrary<JsonTwist> = fc.oneof(
  { weight: 3, arbitrary: fc.constant({ op: "none" as const }) },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant("wrongType" as const),
      path: fc.nat(3),
      value: fc.jsonValue({ maxDepth: 3 }),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant("unknown" as const),
      name: fc.string({ maxLength: 8 }),
      value: fc.jsonValue({ maxDepth: 2 }),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      op: fc.constant("rawHits" as const),
      number: jsonNumberText,
      where: fc.constantFrom("request" as const, "descriptor" as const),
    }),
  },
  { weight: 1, arbitrary: fc.constant({ op: "snake" as const }) },
);

const rawHitsMarker = "__RAW_HITS__";

function twistedJson(
  request: Record<string, unknown>,
  twist: JsonTwist,
): string {
  const copy = structuredClone(request);
  const descriptors = copy["descriptors"] as
    Record<string, unknown>[] | undefined;
  switch (twist.op) {
    case "wrongType": {
      const fields = ["domain", "descriptors", "hitsAddend"];
      if (twist.path < 3) copy[fields[twist.path]!] = twist.value;
      else if (descriptors?.[0] !== undefined)
        descriptors[0]["entries"] = twist.value;
      break;
    }
    case "unknown":
      copy[twist.name] = twist.value;
      break;
    case "rawHits":
      if (twist.where === "request" || descriptors?.[0] === undefined)
        copy["hitsAddend"] = rawHitsMarker;
      else descriptors[0]["hitsAddend"] = rawHitsMarker;
      break;
    case "snake":
      if ("hitsAddend" in copy) {
        copy["hits_addend"] = copy["hitsAddend"];
      }
      break;
    case "none":
      break;
  }
  const json = JSON.stringify(copy);
  return twist.op === "rawHits"
    ? json.replace(`"${rawHitsMarker}"`, twist.number)
    : json;
}

/** A change to the bytes of a JSON body. */
type ByteTwist =
  | { readonly op: "none" }
  | {
      readonly op: "invalidUtf8";
      readonly at: number;
      readonly bytes: Uint8Array;
    }
  | { readonly op: "truncate"; readonly at: number };

const byteTwist: fc.Arbitrary<ByteTwist> = fc.oneof(
  { weight: 6, arbitrary: fc.constant({ op: "none" as const }) },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant("invalidUtf8" as const),
      at: fc.nat(),
      bytes: fc.constantFrom(
        Uint8Array.of(0xff),
        Uint8Array.of(0xc3),
        Uint8Array.of(0xed, 0xa0, 0x80),
        Uint8Array.of(0xf8, 0x88, 0x80, 0x80, 0x80),
        Uint8Array.of(0x00),
      ),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      op: fc.constant("truncate" as const),
      at: fc.nat(),
    }),
  },
);

/**
 * Puts `twist.bytes` inside the first string value (a key, usually) at or after `at`, so
 * invalid UTF-8 and NUL land in keys rather than between tokens.
 */
function twistBytes(json: string, twist: ByteTwist): Buffer {
  const bytes = Buffer.from(json, "utf8");
  if (twist.op === "none" || bytes.length === 0) return bytes;
  const at = twist.at % bytes.length;
  if (twist.op === "truncate") return bytes.subarray(0, at);
  const keyAt = bytes.indexOf('"key":"', at);
  const insertAt = keyAt >= 0 ? keyAt + 7 : at;
  return Buffer.concat([
    bytes.subarray(0, insertAt),
    twist.bytes,
    bytes.subarray(insertAt),
  ]);
}

/**
 * A proto3 JSON `RateLimitRequest` body: a request with a twist (wrong types, unknown fields,
 * huge or odd hits addends written verbatim, snake_case names), invalid UTF-8 or NUL bytes in
 * keys, truncation, deep nesting (up to 100,000 levels), or any JSON value.
 */
export const jsonBody: fc.Arbitrary<Uint8Array> = fc.oneof(
  {
    weight: 12,
    arbitrary: fc
      .tuple(jsonRequest, jsonTwist, byteTwist)
      .map(([request, twist, bytes]) =>
        twistBytes(twistedJson(request, twist), bytes),
      ),
  },
  {
    weight: 1,
    arbitrary: fc
      .record({
        depth: fc.constantFrom(100, 1000, 100, 1000, 100_000),
        shape: fc.constantFrom("array", "object", "inEntry"),
      })
      .map(({ depth, shape }) => Buffer.from(deepJson(depth, shape))),
  },
  {
    weight: 2,
    arbitrary: fc.json({ maxDepth: 3 }).map((t) => Buffer.from(t)),
  },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 32 }) },
);

function deepJson(
  depth: number,
  shape: "array" | "object" | "inEntry",
): string {
  if (shape === "array") return "[".repeat(depth) + "]".repeat(depth);
  const nest = '{"a":'.repeat(depth) + "1" + "}".repeat(depth);
  if (shape === "object") return nest;
  return `{"domain":"${fuzzDomain}","descriptors":[{"entries":[{"key":"a","value":${nest}}]}]}`;
}
