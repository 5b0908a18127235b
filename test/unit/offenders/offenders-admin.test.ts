import { toJson } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { createOffendersAdmin } from "../../../src/offenders/offenders-admin.js";
import {
  offenderMetricNames,
  createOffenderGauges,
} from "../../../src/offenders/offenders-metrics.js";
import { OffendersTracker } from "../../../src/offenders/offenders-tracker.js";
import {
  RateLimitDescriptorSchema,
  RateLimitResponse_Code as Code,
  RateLimitResponse_DescriptorStatusSchema,
  TopOffendersRequestSchema,
  TopOffendersResponseSchema,
} from "../../../src/proto.js";
import { create } from "@bufbuild/protobuf";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { FakeClock } from "../../helpers/fake-clock.js";
import { testRateLimit } from "../../helpers/rate-limit.js";
import { testDecision } from "../../helpers/decisions.js";
import type { RateLimitConfig } from "../../../src/config/rate-limit-config.js";
import type { HandlerContext } from "@connectrpc/connect";

const t0 = 1_795_824_000;
const stats = createStatsManager();
const limit = testRateLimit(stats, "rl.user", 10);
const config = {} as RateLimitConfig;

function hit(tracker: OffendersTracker, user: string, code = Code.OK): void {
  const request = testDecision(
    [create(RateLimitResponse_DescriptorStatusSchema, { code })],
    [limit],
    undefined,
    {
      domain: "rl",
      descriptors: [
        create(RateLimitDescriptorSchema, {
          entries: [{ key: "user", value: user }],
        }),
      ],
      hitsAddends: [1],
      config,
      overallCode: code,
    },
  );
  tracker.observe(request);
}

function setup(k = 2) {
  const clock = new FakeClock(t0 + 30);
  const tracker = new OffendersTracker({ k, clock });
  for (const [user, n] of [
    ["alice", 3],
    ["bob", 2],
    ["carol", 1],
  ] as const) {
    for (let i = 0; i < n; i++) hit(tracker, user);
  }
  hit(tracker, "alice", Code.OVER_LIMIT);
  return { clock, tracker };
}

describe("createOffendersAdmin", () => {
  it("answers TopOffenders in proto3 JSON as the issue's interface says", async () => {
    const { tracker } = setup();
    const admin = createOffendersAdmin(tracker);
    const response = create(
      TopOffendersResponseSchema,
      await admin.topOffenders(
        create(TopOffendersRequestSchema, { domain: "rl", k: 0 }),
        {} as HandlerContext,
      ),
    );
    expect(toJson(TopOffendersResponseSchema, response)).toEqual({
      rules: [
        {
          rule: "rl.user",
          domain: "rl",
          offenders: [
            { descriptor: "user=alice", hits: "4", overLimit: "1" },
            { descriptor: "user=bob", hits: "2" },
          ],
          since: "2026-11-27T23:59:00Z",
          hits: "7",
          window: "60s",
          counters: 20,
        },
      ],
    });
  });
});

describe("createOffenderGauges", () => {
  it("gives one series per offender of each rule, at most k, replaced as the top changes", () => {
    const { tracker, clock } = setup(2);
    const [hits, overLimit] = createOffenderGauges(tracker);
    expect(hits!.name).toBe(offenderMetricNames.hits);
    expect(overLimit!.name).toBe(offenderMetricNames.overLimit);
    expect([...hits!.samples()]).toEqual([
      {
        labels: {
          domain: "rl",
          rule: "rl.user",
          rank: "1",
          descriptor: "user=alice",
        },
        value: 4,
      },
      {
        labels: {
          domain: "rl",
          rule: "rl.user",
          rank: "2",
          descriptor: "user=bob",
        },
        value: 2,
      },
    ]);
    expect([...overLimit!.samples()].map((s) => s.value)).toEqual([1, 0]);
    // carol overtakes bob: bob's series is gone, not kept beside.
    for (let i = 0; i < 5; i++) hit(tracker, "carol");
    expect([...hits!.samples()].map((s) => s.labels["descriptor"])).toEqual([
      "user=carol",
      "user=alice",
    ]);
    // No traffic in two windows: no series.
    clock.seconds = t0 + 120;
    expect([...hits!.samples()]).toEqual([]);
  });
});
