import { create, toBinary } from "@bufbuild/protobuf";
import { DurationSchema } from "@bufbuild/protobuf/wkt";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  HeaderValueSchema,
  RateLimitResponse_Code as Code,
  RateLimitResponse_RateLimit_Unit as Unit,
  RateLimitResponseSchema,
  RateLimitResponse_DescriptorStatusSchema,
  RateLimitResponse_RateLimitSchema,
  type RateLimitResponse,
} from "../../../../src/proto.js";
import { encodeRateLimitResponseFrame } from "../../../../src/server/grpc/rate-limit-response-encoder.js";

/** What the fast path sent before: protobuf-es's bytes behind the gRPC envelope prefix. */
function reference(response: RateLimitResponse): Buffer {
  const payload = toBinary(RateLimitResponseSchema, response);
  const frame = Buffer.alloc(5 + payload.length);
  frame.writeUInt32BE(payload.length, 1);
  frame.set(payload, 5);
  return frame;
}

const uint32 = fc.oneof(
  fc.constant(0),
  fc.integer({ min: 0, max: 200 }),
  fc.integer({ min: 0, max: 0xffffffff }),
);
// Mostly what the encoder writes itself; sometimes what it leaves to protobuf-es.
const rarely = <T>(usual: fc.Arbitrary<T>, rare: fc.Arbitrary<T>) =>
  fc.oneof({ arbitrary: usual, weight: 30 }, { arbitrary: rare, weight: 1 });
// Proto3 enums are open: any int32 may be on the wire, not only the declared members.
/* eslint-disable @typescript-eslint/no-unsafe-enum-assignment -- open enums, see above */
const asCode = (value: number): Code => value;
const asUnit = (value: number): Unit => value;
/* eslint-enable @typescript-eslint/no-unsafe-enum-assignment */
const enumValue = rarely(
  fc.integer({ min: 0, max: 7 }),
  fc.integer({ min: -3, max: 0x7fffffff }),
);
// Short and long, ASCII and any UTF-16 (lone surrogates included).
const text = fc.oneof(
  fc.string({ maxLength: 50 }),
  fc.string({ unit: "binary", maxLength: 60 }),
  fc.string({ unit: "grapheme-ascii", minLength: 40, maxLength: 400 }),
  fc.string({ unit: "binary", minLength: 40, maxLength: 200 }),
);
const bytes = fc.oneof(
  fc.constant(new Uint8Array(0)),
  fc.uint8Array({ maxLength: 300 }),
);
const seconds = rarely(
  fc.oneof(
    fc.bigInt({ min: 0n, max: 100_000n }),
    fc.bigInt({ min: 0n, max: 2n ** 53n - 1n }),
  ),
  fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }),
);

const status = fc.record({
  code: enumValue,
  currentLimit: fc.option(
    fc.record({ name: text, requestsPerUnit: uint32, unit: enumValue }),
    { nil: undefined },
  ),
  limitRemaining: uint32,
  durationUntilReset: fc.option(
    fc.record({
      seconds,
      nanos: rarely(
        fc.integer({ min: 0, max: 999_999_999 }),
        fc.integer({ min: -5, max: -1 }),
      ),
    }),
    { nil: undefined },
  ),
  quota: rarely(
    fc.constant(undefined),
    fc.record({ requests: uint32, id: text }),
  ),
});
const header = fc.record({ key: text, value: text, rawValue: bytes });

const response = fc
  .record({
    overallCode: enumValue,
    statuses: fc.array(status, { maxLength: 12 }),
    responseHeadersToAdd: fc.array(header, { maxLength: 4 }),
    requestHeadersToAdd: fc.array(header, { maxLength: 2 }),
    rawBody: bytes,
    withMetadata: rarely(fc.constant(false), fc.constant(true)),
  })
  .map((r): RateLimitResponse =>
    create(RateLimitResponseSchema, {
      overallCode: asCode(r.overallCode),
      statuses: r.statuses.map((s) =>
        create(RateLimitResponse_DescriptorStatusSchema, {
          code: asCode(s.code),
          limitRemaining: s.limitRemaining,
          ...(s.currentLimit !== undefined
            ? {
                currentLimit: create(RateLimitResponse_RateLimitSchema, {
                  ...s.currentLimit,
                  unit: asUnit(s.currentLimit.unit),
                }),
              }
            : {}),
          ...(s.durationUntilReset !== undefined
            ? {
                durationUntilReset: create(
                  DurationSchema,
                  s.durationUntilReset,
                ),
              }
            : {}),
          ...(s.quota !== undefined ? { quota: s.quota } : {}),
        }),
      ),
      responseHeadersToAdd: r.responseHeadersToAdd.map((h) =>
        create(HeaderValueSchema, h),
      ),
      requestHeadersToAdd: r.requestHeadersToAdd.map((h) =>
        create(HeaderValueSchema, h),
      ),
      rawBody: r.rawBody,
      ...(r.withMetadata ? { dynamicMetadata: { a: "b", n: 1 } } : {}),
    }),
  );

describe("encodeRateLimitResponseFrame", () => {
  it("equals protobuf-es's encoding byte for byte, behind the gRPC envelope prefix", () => {
    fc.assert(
      fc.property(response, (r) => {
        expect(encodeRateLimitResponseFrame(r).equals(reference(r))).toBe(true);
      }),
      { numRuns: 3000 },
    );
  });

  it("encodes a typical decision (no quota, no metadata) and a large message", () => {
    const typical = create(RateLimitResponseSchema, {
      overallCode: Code.OVER_LIMIT,
      statuses: [
        {
          code: Code.OVER_LIMIT,
          currentLimit: {
            requestsPerUnit: 10,
            unit: Unit.MINUTE,
            name: "per-user",
          },
          limitRemaining: 0,
          durationUntilReset: { seconds: 42n },
        },
        { code: Code.OK },
      ],
    });
    expect(encodeRateLimitResponseFrame(typical)).toEqual(reference(typical));
    // Past the scratch buffer's first size: it grows, and lengths take several bytes.
    const large = create(RateLimitResponseSchema, {
      overallCode: Code.OK,
      statuses: Array.from({ length: 400 }, (_, i) => ({
        code: Code.OK,
        currentLimit: {
          requestsPerUnit: i,
          unit: Unit.SECOND,
          name: "n".repeat(i),
        },
        limitRemaining: i * 1000,
      })),
    });
    expect(encodeRateLimitResponseFrame(large)).toEqual(reference(large));
  });
});
