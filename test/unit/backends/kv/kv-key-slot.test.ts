import { describe, expect, it } from "vitest";
import { keySlot } from "../../../../src/backends/kv/kv-key-slot.js";

describe("keySlot", () => {
  it.each([
    ["123456789", 0x31c3 % 16384],
    ["foo", 12182],
    ["bar", 5061],
    ["{user1000}.following", keySlot("user1000")],
    ["{}x", keySlot("{}x")],
  ])("slots %j like the cluster specification", (key, slot) => {
    expect(keySlot(key)).toBe(slot);
  });

  it("hashes only a non-empty hash tag", () => {
    expect(keySlot("a{tag}b")).toBe(keySlot("tag"));
    expect(keySlot("a{}b")).not.toBe(keySlot(""));
  });
});
