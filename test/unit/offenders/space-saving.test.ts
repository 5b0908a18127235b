import { describe, expect, it } from "vitest";
import { SpaceSaving } from "../../../src/offenders/space-saving.js";
import { mulberry32 } from "../../helpers/seeded-random.js";
import { ExactCounts, zipfSampler } from "../../helpers/zipf.js";

/** Feeds a seeded Zipf stream to a sketch and to exact counts; weights 1–4, some refused. */
function feed(
  sketch: SpaceSaving,
  seed: number,
  length: number,
  items = 5000,
  exponent = 1.1,
): ExactCounts {
  const next = zipfSampler(items, exponent, seed);
  const random = mulberry32(seed ^ 0x5bd1e995);
  const exact = new ExactCounts();
  for (let i = 0; i < length; i++) {
    const item = `user=u${next()}`;
    const weight = 1 + Math.floor(random() * 4);
    // A limit of 300 hits per item: past it, every hit is refused.
    const refused = (exact.hits.get(item) ?? 0) + weight > 300 ? weight : 0;
    sketch.add(item, weight, refused);
    exact.add(item, weight, refused);
  }
  return exact;
}

function entries(sketch: SpaceSaving) {
  const out: {
    item: string;
    count: number;
    overLimit: number;
    error: number;
  }[] = [];
  sketch.forEach((entry) => out.push(entry));
  return out;
}

describe("SpaceSaving", () => {
  it("counts exactly while it has a free counter", () => {
    const sketch = new SpaceSaving(3);
    sketch.add("a", 2, 0);
    sketch.add("b", 1, 1);
    sketch.add("a", 3, 3);
    expect(sketch.get("a")).toEqual({
      item: "a",
      count: 5,
      overLimit: 3,
      error: 0,
    });
    expect(sketch.get("b")).toEqual({
      item: "b",
      count: 1,
      overLimit: 1,
      error: 0,
    });
    expect(sketch.total).toBe(6);
    expect(sketch.minCount).toBe(0);
  });

  it("gives a new item the lightest counter and its count as the error", () => {
    const sketch = new SpaceSaving(2);
    sketch.add("a", 5, 0);
    sketch.add("b", 2, 0);
    expect(sketch.minCount).toBe(2);
    sketch.add("c", 1, 1);
    expect(sketch.get("b")).toBeUndefined();
    expect(sketch.get("c")).toEqual({
      item: "c",
      count: 3,
      overLimit: 3,
      error: 2,
    });
    expect(sketch.get("a")?.count).toBe(5);
    expect(sketch.minCount).toBe(3);
    expect(sketch.size).toBe(2);
  });

  it("keeps each estimate within [true, true + error] and error within N/m on a skewed stream", () => {
    for (const seed of [1, 2, 3, 42, 2026]) {
      const sketch = new SpaceSaving(200);
      const exact = feed(sketch, seed, 60_000);
      const bound = exact.total / sketch.capacity;
      expect(sketch.total).toBe(exact.total);
      const seen = entries(sketch);
      expect(seen).toHaveLength(200);
      // The sketch was under pressure: some estimates are not exact.
      expect(seen.some((e) => e.error > 0)).toBe(true);
      // The counter a newcomer takes is the smallest one (what keeps errors within N/m).
      expect(sketch.minCount).toBe(Math.min(...seen.map((e) => e.count)));
      for (const e of seen) {
        const hits = exact.hits.get(e.item) ?? 0;
        const refused = exact.overLimit.get(e.item) ?? 0;
        expect(e.error).toBeLessThanOrEqual(bound);
        expect(e.count).toBeGreaterThanOrEqual(hits);
        expect(e.count).toBeLessThanOrEqual(hits + e.error);
        expect(e.overLimit).toBeGreaterThanOrEqual(refused);
        expect(e.overLimit).toBeLessThanOrEqual(refused + e.error);
      }
      // An item left out had at most the smallest counter.
      for (const [item, hits] of exact.hits) {
        if (sketch.get(item) === undefined)
          expect(hits).toBeLessThanOrEqual(sketch.minCount);
      }
    }
  });

  it("monitors every item above N/m and ranks the true top K above N/m in its top K", () => {
    const k = 20;
    for (const seed of [7, 8, 9, 1234, 99_999]) {
      const sketch = new SpaceSaving(10 * k);
      const exact = feed(sketch, seed, 60_000);
      const bound = exact.total / sketch.capacity;
      const ranked = exact.ranked();
      for (const [item, hits] of ranked) {
        if (hits > bound) expect(sketch.get(item)).toBeDefined();
      }
      const reported = entries(sketch)
        .sort((a, b) => b.count - a.count)
        .slice(0, k)
        .map((e) => e.item);
      const heavy = ranked.slice(0, k).filter(([, hits]) => hits > bound);
      expect(heavy.length).toBeGreaterThan(5);
      for (const [item] of heavy) expect(reported).toContain(item);
      // What holds for every stream: an item above the (K+1)-th true count by more than N/m
      // cannot be outranked by K others.
      const next = ranked[k]?.[1] ?? 0;
      for (const [item, hits] of ranked.slice(0, k)) {
        if (hits > next + bound) expect(reported).toContain(item);
      }
    }
  });

  it("counts weighted adds as their weight", () => {
    const sketch = new SpaceSaving(4);
    sketch.add("a", 10, 0);
    sketch.add("b", 1, 0);
    sketch.add("a", 7, 7);
    expect(sketch.get("a")).toMatchObject({ count: 17, overLimit: 7 });
    expect(sketch.total).toBe(18);
  });

  it("forgets everything on clear and works again after", () => {
    const sketch = new SpaceSaving(2);
    sketch.add("a", 1, 0);
    sketch.add("b", 1, 0);
    sketch.add("c", 1, 0);
    sketch.clear();
    expect(sketch.size).toBe(0);
    expect(sketch.total).toBe(0);
    expect(sketch.get("a")).toBeUndefined();
    sketch.add("d", 4, 0);
    expect(entries(sketch)).toEqual([
      { item: "d", count: 4, overLimit: 0, error: 0 },
    ]);
  });

  it("refuses a capacity below 1 or not an integer", () => {
    expect(() => new SpaceSaving(0)).toThrow(
      "invalid Space-Saving capacity 0: expected an integer ≥ 1",
    );
    expect(() => new SpaceSaving(1.5)).toThrow(RangeError);
  });
});
