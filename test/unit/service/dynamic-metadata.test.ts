import { create, toJsonString } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import {
  OverrideRateLimitUnit,
  RateLimitRequestSchema,
  RateLimitResponse_Code as Code,
  RateLimitResponse_DescriptorStatusSchema,
} from "../../../src/proto.js";
import { dynamicMetadata } from "../../../src/service/dynamic-metadata.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { testRateLimit } from "../../helpers/rate-limit.js";
import { testDecision } from "../../helpers/decisions.js";

const status = (code: Code) =>
  create(RateLimitResponse_DescriptorStatusSchema, { code });

describe("dynamicMetadata", () => {
  it("lists the request's descriptors and domain, keys sorted as Go prints them", () => {
    const request = create(RateLimitRequestSchema, {
      domain: "rl",
      descriptors: [
        {
          entries: [
            { key: "foo", value: "x" },
            { key: "bar", value: "bkthomps" },
          ],
        },
      ],
    });
    const stats = createStatsManager();
    const result = dynamicMetadata(
      request,
      testDecision([status(Code.OK)], [testRateLimit(stats, "rl.foo", 1)]),
    );
    // wire-contract.md §12, request B with RESPONSE_DYNAMIC_METADATA=true.
    expect(JSON.stringify(result)).toBe(
      '{"descriptors":[{"entries":["foo=x","bar=bkthomps"]}],"domain":"rl"}',
    );
  });

  it("adds hits addends, the override, and merges the metadata of passed descriptors, first wins", () => {
    const request = create(RateLimitRequestSchema, {
      domain: "rl",
      hitsAddend: 3,
      descriptors: [
        { entries: [{ key: "a", value: "1" }], hitsAddend: 0n },
        {
          entries: [{ key: "b", value: "2" }],
          limit: { requestsPerUnit: 10, unit: OverrideRateLimitUnit.MINUTE },
        },
        { entries: [{ key: "c", value: "3" }] },
        { entries: [{ key: "d", value: "4" }] },
      ],
    });
    const stats = createStatsManager();
    const limits = [
      testRateLimit(stats, "rl.a", 5, undefined, {
        metadata: { team: "a", nested: { x: 1, z: { deep: true } } },
      }),
      testRateLimit(stats, "rl.b", 5, undefined, {
        metadata: { team: "b", nested: { y: 2, x: 9 }, extra: [1, 2] },
      }),
      testRateLimit(stats, "rl.c", 5, undefined, {
        metadata: { over: "not merged" },
      }),
      undefined,
    ];
    const result = dynamicMetadata(
      request,
      testDecision(
        [
          status(Code.OK),
          status(Code.OK),
          status(Code.OVER_LIMIT),
          status(Code.OK),
        ],
        limits,
      ),
    );
    expect(result).toEqual({
      descriptors: [
        { entries: ["a=1"], hitsAddend: 0 },
        { entries: ["b=2"], limit: "requests_per_unit:10 unit:MINUTE" },
        { entries: ["c=3"] },
        { entries: ["d=4"] },
      ],
      domain: "rl",
      hitsAddend: 3,
      metadata: {
        extra: [1, 2],
        nested: { x: 1, y: 2, z: { deep: true } },
        team: "a",
      },
    });
    expect(Object.keys(result["metadata"] as object)).toEqual([
      "extra",
      "nested",
      "team",
    ]);
    expect(Object.keys(result)).toEqual([
      "descriptors",
      "domain",
      "hitsAddend",
      "metadata",
    ]);
  });

  it("serializes into the response Struct", () => {
    const request = create(RateLimitRequestSchema, {
      domain: "d",
      descriptors: [{ entries: [{ key: "k", value: "v" }] }],
    });
    const json = toJsonString(RateLimitRequestSchema, request);
    expect(json).toContain('"domain":"d"');
    expect(
      dynamicMetadata(request, testDecision([status(Code.OK)], [undefined])),
    ).toEqual({
      descriptors: [{ entries: ["k=v"] }],
      domain: "d",
    });
  });
});
