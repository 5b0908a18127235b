import { describe, expect, it } from "vitest";
import {
  hasIllegalKeyCharacter,
  mcKeyProblem,
  toMcExpiration,
} from "../../../../src/backends/mc/mc-keys.js";

describe("mcKeyProblem", () => {
  it.each([
    ["domain_key_value_60", undefined],
    ["x".repeat(250), undefined],
    ["x".repeat(251), "too-long"],
    // 125 two-byte characters are 250 bytes; one more byte is too many.
    ["é".repeat(125), undefined],
    ["é".repeat(125) + "x", "too-long"],
    ["a b", "illegal-character"],
    ["a\tb", "illegal-character"],
    ["a\nb", "illegal-character"],
    ["a\u007fb", "illegal-character"],
    ["a\u0000b", "illegal-character"],
    ["ünïcødé", undefined],
  ] as const)("judges %j as %s", (key, problem) => {
    expect(mcKeyProblem(key)).toBe(problem);
  });

  it("finds whitespace and control characters in parts of keys", () => {
    expect(hasIllegalKeyCharacter("fine:prefix_")).toBe(false);
    expect(hasIllegalKeyCharacter("two words")).toBe(true);
    expect(hasIllegalKeyCharacter("")).toBe(false);
  });
});

describe("toMcExpiration", () => {
  const now = 1_800_000_000;
  it("sends up to 30 days as relative seconds", () => {
    expect(toMcExpiration(60, now)).toBe(60);
    expect(toMcExpiration(2_592_000, now)).toBe(2_592_000);
  });

  it("sends longer expirations as an absolute Unix time", () => {
    // MONTH plus jitter, and YEAR.
    expect(toMcExpiration(2_592_001, now)).toBe(now + 2_592_001);
    expect(toMcExpiration(31_536_000, now)).toBe(now + 31_536_000);
  });
});
