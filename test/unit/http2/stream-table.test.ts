import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { StreamTable } from "../../../src/http2/stream-table.js";

type Op =
  | { kind: "set"; id: number; value: number }
  | { kind: "delete"; id: number }
  | { kind: "clear" };

// Small id ranges make long probe runs, wrap-around and backward shifts common.
const id = fc.oneof(
  fc.integer({ min: 1, max: 64 }),
  fc.integer({ min: 1, max: 0x7fffffff }),
  // Ids whose home is the last slot of every table up to 2048 slots: runs wrap to slot 0.
  fc.integer({ min: 0, max: 40 }).map((k) => ((k * 2048 + 2047) << 1) | 1),
);
const op: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant("set" as const),
      id,
      value: fc.integer(),
    }),
  },
  {
    weight: 5,
    arbitrary: fc.record({ kind: fc.constant("delete" as const), id }),
  },
  { weight: 1, arbitrary: fc.constant({ kind: "clear" as const }) },
);

describe("StreamTable", () => {
  it("behaves like a Map from stream id to value under any sequence of set, delete and clear", () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 400 }), (ops) => {
        const table = new StreamTable<number>(8);
        const model = new Map<number, number>();
        for (const o of ops) {
          if (o.kind === "set") {
            table.set(o.id, o.value);
            model.set(o.id, o.value);
          } else if (o.kind === "delete") {
            expect(table.delete(o.id)).toBe(model.delete(o.id));
          } else {
            table.clear();
            model.clear();
          }
          expect(table.size).toBe(model.size);
        }
        for (const [k, v] of model) expect(table.get(k)).toBe(v);
        for (let k = 1; k <= 64; k++) expect(table.get(k)).toBe(model.get(k));
        expect([...table.values()].sort((a, b) => a - b)).toEqual(
          [...model.values()].sort((a, b) => a - b),
        );
      }),
      { numRuns: 300 },
    );
  });

  it("keeps every entry through growth with the odd, increasing ids of a connection", () => {
    const table = new StreamTable<string>(8);
    for (let i = 1; i < 4000; i += 2) table.set(i, `s${i}`);
    for (let i = 1; i < 4000; i += 4) expect(table.delete(i)).toBe(true);
    expect(table.size).toBe(1000);
    for (let i = 3; i < 4000; i += 4) expect(table.get(i)).toBe(`s${i}`);
    for (let i = 1; i < 4000; i += 4) expect(table.get(i)).toBeUndefined();
  });

  it("refuses ids that are not positive 31-bit integers", () => {
    const table = new StreamTable<number>();
    for (const bad of [0, -1, 0x80000000, 1.5, Number.NaN])
      expect(() => {
        table.set(bad, 1);
      }).toThrow(RangeError);
  });
});
