import { describe, expect, it } from "vitest";
import { createDecider } from "../../../src/limiter/decide.js";
import { RateLimitResponse_RateLimit_Unit as Unit } from "../../../src/proto.js";
import { rateLimitHeaders } from "../../../src/service/response-headers.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { FakeClock } from "../../helpers/fake-clock.js";
import { windowedRateLimit } from "../../helpers/rate-limit.js";
import { testDecision } from "../../helpers/decisions.js";

const names = {
  limit: "RateLimit-Limit",
  remaining: "RateLimit-Remaining",
  reset: "RateLimit-Reset",
};

describe("rateLimitHeaders with the window extensions", () => {
  const clock = new FakeClock(0);
  const base = createDecider({ clock });
  const stats = createStatsManager();

  it("resets at the end of a window of several units", () => {
    const limit = windowedRateLimit(stats, "d.m", 10, Unit.MINUTE, {
      unitMultiplier: 5,
    });
    const status = base.descriptorStatus("k", limit, 3, 1, 1000);
    const headers = rateLimitHeaders(
      names,
      testDecision([status], [limit], [false]),
      1000,
    );
    // 1000 is 100 s into the 300-second window 900–1199.
    expect(headers?.map((h) => [h.key, h.value])).toEqual([
      ["RateLimit-Limit", "10"],
      ["RateLimit-Remaining", "7"],
      ["RateLimit-Reset", "200"],
    ]);
  });

  it("takes a sliding window's reset and remaining from the weighted count", () => {
    const limit = windowedRateLimit(stats, "d.s", 10, Unit.MINUTE, {
      sliding: true,
    });
    // 30 s into the window: previous 11 weigh ceil(5.5) = 6, current 2.
    const status = base.counterStatus("k", limit, 2, 11, 1, 690, true);
    const headers = rateLimitHeaders(
      names,
      testDecision([status], [limit], [false]),
      690,
    );
    expect(headers?.map((h) => [h.key, h.value])).toEqual([
      ["RateLimit-Limit", "10"],
      ["RateLimit-Remaining", "2"],
      ["RateLimit-Reset", "3"],
    ]);
  });
});
