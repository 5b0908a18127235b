import { describe, expect, it } from "vitest";
import {
  LiveReadings,
  type LiveReading,
} from "../../../src/canary/live-readings.js";
import type { RequestPlan } from "../../../src/limiter/request-plan.js";

const plan = {} as RequestPlan;
const reading = (): LiveReading => ({ statuses: [], plan, charged: true });

describe("LiveReadings", () => {
  it("gives each request its own reading, in order and out of order", () => {
    const readings = new LiveReadings();
    const [a, b, c] = [reading(), reading(), reading()];
    readings.push(a);
    readings.push(b);
    readings.push(c);
    expect(readings.take(b.statuses)).toBe(b);
    expect(readings.take(a.statuses)).toBe(a);
    expect(readings.take(a.statuses)).toBeUndefined();
    expect(readings.take(c.statuses)).toBe(c);
    expect(readings.size).toBe(0);
  });

  it("drops the oldest reading once maxWaiting newer ones wait", () => {
    const readings = new LiveReadings(2);
    const [a, b, c] = [reading(), reading(), reading()];
    readings.push(a);
    readings.push(b);
    readings.push(c);
    expect(readings.take(a.statuses)).toBeUndefined();
    expect(readings.take(c.statuses)).toBe(c);
    expect(readings.take(b.statuses)).toBe(b);
    // The ring keeps working across its end.
    for (let i = 0; i < 10; i++) {
      const r = reading();
      readings.push(r);
      expect(readings.take(r.statuses)).toBe(r);
    }
  });
});
