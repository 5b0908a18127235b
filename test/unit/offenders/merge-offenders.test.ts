import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { mergeOffenderLists } from "../../../src/offenders/merge-offenders.js";
import { SpaceSaving } from "../../../src/offenders/space-saving.js";
import { OffenderSchema, type Offender } from "../../../src/proto.js";
import { mulberry32 } from "../../helpers/seeded-random.js";

/** The top `k` of a Space-Saving sketch with `m` counters over `stream`, as one worker answers. */
function workerTop(
  stream: readonly string[],
  m: number,
  k: number,
): Offender[] {
  const sketch = new SpaceSaving(m);
  for (const value of stream) sketch.add(value, 1, 0);
  const entries: { item: string; count: number; error: number }[] = [];
  sketch.forEach((e) =>
    entries.push({ item: e.item, count: e.count, error: e.error }),
  );
  return entries
    .sort((a, b) => b.count - a.count || (a.item < b.item ? -1 : 1))
    .slice(0, k)
    .map((e) =>
      create(OffenderSchema, {
        descriptor: e.item,
        hits: BigInt(e.count),
        overLimit: 0n,
        error: BigInt(e.error),
      }),
    );
}

describe("mergeOffenderLists", () => {
  it("adds the counts of a value every list holds, heaviest first", () => {
    const list = (pairs: [string, number][]) =>
      pairs.map(([descriptor, hits]) =>
        create(OffenderSchema, {
          descriptor,
          hits: BigInt(hits),
          overLimit: 1n,
          error: 0n,
        }),
      );
    const merged = mergeOffenderLists(
      [
        list([
          ["a", 5],
          ["b", 3],
        ]),
        list([
          ["b", 4],
          ["a", 1],
        ]),
      ],
      2,
    );
    expect(
      merged.map((o) => [o.descriptor, o.hits, o.overLimit, o.error]),
    ).toEqual([
      ["b", 7n, 2n, 0n],
      ["a", 6n, 2n, 0n],
    ]);
  });

  it("keeps the true count within [hits - error, hits] for values some lists lack (seeded streams)", () => {
    for (let seed = 1; seed <= 40; seed++) {
      const random = mulberry32(seed);
      const workers = 2 + Math.floor(random() * 3);
      const streams: string[][] = Array.from({ length: workers }, () => []);
      const truth = new Map<string, number>();
      for (let i = 0; i < 3000; i++) {
        // Skewed values: a few heavy, a long tail.
        const value = `v${String(Math.floor(60 * random() ** 3))}`;
        streams[Math.floor(random() * workers)]?.push(value);
        truth.set(value, (truth.get(value) ?? 0) + 1);
      }
      const k = 5;
      const merged = mergeOffenderLists(
        streams.map((s) => workerTop(s, 20, k)),
        k,
      );
      expect(merged.length).toBe(k);
      for (const o of merged) {
        const exact = BigInt(truth.get(o.descriptor) ?? 0);
        expect(
          o.hits,
          `seed ${String(seed)} ${o.descriptor}`,
        ).toBeGreaterThanOrEqual(exact);
        expect(
          o.hits - o.error,
          `seed ${String(seed)} ${o.descriptor}`,
        ).toBeLessThanOrEqual(exact);
      }
    }
  });
});
