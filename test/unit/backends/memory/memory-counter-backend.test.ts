import { describe, expect, it } from "vitest";
import { createDecider } from "../../../../src/limiter/decide.js";
import {
  RateLimitResponse_Code as Code,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../../../../src/proto.js";
import { createStatsManager } from "../../../../src/stats/stats-manager.js";
import { FakeClock } from "../../../helpers/fake-clock.js";
import { testRateLimit } from "../../../helpers/rate-limit.js";
import { memoryLimiter } from "../../../helpers/limiters.js";
import { limitRequest } from "../../../helpers/limit-request.js";
import { descriptor } from "../../../helpers/requests.js";

describe("MemoryCounterBackend", () => {
  it("counts exactly, including hits addends and zero", async () => {
    const clock = new FakeClock(100);
    const cache = memoryLimiter({
      decider: createDecider({ clock }),
      clock,
    });
    const limit = testRateLimit(createStatsManager(), "d.k", 5);
    const d = descriptor(["k", "v"]);
    expect(
      (await cache.doLimit(limitRequest("d", [d], [limit], [3])))[0]!
        .limitRemaining,
    ).toBe(2);
    expect(
      (await cache.doLimit(limitRequest("d", [d], [limit], [0])))[0]!
        .limitRemaining,
    ).toBe(2);
    const over = await cache.doLimit(limitRequest("d", [d], [limit], [3]));
    expect(over[0]!.code).toBe(Code.OVER_LIMIT);
    await cache.close();
  });

  it("answers descriptors without a limit with OK and no counter", async () => {
    const clock = new FakeClock(100);
    const cache = memoryLimiter({
      decider: createDecider({ clock }),
      clock,
    });
    const [status] = await cache.doLimit(
      limitRequest("d", [descriptor(["k", "v"])], [undefined], [1]),
    );
    expect(status!.code).toBe(Code.OK);
    expect(status!.currentLimit).toBeUndefined();
    expect(cache.backend.size).toBe(0);
    await cache.close();
  });

  it("sweeps counters whose window has ended and keeps live ones", async () => {
    const clock = new FakeClock(100);
    const cache = memoryLimiter({
      decider: createDecider({ clock }),
      clock,
    });
    const stats = createStatsManager();
    const perMinute = testRateLimit(stats, "d.m", 5, Unit.MINUTE);
    const perHour = testRateLimit(stats, "d.h", 5, Unit.HOUR);
    for (let i = 0; i < 1000; i++) {
      await cache.doLimit(
        limitRequest("d", [descriptor(["k", `v${i}`])], [perMinute], [1]),
      );
    }
    await cache.doLimit(
      limitRequest("d", [descriptor(["k", "h"])], [perHour], [1]),
    );
    expect(cache.backend.size).toBe(1001);
    cache.backend.sweep(119);
    expect(cache.backend.size).toBe(1001);
    cache.backend.sweep(120);
    expect(cache.backend.size).toBe(1);
    cache.backend.sweep(3600);
    expect(cache.backend.size).toBe(0);
    await cache.close();
  });
});
