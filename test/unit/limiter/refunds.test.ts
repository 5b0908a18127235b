import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { createDecider } from "../../../src/limiter/decide.js";
import { hitsAddendFor } from "../../../src/limiter/hits-addend.js";
import { createLocalCache } from "../../../src/limiter/local-cache.js";
import {
  RateLimitDescriptorSchema,
  RateLimitResponse_Code as Code,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../../../src/proto.js";
import {
  createStatsManager,
  type StatsManager,
} from "../../../src/stats/stats-manager.js";
import { FakeClock } from "../../helpers/fake-clock.js";
import { memoryLimiter } from "../../helpers/limiters.js";
import {
  windowedRateLimit,
  type WindowOptions,
} from "../../helpers/rate-limit.js";
import { limitRequest } from "../../helpers/limit-request.js";
import { peekCounters } from "../../helpers/decisions.js";

// Refunds (`is_negative_hits`, Envoy >= 1.38) through the decision pipeline on the memory
// backend: a refund takes hits back from the counter of the current window, never below 0,
// never creating it; it is always OK, counts no statistic, and clears a local-cache entry it
// makes stale. The kv and mc stores' own part (the clamped decrement) is in
// test/integration/counter-backend-contract.test.ts.

const now = 1_700_000_040;
const descriptor = create(RateLimitDescriptorSchema, {
  entries: [{ key: "k", value: "v" }],
});

function setup(
  requestsPerUnit: number,
  extra: WindowOptions = {},
  localCache = false,
) {
  const clock = new FakeClock(now);
  const stats: StatsManager = createStatsManager();
  const limiter = memoryLimiter({
    clock,
    decider: createDecider({
      clock,
      ...(localCache
        ? { localCache: createLocalCache({ maxBytes: 1 << 20, clock }) }
        : {}),
    }),
  });
  const limit = windowedRateLimit(
    stats,
    "d.k_v",
    requestsPerUnit,
    Unit.MINUTE,
    extra,
  );
  const call = async (hits: number) => {
    const [status] = await limiter.doLimit(
      limitRequest("d", [descriptor], [limit], [hits]),
    );
    return status!;
  };
  const counter = async (): Promise<number> => {
    const [reading] = await peekCounters(
      limiter,
      limitRequest("d", [descriptor], [limit]),
    );
    return reading!.value;
  };
  const stat = (name: "totalHits" | "overLimit" | "withinLimit") =>
    limit.stats[name].value();
  return { clock, limiter, limit, call, counter, stat };
}

describe("refunds (is_negative_hits)", () => {
  it("hitsAddendFor negates the hits of a descriptor with is_negative_hits", () => {
    const refund = create(RateLimitDescriptorSchema, {
      entries: [{ key: "k", value: "v" }],
      hitsAddend: 3n,
      isNegativeHits: true,
    });
    expect(hitsAddendFor(refund, 0)).toBe(-3);
    const requestLevel = create(RateLimitDescriptorSchema, {
      isNegativeHits: true,
    });
    expect(hitsAddendFor(requestLevel, 0)).toBe(-1);
    expect(hitsAddendFor(requestLevel, 4)).toBe(-4);
    const checkOnly = create(RateLimitDescriptorSchema, {
      hitsAddend: 0n,
      isNegativeHits: true,
    });
    expect(Object.is(hitsAddendFor(checkOnly, 0), 0)).toBe(true);
  });

  it("takes hits back from the window's counter, never below 0, always OK, counting no statistic", async () => {
    const t = setup(10);
    for (let i = 0; i < 3; i++) await t.call(1);
    expect(await t.counter()).toBe(3);
    const refund = await t.call(-2);
    expect(refund.code).toBe(Code.OK);
    expect(refund.limitRemaining).toBe(9);
    expect(await t.counter()).toBe(1);
    const tooMuch = await t.call(-5);
    expect(tooMuch.code).toBe(Code.OK);
    expect(tooMuch.limitRemaining).toBe(10);
    expect(await t.counter()).toBe(0);
    // Counting resumes from 0; the refunds are in no statistic.
    expect((await t.call(1)).limitRemaining).toBe(9);
    expect(t.stat("totalHits")).toBe(4);
    expect(t.stat("withinLimit")).toBe(4);
    expect(t.stat("overLimit")).toBe(0);
  });

  it("is OK even on a counter over its limit, and makes room for as many hits as it gives back", async () => {
    const t = setup(2);
    const codes: Code[] = [];
    for (let i = 0; i < 4; i++) codes.push((await t.call(1)).code);
    expect(codes).toEqual([Code.OK, Code.OK, Code.OVER_LIMIT, Code.OVER_LIMIT]);
    // Every hit was counted, refused ones too (their refunds will come).
    expect(await t.counter()).toBe(4);
    expect((await t.call(-1)).code).toBe(Code.OK);
    expect((await t.call(-1)).code).toBe(Code.OK);
    expect((await t.call(-1)).code).toBe(Code.OK);
    expect((await t.call(1)).code).toBe(Code.OK);
    expect((await t.call(1)).code).toBe(Code.OVER_LIMIT);
  });

  it("an in-flight limit: C of N concurrent starts pass, round after round, with no slot leaked", async () => {
    const capacity = 3;
    const t = setup(capacity);
    for (let round = 0; round < 5; round++) {
      const starts = await Promise.all(
        Array.from({ length: 7 }, () => t.call(1)),
      );
      expect(starts.filter((s) => s.code === Code.OK)).toHaveLength(capacity);
      // Every stream ends with a refund, the 429s' included (Envoy sends them all).
      await Promise.all(starts.map(() => t.call(-1)));
      expect(await t.counter()).toBe(0);
    }
  });

  it("does not create a counter it has nothing to take from", async () => {
    const t = setup(5);
    const before = t.limiter.backend.size;
    expect((await t.call(-1)).code).toBe(Code.OK);
    expect(t.limiter.backend.size).toBe(before);
    expect(await t.counter()).toBe(0);
  });

  it("clears the local over-limit cache entry it makes stale", async () => {
    const t = setup(1, {}, true);
    expect((await t.call(1)).code).toBe(Code.OK);
    expect((await t.call(1)).code).toBe(Code.OVER_LIMIT); // now in the local cache
    const cached = await t.call(1);
    expect(cached.code).toBe(Code.OVER_LIMIT);
    expect(await t.counter()).toBe(2); // the cached answer did not count
    await t.call(-2);
    expect(await t.counter()).toBe(0);
    // Not answered by the local cache any more: the store decides (and counts).
    expect((await t.call(1)).code).toBe(Code.OK);
    expect(await t.counter()).toBe(1);
  });

  it("sliding windows: the refund comes off the current window's counter", async () => {
    const t = setup(4, { sliding: true });
    for (let i = 0; i < 3; i++) await t.call(1);
    await t.call(-1);
    expect(await t.counter()).toBe(2);
  });

  it("all-or-nothing: a refund applies even when the request's charge is refused", async () => {
    const clock = new FakeClock(now);
    const stats = createStatsManager();
    const limiter = memoryLimiter({ clock, decider: createDecider({ clock }) });
    const a = windowedRateLimit(stats, "d.k_a", 1, Unit.MINUTE, {
      allOrNothing: true,
    });
    const b = windowedRateLimit(stats, "d.k_b", 5, Unit.MINUTE, {
      allOrNothing: true,
    });
    const descriptors = ["a", "b"].map((value) =>
      create(RateLimitDescriptorSchema, { entries: [{ key: "k", value }] }),
    );
    await limiter.doLimit(limitRequest("d", descriptors, [a, b], [1, 1]));
    await limiter.doLimit(limitRequest("d", descriptors, [a, b], [0, 1]));
    // a is full: a charge of a refused; b's refund still applies.
    const statuses = await limiter.doLimit(
      limitRequest("d", descriptors, [a, b], [1, -2]),
    );
    expect(statuses.map((s) => s.code)).toEqual([Code.OVER_LIMIT, Code.OK]);
    const readings = await peekCounters(
      limiter,
      limitRequest("d", descriptors, [a, b]),
    );
    expect(readings.map((r) => r!.value)).toEqual([1, 0]);
  });
});
