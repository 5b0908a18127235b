// ShouldRateLimit and Explain per algorithm kind (house style §12, issue 32): for each kind the
// whole service (createApp, memory backend, default settings, a hand-moved clock) admits
// exactly its limit, refuses the next hit with the remaining budget and reset the kind's rule
// gives, and starts over when its window or bucket does. Before every charge, Explain is asked
// about the same request at the same instant and must tell the same story: the same overall
// code and the same status (code, limit, remaining, reset) per descriptor. Every expectation
// is computed from the limits below, with the formulas of docs/configuration.md.

import { create } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  DescriptorExplanation_Verdict as Verdict,
  RateLimitRequestSchema,
  RateLimitResponse_Code as Code,
  RateLimitResponse_RateLimit_Unit as Unit,
  type RateLimitResponse_DescriptorStatus,
} from "../../src/proto.js";
import {
  startExplainDriver,
  type ExplainDriver,
} from "../helpers/explain-driver.js";

/** The limits under test; the config below is written from these numbers. */
const fixedMinute = { unit: "minute", seconds: 60, rpu: 4 } as const;
const fixedMultiple = { unit: "second", multiplier: 10, rpu: 3 } as const;
const sliding = { unit: "minute", seconds: 60, rpu: 5 } as const;
const calendarDay = { zone: "America/New_York", rpu: 3 } as const;
const calendarMonth = { zone: "Europe/Berlin", rpu: 2 } as const;
const bucket = { unit: "second", seconds: 1, rpu: 2, burst: 4 } as const;
const perSecond = { unit: "second", seconds: 1, rpu: 3 } as const;
const perMinute = { unit: "minute", seconds: 60, rpu: 5 } as const;

const multiLimits = `
    rate_limits:
      - { unit: ${perSecond.unit}, requests_per_unit: ${perSecond.rpu} }
      - { unit: ${perMinute.unit}, requests_per_unit: ${perMinute.rpu} }`;

const files = {
  "kinds.yaml": `
domain: kinds
descriptors:
  - key: fixed
    rate_limit: { unit: ${fixedMinute.unit}, requests_per_unit: ${fixedMinute.rpu} }
  - key: fixed_multiple
    rate_limit:
      unit: ${fixedMultiple.unit}
      unit_multiplier: ${fixedMultiple.multiplier}
      requests_per_unit: ${fixedMultiple.rpu}
  - key: sliding
    rate_limit:
      unit: ${sliding.unit}
      requests_per_unit: ${sliding.rpu}
      algorithm: sliding_window
  - key: calendar_day
    rate_limit:
      { unit: day, requests_per_unit: ${calendarDay.rpu}, time_zone: ${calendarDay.zone} }
  - key: calendar_month
    rate_limit:
      { unit: month, requests_per_unit: ${calendarMonth.rpu}, time_zone: ${calendarMonth.zone} }
  - key: bucket
    rate_limit:
      unit: ${bucket.unit}
      requests_per_unit: ${bucket.rpu}
      algorithm: token_bucket
      burst: ${bucket.burst}
  - key: multi${multiLimits}
`,
  "kinds-aon.yaml": `
domain: kinds_aon
charge: all_or_nothing
descriptors:
  - key: multi${multiLimits}
`,
};

let driver: ExplainDriver;
beforeAll(async () => {
  driver = await startExplainDriver(files, Date.UTC(2026, 0, 1));
});
afterAll(async () => {
  await driver.stop();
});

/** A fresh descriptor value per call, so that no two tests share a counter. */
let values = 0;
function freshValue(): string {
  values += 1;
  return `v${values}`;
}

/** Sets the clock to `seconds` (epoch seconds, may be fractional). */
function at(seconds: number): void {
  driver.clock.ms = Math.round(seconds * 1000);
}

/**
 * Asks Explain about a one-descriptor request, then charges it at the same instant, and checks
 * that Explain told the same story.
 *
 * @returns the charge's status of the descriptor, the verdict Explain gave it, and whether
 *   Explain said an all-or-nothing request is refused
 */
async function charge(
  domain: string,
  key: string,
  value: string,
): Promise<{
  status: RateLimitResponse_DescriptorStatus;
  verdict: Verdict;
  allOrNothingRefused: boolean;
}> {
  const request = create(RateLimitRequestSchema, {
    domain,
    descriptors: [{ entries: [{ key, value }] }],
  });
  const explained = await driver.explain(request);
  const charged = await driver.shouldRateLimit(request);
  if (!explained.ok)
    throw new Error(`Explain failed: ${explained.error.message}`);
  if (!charged.ok)
    throw new Error(`ShouldRateLimit failed: ${charged.error.message}`);
  const response = charged.response;
  expect(explained.response.overallCode).toBe(response.overallCode);
  expect(explained.response.descriptors.map((d) => d.status)).toEqual(
    response.statuses,
  );
  const verdict = explained.response.descriptors[0]!.verdict;
  expect(verdict === Verdict.OVER_LIMIT).toBe(
    response.overallCode === Code.OVER_LIMIT,
  );
  return {
    status: response.statuses[0]!,
    verdict,
    allOrNothingRefused: explained.response.allOrNothingRefused,
  };
}

/** What a status must say: code, remaining and reset (seconds), and the limit reported. */
function expectStatus(
  status: RateLimitResponse_DescriptorStatus,
  code: Code,
  remaining: number,
  resetSeconds: number,
  limit?: { rpu: number; unit: Unit },
): void {
  expect({
    code: status.code,
    remaining: status.limitRemaining,
    reset: Number(status.durationUntilReset?.seconds ?? -1n),
  }).toEqual({ code, remaining, reset: resetSeconds });
  if (limit !== undefined) {
    expect(status.currentLimit?.requestsPerUnit).toBe(limit.rpu);
    expect(status.currentLimit?.unit).toBe(limit.unit);
  }
}

describe("fixed window", () => {
  const cases = [
    {
      name: "one unit (minute)",
      key: "fixed",
      window: fixedMinute.seconds,
      rpu: fixedMinute.rpu,
      unit: Unit.MINUTE,
    },
    {
      name: "unit_multiplier (10 seconds)",
      key: "fixed_multiple",
      window: fixedMultiple.multiplier,
      rpu: fixedMultiple.rpu,
      unit: Unit.SECOND,
    },
  ];
  for (const c of cases) {
    it(`admits the limit, then refuses until the window ends: ${c.name}`, async () => {
      const value = freshValue();
      // Windows are aligned to the epoch; start 3 s into one.
      const start = 1_800_000_000 - (1_800_000_000 % c.window);
      const offset = 3;
      at(start + offset);
      const limit = { rpu: c.rpu, unit: c.unit };
      for (let i = 1; i <= c.rpu; i++) {
        const { status } = await charge("kinds", c.key, value);
        expectStatus(status, Code.OK, c.rpu - i, c.window - offset, limit);
      }
      const over = await charge("kinds", c.key, value);
      expectStatus(over.status, Code.OVER_LIMIT, 0, c.window - offset, limit);
      expect(over.verdict).toBe(Verdict.OVER_LIMIT);
      // Still refused in the window's last millisecond…
      at(start + c.window - 0.001);
      expectStatus(
        (await charge("kinds", c.key, value)).status,
        Code.OVER_LIMIT,
        0,
        1,
      );
      // …and a new window starts with the whole budget.
      at(start + c.window);
      expectStatus(
        (await charge("kinds", c.key, value)).status,
        Code.OK,
        c.rpu - 1,
        c.window,
        limit,
      );
    });
  }
});

/**
 * The sliding-window rule of docs/configuration.md: with W the window, e the seconds into the
 * current window, P the previous window's counter and C the current one after the hits:
 * weighted = ceil(P × (W − e) / W) + C; the reset is when the weighted count first falls.
 */
function slidingExpectation(
  rpu: number,
  w: number,
  e: number,
  p: number,
  c: number,
): { code: Code; remaining: number; reset: number } {
  const weight = Math.ceil((p * (w - e)) / w);
  const weighted = weight + c;
  let reset: number;
  if (weight >= 1) reset = Math.ceil((w * (p - weight + 1)) / p) - e;
  else if (c >= 1) reset = w - e + Math.ceil(w / c);
  else reset = w - e;
  return weighted > rpu
    ? { code: Code.OVER_LIMIT, remaining: 0, reset }
    : { code: Code.OK, remaining: rpu - weighted, reset };
}

describe("sliding window", () => {
  it("admits the limit in a window, then weighs the previous window as it fades", async () => {
    const value = freshValue();
    const { seconds: w, rpu } = sliding;
    const start = 1_800_000_000 - (1_800_000_000 % w);
    const limit = { rpu, unit: Unit.MINUTE };
    // An empty previous window: exactly the limit is admitted.
    const e1 = 15;
    at(start + e1);
    for (let c = 1; c <= rpu + 1; c++) {
      const { status } = await charge("kinds", "sliding", value);
      const want = slidingExpectation(rpu, w, e1, 0, c);
      expect(want.code).toBe(c <= rpu ? Code.OK : Code.OVER_LIMIT);
      expectStatus(status, want.code, want.remaining, want.reset, limit);
    }
    // 25 s into the next window, the previous one (rpu + 1: the refused hit counted too)
    // still weighs ceil(6 × 35 / 60) = 4 of its hits: fewer fit, and it fades second by second.
    const previous = rpu + 1;
    const e2 = 25;
    at(start + w + e2);
    let admitted = 0;
    for (let c = 1; ; c++) {
      const { status } = await charge("kinds", "sliding", value);
      const want = slidingExpectation(rpu, w, e2, previous, c);
      expectStatus(status, want.code, want.remaining, want.reset, limit);
      if (want.code === Code.OVER_LIMIT) break;
      admitted += 1;
    }
    expect(admitted).toBe(rpu - Math.ceil((previous * (w - e2)) / w));
    // Two windows later nothing weighs any more: the whole budget again.
    at(start + 3 * w);
    const { status } = await charge("kinds", "sliding", value);
    const want = slidingExpectation(rpu, w, 0, 0, 1);
    expectStatus(status, Code.OK, rpu - 1, want.reset, limit);
  });
});

describe("calendar window", () => {
  it("counts a local day (25 hours long on the fall-back day) and resets at local midnight", async () => {
    const value = freshValue();
    const { rpu } = calendarDay;
    // 2026-11-01 in New York: 00:00 EDT (04:00Z) to 2026-11-02 00:00 EST (05:00Z).
    const dayEnd = Date.UTC(2026, 10, 2, 5) / 1000;
    const nextDayEnd = Date.UTC(2026, 10, 3, 5) / 1000;
    const now = Date.UTC(2026, 10, 1, 20) / 1000;
    at(now);
    const limit = { rpu, unit: Unit.DAY };
    for (let i = 1; i <= rpu; i++) {
      const { status } = await charge("kinds", "calendar_day", value);
      expectStatus(status, Code.OK, rpu - i, dayEnd - now, limit);
    }
    const over = await charge("kinds", "calendar_day", value);
    expectStatus(over.status, Code.OVER_LIMIT, 0, dayEnd - now, limit);
    // Past midnight UTC, still 2026-11-01 in New York: still refused.
    at(Date.UTC(2026, 10, 2, 1) / 1000);
    expectStatus(
      (await charge("kinds", "calendar_day", value)).status,
      Code.OVER_LIMIT,
      0,
      dayEnd - Date.UTC(2026, 10, 2, 1) / 1000,
    );
    at(dayEnd);
    expectStatus(
      (await charge("kinds", "calendar_day", value)).status,
      Code.OK,
      rpu - 1,
      nextDayEnd - dayEnd,
      limit,
    );
  });

  it("counts a local month and resets at the zone's first of the month", async () => {
    const value = freshValue();
    const { rpu } = calendarMonth;
    // February 2027 in Berlin ends 2027-03-01 00:00 CET (2027-02-28T23:00Z); March ends
    // 2027-04-01 00:00 CEST (2027-03-31T22:00Z): 31 days less the hour of the DST change.
    const monthEnd = Date.UTC(2027, 1, 28, 23) / 1000;
    const nextMonthEnd = Date.UTC(2027, 2, 31, 22) / 1000;
    const now = Date.UTC(2027, 1, 27, 12) / 1000;
    at(now);
    const limit = { rpu, unit: Unit.MONTH };
    for (let i = 1; i <= rpu; i++) {
      const { status } = await charge("kinds", "calendar_month", value);
      expectStatus(status, Code.OK, rpu - i, monthEnd - now, limit);
    }
    const over = await charge("kinds", "calendar_month", value);
    expectStatus(over.status, Code.OVER_LIMIT, 0, monthEnd - now, limit);
    at(monthEnd);
    expectStatus(
      (await charge("kinds", "calendar_month", value)).status,
      Code.OK,
      rpu - 1,
      nextMonthEnd - monthEnd,
      limit,
    );
  });
});

describe("token bucket", () => {
  // GCRA (src/limiter/gcra.ts, docs/configuration.md): emission interval T = ceil(window ×
  // 10⁶ / requests_per_unit) µs, capacity burst × T; after k hits on a full bucket it is full
  // again in k × T, and floor((capacity − k × T) / T) single hits remain.
  const intervalUs = Math.ceil((bucket.seconds * 1e6) / bucket.rpu);
  const resetSeconds = (us: number): number => Math.max(1, Math.ceil(us / 1e6));
  const limit = { rpu: bucket.rpu, unit: Unit.SECOND };

  it("admits a burst at once, refuses the next hit, and refills one hit per interval", async () => {
    const value = freshValue();
    const t0 = 1_800_000_000;
    at(t0);
    for (let k = 1; k <= bucket.burst; k++) {
      const { status } = await charge("kinds", "bucket", value);
      expectStatus(
        status,
        Code.OK,
        bucket.burst - k,
        resetSeconds(k * intervalUs),
        limit,
      );
    }
    // Refused: nothing changes, the bucket is full again in burst × T.
    const over = await charge("kinds", "bucket", value);
    expectStatus(
      over.status,
      Code.OVER_LIMIT,
      0,
      resetSeconds(bucket.burst * intervalUs),
      limit,
    );
    // One interval later exactly one hit fits again.
    at(t0 + intervalUs / 1e6);
    expectStatus(
      (await charge("kinds", "bucket", value)).status,
      Code.OK,
      0,
      resetSeconds(bucket.burst * intervalUs),
    );
    expectStatus(
      (await charge("kinds", "bucket", value)).status,
      Code.OVER_LIMIT,
      0,
      resetSeconds(bucket.burst * intervalUs),
    );
    // Once full again (burst × T after the last admission) the whole burst fits.
    at(t0 + ((1 + bucket.burst) * intervalUs) / 1e6);
    for (let k = 1; k <= bucket.burst; k++) {
      const { status } = await charge("kinds", "bucket", value);
      expectStatus(
        status,
        Code.OK,
        bucket.burst - k,
        resetSeconds(k * intervalUs),
      );
    }
  });
});

describe("several limits per descriptor (rate_limits)", () => {
  const secondLimit = { rpu: perSecond.rpu, unit: Unit.SECOND };
  const minuteLimit = { rpu: perMinute.rpu, unit: Unit.MINUTE };
  const start = 1_800_000_000 - (1_800_000_000 % perMinute.seconds);
  const offset = 10; // seconds into the minute

  it("answers with the tightest limit, and refuses when any limit is over (charge: each)", async () => {
    const value = freshValue();
    at(start + offset);
    // Within one second the per-second limit has the fewest remaining and decides.
    for (let i = 1; i <= perSecond.rpu; i++) {
      const { status } = await charge("kinds", "multi", value);
      expectStatus(status, Code.OK, perSecond.rpu - i, 1, secondLimit);
    }
    const over = await charge("kinds", "multi", value);
    expectStatus(over.status, Code.OVER_LIMIT, 0, 1, secondLimit);
    // The refused hit was counted on both (charge: each), so the minute holds rpu + 1 hits.
    let minuteCount = perSecond.rpu + 1;
    at(start + offset + 1);
    // The second starts over; the minute now has the fewest remaining, then refuses.
    for (;;) {
      const { status } = await charge("kinds", "multi", value);
      minuteCount += 1;
      const minuteRemaining = Math.max(0, perMinute.rpu - minuteCount);
      const reset = perMinute.seconds - offset - 1;
      if (minuteCount > perMinute.rpu) {
        expectStatus(status, Code.OVER_LIMIT, 0, reset, minuteLimit);
        break;
      }
      expectStatus(status, Code.OK, minuteRemaining, reset, minuteLimit);
    }
    // The next minute: both start over, and the per-second limit decides again.
    at(start + perMinute.seconds);
    expectStatus(
      (await charge("kinds", "multi", value)).status,
      Code.OK,
      perSecond.rpu - 1,
      1,
      secondLimit,
    );
  });

  it("charges no limit of a refused request (charge: all_or_nothing)", async () => {
    const value = freshValue();
    at(start + offset);
    for (let i = 1; i <= perSecond.rpu; i++) {
      const { status } = await charge("kinds_aon", "multi", value);
      expectStatus(status, Code.OK, perSecond.rpu - i, 1, secondLimit);
    }
    const over = await charge("kinds_aon", "multi", value);
    expectStatus(over.status, Code.OVER_LIMIT, 0, 1, secondLimit);
    expect(over.allOrNothingRefused).toBe(true);
    // Refused, so the minute holds only the admitted hits: more of them fit than with `each`.
    let minuteCount: number = perSecond.rpu;
    at(start + offset + 1);
    const reset = perMinute.seconds - offset - 1;
    while (minuteCount < perMinute.rpu) {
      const { status } = await charge("kinds_aon", "multi", value);
      minuteCount += 1;
      const secondRemaining = perSecond.rpu - (minuteCount - perSecond.rpu);
      const minuteRemaining = perMinute.rpu - minuteCount;
      // The fewest remaining decides.
      if (secondRemaining <= minuteRemaining)
        expectStatus(status, Code.OK, secondRemaining, 1, secondLimit);
      else expectStatus(status, Code.OK, minuteRemaining, reset, minuteLimit);
    }
    const refused = await charge("kinds_aon", "multi", value);
    expectStatus(refused.status, Code.OVER_LIMIT, 0, reset, minuteLimit);
    expect(refused.allOrNothingRefused).toBe(true);
    // Still refused: nothing was charged by the refusal.
    expectStatus(
      (await charge("kinds_aon", "multi", value)).status,
      Code.OVER_LIMIT,
      0,
      reset,
      minuteLimit,
    );
  });
});
