import { describe, expect, it } from "vitest";
import { unitToSeconds } from "../../../src/config/units.js";
import {
  secondsUntilReset,
  windowStartSeconds,
} from "../../../src/limiter/window.js";
import { RateLimitResponse_RateLimit_Unit as Unit } from "../../../src/proto.js";
import { hitsAddendFor } from "../../../src/limiter/hits-addend.js";
import { create } from "@bufbuild/protobuf";
import { RateLimitDescriptorSchema } from "../../../src/proto.js";

describe("window arithmetic", () => {
  it("aligns windows to the epoch, with 30-day months and 365-day years", () => {
    expect(unitToSeconds(Unit.SECOND)).toBe(1);
    expect(unitToSeconds(Unit.WEEK)).toBe(604800);
    expect(unitToSeconds(Unit.MONTH)).toBe(2592000);
    expect(unitToSeconds(Unit.YEAR)).toBe(31536000);
    expect(unitToSeconds(Unit.UNKNOWN)).toBe(0);
    expect(windowStartSeconds(1234, 60)).toBe(1200);
    // Thursday 1970-01-01 starts week 0.
    expect(windowStartSeconds(604800 * 3 + 5, 604800)).toBe(604800 * 3);
  });

  it("never returns a zero reset", () => {
    expect(secondsUntilReset(2222, 60)).toBe(58);
    expect(secondsUntilReset(2220, 60)).toBe(60);
    expect(secondsUntilReset(2279, 60)).toBe(1);
  });
});

describe("hitsAddendFor", () => {
  it("prefers the descriptor's value, even 0, else max(1, request value)", () => {
    const plain = create(RateLimitDescriptorSchema, {
      entries: [{ key: "a", value: "b" }],
    });
    const zero = create(RateLimitDescriptorSchema, {
      entries: [{ key: "a" }],
      hitsAddend: 0n,
    });
    const five = create(RateLimitDescriptorSchema, {
      entries: [{ key: "a" }],
      hitsAddend: 5n,
    });
    expect(hitsAddendFor(plain, 0)).toBe(1);
    expect(hitsAddendFor(plain, 7)).toBe(7);
    expect(hitsAddendFor(zero, 7)).toBe(0);
    expect(hitsAddendFor(five, 7)).toBe(5);
    const huge = create(RateLimitDescriptorSchema, {
      entries: [{ key: "a" }],
      hitsAddend: 2n ** 63n,
    });
    expect(hitsAddendFor(huge, 1)).toBe(Number.MAX_SAFE_INTEGER);
  });
});
