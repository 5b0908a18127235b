import { describe, expect, it } from "vitest";
import {
  compileAlgorithm,
  fixedEpochWindow,
} from "../../../src/config/algorithm.js";
import { CalendarWindow } from "../../../src/config/calendar-window.js";
import {
  RuleTracker,
  descriptorText,
  otherKeyMark,
  type TrackedWindow,
} from "../../../src/offenders/rule-tracker.js";
import { create } from "@bufbuild/protobuf";
import { RateLimitDescriptorSchema } from "../../../src/proto.js";
import { ExactCounts, zipfSampler } from "../../helpers/zipf.js";

/** An epoch-aligned window of `seconds`, as a fixed-window rule's limit has it. */
function epochWindow(seconds: number): TrackedWindow {
  return { windowSeconds: seconds, algorithm: fixedEpochWindow(seconds) };
}

/** A calendar window (`time_zone`) of nominal length `seconds`. */
function calendarWindow(
  seconds: number,
  calendar: CalendarWindow,
): TrackedWindow {
  return {
    windowSeconds: seconds,
    algorithm: compileAlgorithm(seconds, false, undefined, calendar),
  };
}

const minute: TrackedWindow = epochWindow(60);
/** 2026-11-28T00:00:00Z, a multiple of 60 and of 3600. */
const t0 = 1_795_824_000;

function tracker(counters = 4, window: TrackedWindow = minute): RuleTracker {
  return new RuleTracker("rl", "rl.user", undefined, window, counters, 0);
}

describe("RuleTracker", () => {
  it("counts the current and the previous window together", () => {
    const t = tracker();
    t.add("user=a", 3, 0, t0 + 5);
    t.add("user=b", 1, 1, t0 + 59);
    // The next window: the first one becomes the previous one.
    t.add("user=a", 2, 2, t0 + 60);
    expect(t.sinceSeconds(t0 + 61)).toBe(t0);
    expect(t.top(10, t0 + 61)).toEqual([
      { descriptor: "user=a", hits: 5, overLimit: 2, error: 0 },
      { descriptor: "user=b", hits: 1, overLimit: 1, error: 0 },
    ]);
    expect(t.totalHits).toBe(6);
  });

  it("drops the older window at each boundary, aligned to multiples of the window", () => {
    const t = tracker();
    t.add("user=a", 3, 0, t0 + 59);
    t.add("user=b", 1, 0, t0 + 60);
    // t0 + 120 starts the window after next: the window of t0 is gone.
    expect(t.top(10, t0 + 120)).toEqual([
      { descriptor: "user=b", hits: 1, overLimit: 0, error: 0 },
    ]);
    expect(t.sinceSeconds(t0 + 120)).toBe(t0 + 60);
    expect(t.isIdle(t0 + 179)).toBe(false);
    expect(t.isIdle(t0 + 180)).toBe(true);
    expect(t.top(10, t0 + 180)).toEqual([]);
  });

  it("forgets both windows after a gap of a whole window or more", () => {
    const t = tracker();
    t.add("user=a", 3, 0, t0 + 1);
    t.add("user=b", 2, 0, t0 + 60 * 5 + 1);
    expect(t.top(10, t0 + 60 * 5 + 2)).toEqual([
      { descriptor: "user=b", hits: 2, overLimit: 0, error: 0 },
    ]);
    expect(t.sinceSeconds(t0 + 60 * 5 + 2)).toBe(t0 + 60 * 4);
  });

  it("rotates at unit × multiplier windows since the epoch", () => {
    const t = tracker(4, epochWindow(300));
    t.add("user=a", 1, 0, t0 + 299);
    t.add("user=a", 1, 0, t0 + 300);
    t.add("user=a", 1, 0, t0 + 600);
    expect(t.sinceSeconds(t0 + 600)).toBe(t0 + 300);
    expect(t.top(1, t0 + 600)[0]?.hits).toBe(2);
  });

  it("rotates a calendar window at its local period bounds", () => {
    const calendar = new CalendarWindow({
      unit: "day",
      timeZone: "Europe/Berlin",
    });
    const t = tracker(4, calendarWindow(86_400, calendar));
    // 2026-11-27T22:59:59Z is 23:59:59 in Berlin (UTC+1); one second later is the next day.
    const midnight = t0 - 3600;
    t.add("user=a", 1, 0, midnight - 86_400 - 1);
    t.add("user=a", 2, 0, midnight - 1);
    t.add("user=b", 4, 0, midnight);
    expect(t.sinceSeconds(midnight)).toBe(midnight - 86_400);
    expect(t.top(10, midnight)).toEqual([
      { descriptor: "user=b", hits: 4, overLimit: 0, error: 0 },
      { descriptor: "user=a", hits: 2, overLimit: 0, error: 0 },
    ]);
    // The decision path's cached period is the current one again.
    expect(calendar.period(midnight).startSeconds).toBe(midnight);
  });

  it("keeps merged estimates within [true, true + error] under pressure in both windows", () => {
    const k = 10;
    const t = tracker(10 * k);
    const next = zipfSampler(2000, 1.05, 77);
    const exact = new ExactCounts();
    for (let i = 0; i < 40_000; i++) {
      // Half in the window of t0, half in the next one.
      const now = t0 + (i < 20_000 ? 30 : 90);
      const item = `user=u${next()}`;
      const refused = i % 7 === 0 ? 1 : 0;
      t.add(item, 1, refused, now);
      exact.add(item, 1, refused);
    }
    // Every descriptor either window holds (up to 2m), then the top k.
    const all = t.top(Number.MAX_SAFE_INTEGER, t0 + 100);
    const top = t.top(k, t0 + 100);
    expect(all.length).toBeGreaterThan(10 * k);
    expect(top).toEqual(all.slice(0, k));
    // Per window at most N_w / m; together at most N / m.
    const bound = exact.total / (10 * k);
    expect(all.some((o) => o.error > 0)).toBe(true);
    for (const o of all) {
      const hits = exact.hits.get(o.descriptor) ?? 0;
      const refused = exact.overLimit.get(o.descriptor) ?? 0;
      expect(o.error).toBeLessThanOrEqual(bound);
      expect(o.hits).toBeGreaterThanOrEqual(hits);
      expect(o.hits).toBeLessThanOrEqual(hits + o.error);
      expect(o.overLimit).toBeGreaterThanOrEqual(refused);
      expect(o.overLimit).toBeLessThanOrEqual(refused + o.error);
    }
    const reported = top.map((o) => o.descriptor);
    for (const [item, hits] of exact.ranked().slice(0, k)) {
      if (hits > bound) expect(reported).toContain(item);
    }
    // Heaviest first.
    for (let i = 1; i < top.length; i++)
      expect(top[i]!.hits).toBeLessThanOrEqual(top[i - 1]!.hits);
  });

  it("counts a value missing from a full window with that window's smallest counter", () => {
    const t = tracker(2);
    t.add("user=a", 5, 0, t0);
    t.add("user=b", 3, 0, t0);
    t.add("user=c", 1, 0, t0 + 60);
    const top = t.top(10, t0 + 60);
    // c was not in the previous window's (full) sketch: it may have had up to 3 there.
    expect(top).toContainEqual({
      descriptor: "user=c",
      hits: 4,
      overLimit: 3,
      error: 3,
    });
    expect(top[0]).toEqual({
      descriptor: "user=a",
      hits: 5,
      overLimit: 0,
      error: 0,
    });
  });

  it("tells whether another window counts alike, and resets to a new one", () => {
    const t = tracker();
    expect(t.hasWindow(epochWindow(60))).toBe(true);
    expect(t.hasWindow(epochWindow(3600))).toBe(false);
    const day = (timeZone: string) =>
      new CalendarWindow({ unit: "day", timeZone });
    const c = new RuleTracker(
      "rl",
      "rl.user",
      undefined,
      calendarWindow(86_400, day("UTC")),
      4,
      0,
    );
    expect(c.hasWindow(calendarWindow(86_400, day("UTC")))).toBe(true);
    expect(c.hasWindow(calendarWindow(86_400, day("Asia/Tokyo")))).toBe(false);
    expect(c.hasWindow(epochWindow(86_400))).toBe(false);
    t.add("user=a", 1, 0, t0);
    t.reset(epochWindow(3600));
    expect(t.windowSeconds).toBe(3600);
    expect(t.isIdle(t0)).toBe(true);
    t.add("user=a", 1, 0, t0 + 3599);
    expect(t.sinceSeconds(t0 + 3599)).toBe(t0 - 3600);
  });

  it("reports a one-entry rule's values, counted bare, as key=value", () => {
    const t = new RuleTracker("rl", "rl.user", "user", minute, 4, 0);
    t.add("alice", 2, 0, t0);
    t.add(otherKeyMark + "user_x=bob", 1, 0, t0);
    expect(t.top(10, t0).map((o) => o.descriptor)).toEqual([
      "user=alice",
      "user_x=bob",
    ]);
  });

  it("refuses a window shorter than a second", () => {
    expect(
      () => new RuleTracker("rl", "rl.user", undefined, epochWindow(0), 4, 0),
    ).toThrow("invalid window of 0 s: expected ≥ 1 s");
  });
});

describe("descriptorText", () => {
  it("joins entries as k=v,k2=v2", () => {
    const entries = (...pairs: [string, string][]) =>
      create(RateLimitDescriptorSchema, {
        entries: pairs.map(([key, value]) => ({ key, value })),
      }).entries;
    expect(descriptorText(entries(["a", "1"]))).toBe("a=1");
    expect(descriptorText(entries(["a", "1"], ["b", ""], ["c", "x=y"]))).toBe(
      "a=1,b=,c=x=y",
    );
    expect(descriptorText([])).toBe("");
  });
});
