import { create } from "@bufbuild/protobuf";
import { DurationSchema } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { parseBucketFlag } from "../../../src/cli/client.js";
import { formatBucketExplanation } from "../../../src/cli/explain-format.js";
import { FlagError } from "../../../src/cli/go-flags.js";
import {
  BucketPolicy,
  BucketPolicyReason,
  BucketStreamSchema,
  EnvoyTokenBucketSchema,
  ExplainBucketResponseSchema,
  MatchStepSchema,
  MatchStep_Outcome as Outcome,
  RateLimitDescriptor_EntrySchema,
  RateLimitResponse_RateLimit_Unit as Unit,
  RateLimitStrategySchema,
  RateLimitStrategy_BlanketRule as BlanketRule,
  RuleSchema,
  SourceSchema,
} from "../../../src/proto.js";

const tokenBucket = (tokensPerFill: number, seconds: number, max: number) =>
  create(RateLimitStrategySchema, {
    strategy: {
      case: "tokenBucket",
      value: create(EnvoyTokenBucketSchema, {
        maxTokens: max,
        tokensPerFill,
        fillInterval: create(DurationSchema, { seconds: BigInt(seconds) }),
      }),
    },
  });

const source = create(SourceSchema, { name: "rlqs.yaml", line: 3 });

describe("parseBucketFlag", () => {
  it("reads key=value pairs into a bucket map", () => {
    expect(parseBucketFlag("tenant=acme,path=/api")).toEqual({
      tenant: "acme",
      path: "/api",
    });
  });

  it("refuses a malformed pair and a repeated key", () => {
    expect(() => parseBucketFlag("tenant")).toThrow(FlagError);
    expect(() => parseBucketFlag("=x")).toThrow(FlagError);
    expect(() => parseBucketFlag("a=1=2")).toThrow(FlagError);
    expect(() => parseBucketFlag("a=1,a=2")).toThrow(
      'invalid -explain-bucket: "a=1,a=2" names the key "a" twice',
    );
  });
});

describe("formatBucketExplanation", () => {
  it("prints the path, rule, policy, L and each stream's demand, share and token bucket", () => {
    const text = formatBucketExplanation(
      create(ExplainBucketResponseSchema, {
        domain: "rlqs",
        entries: [
          create(RateLimitDescriptor_EntrySchema, {
            key: "tenant",
            value: "gold",
          }),
        ],
        domainFound: true,
        path: [
          create(MatchStepSchema, {
            key: "tenant",
            value: "gold",
            outcome: Outcome.EXACT,
            node: "rlqs.tenant_gold",
            source,
          }),
        ],
        rule: create(RuleSchema, {
          fullKey: "rlqs.tenant_gold",
          unit: Unit.SECOND,
          requestsPerUnit: 100,
          unitMultiplier: 1,
          windowSeconds: 1,
          source,
        }),
        policy: BucketPolicy.SHARED_LIMIT,
        reason: BucketPolicyReason.LIMIT,
        limitPerSecond: 100,
        streams: [
          create(BucketStreamSchema, {
            streamId: "aaaa.1",
            replica: "aaaa",
            local: true,
            demandPerSecond: 118.25,
            sharePerSecond: 80.5,
            assignment: tokenBucket(161, 2, 9),
            assignedPerSecond: 80.5,
            lastReportTime: { seconds: 1_800_000_000n, nanos: 0 },
          }),
          create(BucketStreamSchema, {
            streamId: "bbbb.1",
            replica: "bbbb",
            sharePerSecond: 19.5,
            assignment: tokenBucket(39, 2, 2),
            assignedPerSecond: 19.5,
          }),
        ],
        shareSumPerSecond: 100,
        assignedSumPerSecond: 100,
        ledger: "kv",
        replica: "aaaa",
        summary:
          "SHARED_LIMIT: L = 100/s (rlqs.tenant_gold) shared by 2 streams, shares sum to 100/s",
      }),
    );
    expect(text).toBe(
      [
        "domain rlqs bucket tenant=gold (ledger kv, replica aaaa)",
        "├─ path[0]: tenant=gold → exact value rlqs.tenant_gold  (rlqs.yaml:3)",
        "├─ rule: rlqs.tenant_gold 100 per SECOND  (rlqs.yaml:3)",
        "├─ policy: SHARED_LIMIT (limit)",
        "├─ L: 100/s",
        "├─ streams: 2",
        "│  ├─ stream aaaa.1 (this replica): demand 118.25/s, share 80.5/s → token bucket 161 per 2s, max_tokens 9; last report 2027-01-15T08:00:00.000Z",
        "│  └─ stream bbbb.1 (replica bbbb): demand not measured yet, share 19.5/s → token bucket 39 per 2s, max_tokens 2",
        "└─ shares sum to 100/s; the token buckets admit 100/s",
        "SHARED_LIMIT: L = 100/s (rlqs.tenant_gold) shared by 2 streams, shares sum to 100/s",
      ].join("\n"),
    );
  });

  it("shows what shadow mode would enforce, and a bucket nobody holds", () => {
    const shadow = formatBucketExplanation(
      create(ExplainBucketResponseSchema, {
        domain: "rlqs",
        domainFound: true,
        policy: BucketPolicy.ALLOW_ALL,
        reason: BucketPolicyReason.SHADOW_MODE,
        globalShadowMode: true,
        limitPerSecond: 30,
        streams: [
          create(BucketStreamSchema, {
            streamId: "1",
            local: true,
            sharePerSecond: 30,
            demandPerSecond: 12,
            assignment: create(RateLimitStrategySchema, {
              strategy: { case: "blanketRule", value: BlanketRule.ALLOW_ALL },
            }),
            shadowAssignment: tokenBucket(30, 1, 3),
          }),
        ],
        ledger: "memory",
      }),
    );
    expect(shadow).toContain("policy: ALLOW_ALL (shadow mode, SHADOW_MODE)");
    expect(shadow).toContain(
      "stream 1: demand 12/s, share 30/s → ALLOW_ALL (shadow mode; enforced: token bucket 30 per 1s, max_tokens 3)",
    );
    const nobody = formatBucketExplanation(
      create(ExplainBucketResponseSchema, {
        domain: "other",
        policy: BucketPolicy.ALLOW_ALL,
        reason: BucketPolicyReason.UNKNOWN_DOMAIN,
        ledger: "memory",
        summary: "ALLOW_ALL: domain other is not loaded",
      }),
    );
    expect(nobody.split("\n")).toEqual([
      "domain other (ledger memory): domain not loaded",
      "├─ policy: ALLOW_ALL (unknown domain)",
      "└─ streams: none subscribed",
      "ALLOW_ALL: domain other is not loaded",
    ]);
  });
});
