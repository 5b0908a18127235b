import { getHeapSpaceStatistics } from "node:v8";
import { runInNewContext } from "node:vm";
import { describe, expect, it } from "vitest";
import { compactHeapNow } from "../../../src/util/compact-heap.js";

function newSpaceCommittedBytes(): number {
  const space = getHeapSpaceStatistics().find(
    (s) => s.space_name === "new_space",
  );
  return space?.physical_space_size ?? Number.NaN;
}

describe("compactHeapNow", () => {
  it("runs a shrinking collection: the young generation is emptied and shrunk", () => {
    // Fill the young generation with short-lived garbage so it has grown.
    let keep = 0;
    for (let i = 0; i < 200_000; i += 1) keep += [i, { i }].length;
    expect(keep).toBe(400_000);
    const before = newSpaceCommittedBytes();
    expect(compactHeapNow()).toBe(true);
    const after = newSpaceCommittedBytes();
    expect(after).toBeLessThan(before);
  });

  it("leaves no gc function behind in new contexts or the global scope", () => {
    compactHeapNow();
    expect(runInNewContext("typeof gc")).toBe("undefined");
    expect("gc" in globalThis).toBe(false);
  });
});
