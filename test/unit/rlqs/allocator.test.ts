import { describe, expect, it } from "vitest";
import {
  smoothDemand,
  splitQuota,
  waterFill,
} from "../../../src/rlqs/allocator.js";
import { mulberry32 } from "../../helpers/seeded-random.js";

const eps = 1e-9;

function sum(values: readonly number[]): number {
  return values.reduce((a, b) => a + b, 0);
}

describe("waterFill", () => {
  it("meets small demands in full and levels the rest", () => {
    expect(waterFill(100, [120, 60, 20])).toEqual([40, 40, 20]);
    expect(waterFill(100, [10, 20])).toEqual([10, 20]);
    expect(waterFill(0, [5, 5])).toEqual([0, 0]);
    expect(waterFill(10, [])).toEqual([]);
  });

  it("property: sum ≤ L, share ≤ demand, share ≥ min(d, L/n), max-min optimal", () => {
    const random = mulberry32(0x5eed24);
    for (let run = 0; run < 2000; run++) {
      const n = 1 + Math.floor(random() * 8);
      const capacity = random() < 0.1 ? 0 : random() * 500;
      const demands = Array.from({ length: n }, () =>
        random() < 0.2 ? 0 : random() * 300,
      );
      const shares = waterFill(capacity, demands);
      expect(sum(shares)).toBeLessThanOrEqual(capacity + eps);
      shares.forEach((share, i) => {
        const demand = demands[i]!;
        expect(share).toBeGreaterThanOrEqual(0);
        expect(share).toBeLessThanOrEqual(demand + eps);
        expect(share).toBeGreaterThanOrEqual(
          Math.min(demand, capacity / n) - eps,
        );
        // Max-min: a stream whose demand is unmet has at least anyone's share.
        if (share < demand - eps) {
          for (const other of shares)
            expect(other).toBeLessThanOrEqual(share + eps);
        }
      });
      // Work-conserving: all of L is used when demand exceeds it.
      if (sum(demands) >= capacity)
        expect(sum(shares)).toBeCloseTo(capacity, 6);
    }
  });
});

describe("splitQuota", () => {
  it("splits 100/s over 120/60/20 max-min fairly (the issue's case)", () => {
    const shares = splitQuota(100, [
      { demand: 120 },
      { demand: 60 },
      { demand: 20 },
    ]);
    expect(shares).toEqual([40, 40, 20]);
  });

  it("gives a newly subscribed stream a fair share at once", () => {
    const shares = splitQuota(100, [{ demand: 120 }, { demand: undefined }]);
    expect(shares).toEqual([50, 50]);
  });

  it("hands out what the demands leave, equally", () => {
    expect(splitQuota(100, [{ demand: 10 }, { demand: 30 }])).toEqual([40, 60]);
  });

  it("keeps an idle stream a trickle of at least min(1, L/n)", () => {
    const shares = splitQuota(100, [{ demand: 0 }, { demand: 500 }]);
    expect(shares[0]).toBeGreaterThanOrEqual(1);
    expect(sum(shares)).toBeCloseTo(100, 9);
  });

  it("property: sum ≤ L and nobody under min(d, L/n)", () => {
    const random = mulberry32(24);
    for (let run = 0; run < 2000; run++) {
      const n = 1 + Math.floor(random() * 6);
      const limit = random() * 1000;
      const streams = Array.from({ length: n }, () => ({
        demand: random() < 0.15 ? undefined : random() * 400,
      }));
      const shares = splitQuota(limit, streams);
      expect(sum(shares)).toBeLessThanOrEqual(limit + eps);
      shares.forEach((share, i) => {
        const demand = streams[i]!.demand ?? limit / n;
        expect(share).toBeGreaterThanOrEqual(Math.min(demand, limit / n) - eps);
      });
    }
  });

  it("returns zeros for a zero limit or no streams", () => {
    expect(splitQuota(0, [{ demand: 5 }])).toEqual([0]);
    expect(splitQuota(10, [])).toEqual([]);
  });
});

describe("smoothDemand", () => {
  it("starts at the measurement and moves half-way", () => {
    expect(smoothDemand(undefined, 20)).toBe(20);
    expect(smoothDemand(20, 150)).toBe(85);
  });
});
