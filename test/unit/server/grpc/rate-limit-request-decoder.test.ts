import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  OverrideRateLimitUnit,
  RateLimitRequestSchema,
  type RateLimitRequest,
} from "../../../../src/proto.js";
import { decodeRateLimitRequest } from "../../../../src/server/grpc/rate-limit-request-decoder.js";

/** The message inside a larger buffer, as the fast path has it (after the 5-byte prefix). */
function framed(bytes: Uint8Array): Buffer {
  const buffer = Buffer.alloc(bytes.length + 8, 0xff);
  buffer.set(bytes, 5);
  return buffer;
}

/** The hand decoder's answer, or the error it threw, for `bytes` placed at an offset. */
function ours(bytes: Uint8Array): { value?: RateLimitRequest; error?: string } {
  const buffer = framed(bytes);
  try {
    return { value: decodeRateLimitRequest(buffer, 5, 5 + bytes.length) };
  } catch (err) {
    return { error: String(err) };
  }
}

/** What the fast path did before: protobuf-es on the message's part of the request buffer. */
function theirs(bytes: Uint8Array): {
  value?: RateLimitRequest;
  error?: string;
} {
  try {
    const buffer = framed(bytes);
    return {
      value: fromBinary(
        RateLimitRequestSchema,
        buffer.subarray(5, 5 + bytes.length),
      ),
    };
  } catch (err) {
    return { error: String(err) };
  }
}

/** Same fields, values, and key order as protobuf-es's object. */
function expectSame(bytes: Uint8Array): void {
  const a = ours(bytes);
  const b = theirs(bytes);
  expect(a).toStrictEqual(b);
  if (a.value !== undefined && b.value !== undefined) {
    expect(
      JSON.stringify(a.value, (_k, v: unknown) =>
        typeof v === "bigint" ? `${v}n` : v,
      ),
    ).toBe(
      JSON.stringify(b.value, (_k, v: unknown) =>
        typeof v === "bigint" ? `${v}n` : v,
      ),
    );
  }
}

const rarely = <T>(usual: fc.Arbitrary<T>, rare: fc.Arbitrary<T>) =>
  fc.oneof({ arbitrary: usual, weight: 20 }, { arbitrary: rare, weight: 1 });
const text = rarely(
  fc.string({ unit: "grapheme-ascii", maxLength: 40 }),
  fc.oneof(
    fc.string({ maxLength: 20 }),
    fc.string({ unit: "binary", maxLength: 20 }),
  ),
);
const uint32 = rarely(
  fc.integer({ min: 0, max: 1000 }),
  fc.integer({ min: 0, max: 0xffffffff }),
);
const unit = rarely(
  fc.integer({ min: 0, max: 7 }),
  fc.integer({ min: -5, max: 0x7fffffff }),
);
const hitsAddend64 = rarely(
  fc.bigInt({ min: 0n, max: 1000n }),
  fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }),
);
const request = fc.record({
  domain: text,
  hitsAddend: uint32,
  descriptors: fc.array(
    fc.record(
      {
        entries: fc.array(fc.record({ key: text, value: text }), {
          maxLength: 4,
        }),
        limit: fc.record({ requestsPerUnit: uint32, unit }),
        hitsAddend: hitsAddend64,
        isNegativeHits: fc.boolean(),
      },
      { requiredKeys: ["entries"] },
    ),
    { maxLength: 4 },
  ),
});

describe("decodeRateLimitRequest", () => {
  it("decodes what protobuf-es encodes exactly as protobuf-es decodes it", () => {
    fc.assert(
      fc.property(request, (init) => {
        expectSame(
          toBinary(
            RateLimitRequestSchema,
            create(RateLimitRequestSchema, init),
          ),
        );
      }),
      { numRuns: 2000 },
    );
  });

  it("agrees with protobuf-es on the empty message and typical requests", () => {
    expectSame(new Uint8Array(0));
    const typical = create(RateLimitRequestSchema, {
      domain: "edge",
      descriptors: [
        { entries: [{ key: "remote_address", value: "10.1.2.3" }] },
        {
          entries: [
            { key: "path", value: "/a" },
            { key: "method", value: "" },
          ],
          limit: { requestsPerUnit: 5, unit: OverrideRateLimitUnit.MINUTE },
          hitsAddend: 0n,
        },
      ],
    });
    expectSame(toBinary(RateLimitRequestSchema, typical));
    // Envoy's refund: a descriptor with hits_addend 1 and is_negative_hits (bytes `20 01`).
    expectSame(
      toBinary(
        RateLimitRequestSchema,
        create(RateLimitRequestSchema, {
          domain: "edge",
          descriptors: [
            {
              entries: [{ key: "route", value: "slow" }],
              hitsAddend: 1n,
              isNegativeHits: true,
            },
          ],
        }),
      ),
    );
    // is_negative_hits written twice (false then true): the last one wins.
    expectSame(Uint8Array.from([0x12, 0x04, 0x20, 0x00, 0x20, 0x01]));
    // A wrapper written with an explicit zero, and an empty entry.
    expectSame(
      Uint8Array.from([0x12, 0x06, 0x0a, 0x00, 0x1a, 0x02, 0x08, 0x00]),
    );
  });

  it("answers like protobuf-es for edited, truncated and arbitrary bytes", () => {
    const edited = fc
      .tuple(request, fc.nat(), fc.integer({ min: 0, max: 255 }), fc.nat())
      .map(([init, at, byte, cut]) => {
        const bytes = toBinary(
          RateLimitRequestSchema,
          create(RateLimitRequestSchema, init),
        );
        if (bytes.length === 0) return bytes;
        const copy = Uint8Array.from(bytes);
        copy[at % copy.length] = byte;
        return copy.subarray(0, copy.length - (cut % 3));
      });
    fc.assert(
      fc.property(
        fc.oneof(edited, fc.uint8Array({ maxLength: 64 })),
        (bytes) => {
          expectSame(bytes);
        },
      ),
      { numRuns: 3000 },
    );
  });

  it("falls back to protobuf-es for repeated singular fields and unknown fields", () => {
    // domain twice (last wins), limit twice (merged), an unknown field 9.
    expectSame(Uint8Array.from([0x0a, 0x01, 0x61, 0x0a, 0x01, 0x62]));
    expectSame(
      Uint8Array.from([
        0x12, 0x08, 0x12, 0x02, 0x08, 0x05, 0x12, 0x02, 0x10, 0x03,
      ]),
    );
    expectSame(Uint8Array.from([0x48, 0x01, 0x0a, 0x01, 0x61]));
  });
});
