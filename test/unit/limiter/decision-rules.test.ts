import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import type { RateLimit } from "../../../src/config/rate-limit-config.js";
import {
  answerUnlimited,
  applyLimitRules,
  decidingDescriptor,
  unlimitedRemaining,
} from "../../../src/limiter/decision-rules.js";
import { decideRequest } from "../../../src/limiter/decision.js";
import { resolveRequest } from "../../../src/limiter/limit-request.js";
import {
  RateLimitDescriptorSchema,
  RateLimitResponse_Code as Code,
  RateLimitResponse_DescriptorStatusSchema,
} from "../../../src/proto.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { fakeConfig } from "../../helpers/fake-config.js";
import { testRateLimit } from "../../helpers/rate-limit.js";
import { limitRequest } from "../../helpers/limit-request.js";

const stats = createStatsManager();
const limit = (key: string, extra: Partial<RateLimit> = {}): RateLimit =>
  testRateLimit(stats, key, 10, undefined, extra);
const status = (code: Code) =>
  create(RateLimitResponse_DescriptorStatusSchema, { code });

describe("applyLimitRules", () => {
  it("keeps every limit when no rule is unlimited or replaces", () => {
    const limits = [limit("a"), undefined, limit("b")];
    const before = [...limits];
    expect(applyLimitRules(limits)).toBeUndefined();
    expect(limits).toEqual(before);
  });

  it("drops unlimited limits and flags them", () => {
    const limits = [limit("a"), limit("u", { unlimited: true })];
    expect(applyLimitRules(limits)).toEqual([false, true]);
    expect(limits[1]).toBeUndefined();
    expect(limits[0]?.fullKey).toBe("a");
  });

  it("drops named limits another rule replaces, unlimited replacers included", () => {
    const limits: (RateLimit | undefined)[] = [
      limit("small", { name: "small" }),
      limit("u", { unlimited: true, replaces: ["other"] }),
      limit("other", { name: "other" }),
      limit("big", { replaces: ["small"] }),
      limit("unnamed"),
    ];
    applyLimitRules(limits);
    expect(limits.map((l) => l?.fullKey)).toEqual([
      undefined,
      undefined,
      undefined,
      "big",
      "unnamed",
    ]);
  });

  it("drops two limits that replace each other", () => {
    const limits = [
      limit("a", { name: "a", replaces: ["b"] }),
      limit("b", { name: "b", replaces: ["a"] }),
    ];
    applyLimitRules(limits);
    expect(limits).toEqual([undefined, undefined]);
  });
});

describe("resolveRequest", () => {
  it("fills limits and hits addends and counts the hits of unlimited rules", () => {
    const manager = createStatsManager();
    const unlimitedLimit = testRateLimit(manager, "d.u", 0, undefined, {
      unlimited: true,
    });
    const config = fakeConfig("d", {
      "k=v": testRateLimit(manager, "d.k", 5),
      "u=1": unlimitedLimit,
    });
    const descriptors = [
      create(RateLimitDescriptorSchema, {
        entries: [{ key: "k", value: "v" }],
      }),
      create(RateLimitDescriptorSchema, {
        entries: [{ key: "u", value: "1" }],
        hitsAddend: 3n,
      }),
      create(RateLimitDescriptorSchema, {
        entries: [{ key: "x", value: "y" }],
      }),
    ];
    const { limits, hitsAddends, unlimited } = resolveRequest(
      config,
      "d",
      descriptors,
      2,
    );
    expect(unlimited).toEqual([false, true, false]);
    expect(limits.map((l) => l?.fullKey)).toEqual([
      "d.k",
      undefined,
      undefined,
    ]);
    expect(hitsAddends).toEqual([2, 3, 2]);
    expect(unlimitedLimit.stats.totalHits.value()).toBe(3);
    expect(unlimitedLimit.stats.withinLimit.value()).toBe(3);
  });
});

describe("answerUnlimited", () => {
  it("gives unlimited descriptors 4294967295 remaining", () => {
    const statuses = [status(Code.OK), status(Code.OK)];
    answerUnlimited(statuses, [false, true]);
    expect(statuses.map((s) => s.limitRemaining)).toEqual([
      0,
      unlimitedRemaining,
    ]);
  });
});

/** The overall code of `decideRequest` (docs/reference-parity.md#overall-code). */
function overallCode(
  statuses: ReturnType<typeof status>[],
  limits: (RateLimit | undefined)[],
  unlimited: boolean[] | undefined,
  globalQuotaMode: boolean,
): Code {
  const request = limitRequest(
    "d",
    limits.map(() => create(RateLimitDescriptorSchema, {})),
    limits,
    undefined,
    unlimited,
  );
  return decideRequest(request, fakeConfig("d", {}), statuses, globalQuotaMode)
    .overallCode;
}

describe("decidingDescriptor and decideRequest", () => {
  const plain = limit("p");
  const quotaLimit = limit("q", { quotaMode: true });

  it("is the first non-quota descriptor over its limit", () => {
    const statuses = [
      status(Code.OK),
      status(Code.OVER_LIMIT),
      status(Code.OVER_LIMIT),
    ];
    const quota: boolean[] = [];
    expect(
      decidingDescriptor(
        statuses,
        { limits: [plain, plain, plain], unlimited: undefined },
        false,
        quota,
      ),
    ).toBe(1);
    expect(quota).toEqual([false, false, false]);
    expect(overallCode(statuses, [plain, plain, plain], undefined, false)).toBe(
      Code.OVER_LIMIT,
    );
  });

  it("makes quota descriptors decide only when all of them are over", () => {
    const limits = [quotaLimit, quotaLimit, plain];
    const someOver = [
      status(Code.OK),
      status(Code.OVER_LIMIT),
      status(Code.OK),
    ];
    const quota: boolean[] = [];
    expect(
      decidingDescriptor(
        someOver,
        { limits: limits, unlimited: undefined },
        false,
        quota,
      ),
    ).toBe(undefined);
    expect(quota).toEqual([true, true, false]);
    expect(overallCode(someOver, limits, undefined, false)).toBe(Code.OK);
    const allOver = [
      status(Code.OVER_LIMIT),
      status(Code.OVER_LIMIT),
      status(Code.OK),
    ];
    expect(
      decidingDescriptor(
        allOver,
        { limits: limits, unlimited: undefined },
        false,
        [],
      ),
    ).toBe(0);
  });

  it("with QUOTA_MODE treats descriptors without a limit as quota, unlimited ones never", () => {
    const statuses = [
      status(Code.OVER_LIMIT),
      status(Code.OK),
      status(Code.OK),
    ];
    const quota: boolean[] = [];
    expect(
      decidingDescriptor(
        statuses,
        {
          limits: [plain, undefined, undefined],
          unlimited: [false, false, true],
        },
        true,
        quota,
      ),
    ).toBeUndefined();
    expect(quota).toEqual([true, true, false]);
    expect(
      decidingDescriptor(
        [status(Code.OVER_LIMIT), status(Code.OK)],
        { limits: [plain, undefined], unlimited: [false, true] },
        true,
        [],
      ),
    ).toBe(0);
  });
});
