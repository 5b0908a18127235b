import { describe, expect, it } from "vitest";
import { LimitRequest } from "../../../src/limiter/limit-request.js";
import { RateLimitResponse_RateLimit_Unit as Unit } from "../../../src/proto.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { testRateLimit } from "../../helpers/rate-limit.js";
import { descriptor } from "../../helpers/requests.js";

describe("LimitRequest.of", () => {
  const stats = createStatsManager();
  const perMinute = testRateLimit(stats, "d.k_a", 10, Unit.MINUTE);
  const perHour = testRateLimit(stats, "d.k_b", 5, Unit.HOUR);
  const a = descriptor(["k", "a"]);
  const b = descriptor(["k", "b"]);
  const c = descriptor(["k", "c"]);

  it("keeps one entry per descriptor, in request order", () => {
    const request = LimitRequest.of("d", [
      { descriptor: a, limit: perMinute, hitsAddend: 3 },
      { descriptor: b, limit: undefined, unlimited: true },
      { descriptor: c, limit: perHour, hitsAddend: -2 },
    ]);
    expect(request.domain).toBe("d");
    expect(request.size).toBe(3);
    expect(request.descriptors).toEqual([a, b, c]);
    expect(request.limits).toEqual([perMinute, undefined, perHour]);
    expect(request.hitsAddends).toEqual([3, 0, -2]);
    expect(request.unlimited).toEqual([false, true, false]);
    expect(request.counted).toBeUndefined();
    expect(request.entry(2)).toEqual({
      descriptor: c,
      limit: perHour,
      hitsAddend: -2,
      unlimited: false,
    });
  });

  it("has no unlimited list when no rule is unlimited, and 0 hits by default", () => {
    const request = LimitRequest.of("d", [
      { descriptor: a, limit: perMinute },
      { descriptor: b, limit: perHour, unlimited: false },
    ]);
    expect(request.unlimited).toBeUndefined();
    expect(request.hitsAddends).toEqual([0, 0]);
  });

  it("round-trips through entry()", () => {
    const entries = [
      { descriptor: a, limit: perMinute, hitsAddend: 1, unlimited: false },
      { descriptor: b, limit: undefined, hitsAddend: 0, unlimited: true },
    ];
    const request = LimitRequest.of("d", entries);
    expect([request.entry(0), request.entry(1)]).toEqual(entries);
    const again = LimitRequest.of("d", [request.entry(0), request.entry(1)]);
    expect(again.limits).toEqual(request.limits);
    expect(again.hitsAddends).toEqual(request.hitsAddends);
    expect(again.unlimited).toEqual(request.unlimited);
  });

  it("names the index entry() cannot give", () => {
    const request = LimitRequest.of("d", [{ descriptor: a, limit: perMinute }]);
    expect(() => request.entry(1)).toThrow(
      new RangeError("descriptor index 1 is outside 0..0"),
    );
    expect(() => request.entry(-1)).toThrow(RangeError);
    expect(() => request.entry(0.5)).toThrow(RangeError);
  });

  it("withLimits maps the defined limits of a copy and keeps the rest", () => {
    const request = LimitRequest.of("d", [
      { descriptor: a, limit: perMinute, hitsAddend: 2 },
      { descriptor: b, limit: undefined, hitsAddend: 1 },
    ]);
    const copy = request.withLimits(() => perHour);
    expect(copy.limits).toEqual([perHour, undefined]);
    expect(copy.hitsAddends).toEqual([2, 1]);
    expect(copy).not.toBe(request);
  });
});
