import { describe, expect, it } from "vitest";
import {
  formatGoDuration,
  parseGoDuration,
} from "../../../src/util/go-duration.js";

// Expected values follow Go's time.ParseDuration (go1.2x).
describe("parseGoDuration", () => {
  it.each([
    ["300ms", 300_000_000n],
    ["1.5h", 5_400_000_000_000n],
    ["2h45m", 9_900_000_000_000n],
    ["1m1.5s", 61_500_000_000n],
    ["-1s", -1_000_000_000n],
    ["+1s", 1_000_000_000n],
    ["0", 0n],
    ["-0", 0n],
    ["0s", 0n],
    [".5s", 500_000_000n],
    ["5.s", 5_000_000_000n],
    ["1ns", 1n],
    ["1us", 1000n],
    ["1\u00b5s", 1000n], // micro sign
    ["1\u03bcs", 1000n], // Greek mu
    ["0.5ns", 0n], // sub-nanosecond parts are truncated
    ["1.0000000001s", 1_000_000_000n],
    ["10m", 600_000_000_000n],
    ["-9223372036854775808ns", -9_223_372_036_854_775_808n],
    ["9223372036854775807ns", 9_223_372_036_854_775_807n],
  ])("reads %j as %d ns", (text, expected) => {
    expect(parseGoDuration(text)).toBe(expected);
  });

  it.each([
    "",
    "10", // a bare number other than 0 has no unit
    "1.5",
    ".s",
    ".",
    "s",
    "-",
    "1d",
    "1S",
    "1h-1m",
    "1h30",
    "1e3s",
    " 1s",
    "1s ",
    "1..5s",
    "2562048h", // beyond Go's signed 64-bit nanoseconds
    "9223372036854775808ns",
  ])("rejects %j", (text) => {
    expect(parseGoDuration(text)).toBeUndefined();
  });
});

describe("formatGoDuration", () => {
  it.each([
    [0n, "0"],
    [86_400_000_000_000n, "24h"],
    [90_000_000_000n, "1m30s"],
    [1_500_000_000n, "1s500ms"],
    [1_001n, "1us1ns"],
    [-1_000_000_000n, "-1s"],
  ])("formats %d ns as %j and reads it back", (nanoseconds, expected) => {
    expect(formatGoDuration(nanoseconds)).toBe(expected);
    expect(parseGoDuration(expected)).toBe(nanoseconds);
  });
});
