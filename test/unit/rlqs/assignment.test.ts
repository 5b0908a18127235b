import { toJson } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { RateLimitQuotaResponse_BucketActionSchema } from "../../../src/proto.js";
import {
  abandonAction,
  assignmentAction,
  shapeRate,
  tokenBucketFor,
} from "../../../src/rlqs/assignment.js";
import { mulberry32 } from "../../helpers/seeded-random.js";
import { create } from "@bufbuild/protobuf";
import { BucketIdSchema } from "../../../src/proto.js";

describe("tokenBucketFor", () => {
  it("uses whole seconds and longer intervals for fractional rates", () => {
    expect(tokenBucketFor(50)).toEqual({
      tokensPerFill: 50,
      fillIntervalSeconds: 1,
      maxTokens: 5,
    });
    expect(tokenBucketFor(100 / 3)).toEqual({
      tokensPerFill: 100,
      fillIntervalSeconds: 3,
      maxTokens: 4,
    });
    expect(tokenBucketFor(2.5)).toEqual({
      tokensPerFill: 5,
      fillIntervalSeconds: 2,
      maxTokens: 1,
    });
    expect(tokenBucketFor(0.3)).toEqual({
      tokensPerFill: 1,
      fillIntervalSeconds: 4,
      maxTokens: 1,
    });
    expect(tokenBucketFor(0.5)).toEqual({
      tokensPerFill: 1,
      fillIntervalSeconds: 2,
      maxTokens: 1,
    });
  });

  it("property: integer fields, interval ≥ 1 s, never above the rate, close below it", () => {
    const random = mulberry32(0xb0c4e7);
    for (let run = 0; run < 5000; run++) {
      const rate = random() < 0.2 ? random() * 2 : random() * 2000;
      const shape = tokenBucketFor(rate);
      expect(Number.isInteger(shape.tokensPerFill)).toBe(true);
      expect(Number.isInteger(shape.fillIntervalSeconds)).toBe(true);
      expect(Number.isInteger(shape.maxTokens)).toBe(true);
      expect(shape.tokensPerFill).toBeGreaterThanOrEqual(1);
      expect(shape.fillIntervalSeconds).toBeGreaterThanOrEqual(1);
      expect(shape.maxTokens).toBeGreaterThanOrEqual(1);
      expect(shapeRate(shape)).toBeLessThanOrEqual(rate + 1e-9);
      // Within one token per 5 s of the rate when the rate is at least 1/s.
      if (rate >= 1)
        expect(rate - shapeRate(shape)).toBeLessThanOrEqual(1 / 5 + 1e-9);
    }
  });
});

describe("bucket actions", () => {
  const bucketId = create(BucketIdSchema, { bucket: { tenant: "a" } });

  it("encodes a token bucket with tokens_per_fill and whole-second durations", () => {
    const action = assignmentAction(
      bucketId,
      { kind: "token_bucket", shape: tokenBucketFor(100 / 3) },
      15,
    );
    expect(toJson(RateLimitQuotaResponse_BucketActionSchema, action)).toEqual({
      bucketId: { bucket: { tenant: "a" } },
      quotaAssignmentAction: {
        assignmentTimeToLive: "15s",
        rateLimitStrategy: {
          tokenBucket: {
            maxTokens: 4,
            tokensPerFill: 100,
            fillInterval: "3s",
          },
        },
      },
    });
  });

  it("encodes blanket rules and abandon", () => {
    expect(
      toJson(
        RateLimitQuotaResponse_BucketActionSchema,
        assignmentAction(bucketId, { kind: "deny_all" }, 15),
      ),
    ).toMatchObject({
      quotaAssignmentAction: { rateLimitStrategy: { blanketRule: "DENY_ALL" } },
    });
    const allow = assignmentAction(bucketId, { kind: "allow_all" }, 15);
    expect(allow.bucketAction.case).toBe("quotaAssignmentAction");
    if (allow.bucketAction.case === "quotaAssignmentAction") {
      expect(
        allow.bucketAction.value.rateLimitStrategy?.strategy,
      ).toMatchObject({ case: "blanketRule", value: 0 });
    }
    expect(
      toJson(
        RateLimitQuotaResponse_BucketActionSchema,
        abandonAction(bucketId),
      ),
    ).toEqual({ bucketId: { bucket: { tenant: "a" } }, abandonAction: {} });
  });
});
