import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { formatExplanation } from "../../../src/cli/explain-format.js";
import {
  DescriptorExplanation_Verdict as Verdict,
  ExplainResponseSchema,
  RateLimitRequestSchema,
  RateLimitResponse_Code as Code,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../../../src/proto.js";

describe("formatExplanation", () => {
  it("shows the window, the previous window's counter and an all-or-nothing refusal", () => {
    const text = formatExplanation(
      create(ExplainResponseSchema, {
        backend: "kv",
        domainFound: true,
        overallCode: Code.OVER_LIMIT,
        allOrNothing: true,
        allOrNothingRefused: true,
        descriptors: [
          {
            rule: {
              fullKey: "api.user",
              unit: Unit.MINUTE,
              requestsPerUnit: 3,
              unitMultiplier: 10,
              windowSeconds: 600,
              slidingWindow: true,
              allOrNothing: true,
            },
            counter: {
              key: "api_user_alice_1795578000_s600",
              value: 2n,
              valueAfter: 2n,
              previousKey: "api_user_alice_1795577400_s600",
              previousValue: 5n,
              previousWeight: 2n,
              comparedCount: 5n,
            },
            verdict: Verdict.OVER_LIMIT,
          },
        ],
      }),
      create(RateLimitRequestSchema, {
        domain: "api",
        descriptors: [{ entries: [{ key: "user", value: "alice" }] }],
      }),
    );
    expect(text).toContain(
      "rule: api.user 3 per 10 MINUTE (600s window) sliding_window charge: all_or_nothing",
    );
    expect(text).toContain("counter: api_user_alice_1795578000_s600 = 2 → 2");
    expect(text).toContain(
      "previous window: api_user_alice_1795577400_s600 = 5, weighs 2; weighted count with this request 5",
    );
    expect(text).toContain(
      "charge: all_or_nothing: refused, no counter is charged",
    );
  });
});
