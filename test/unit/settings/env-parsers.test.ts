import { describe, expect, it } from "vitest";
import {
  EnvParseError,
  formatDurationMs,
  nonNegativeInteger,
  parseBool,
  parseDurationMs,
  parseFloat,
  parseInteger,
  parseList,
  parseMap,
  parseRatio,
} from "../../../src/settings/env-parsers.js";

// Expected values were checked against Go's strconv and time packages (go1.2x).

function parseError(run: () => unknown): EnvParseError {
  try {
    run();
  } catch (err) {
    if (err instanceof EnvParseError) return err;
    throw err;
  }
  throw new Error("expected an EnvParseError");
}

describe("parseBool", () => {
  it.each([
    ["1", true],
    ["t", true],
    ["T", true],
    ["TRUE", true],
    ["true", true],
    ["True", true],
    ["0", false],
    ["f", false],
    ["F", false],
    ["FALSE", false],
    ["false", false],
    ["False", false],
  ])("reads %j as %j", (text, expected) => {
    expect(parseBool(text)).toBe(expected);
  });

  it.each(["", "yes", "no", "on", "off", "tRUE", " true", "true ", "2", "y"])(
    "rejects %j",
    (text) => {
      const err = parseError(() => parseBool(text));
      expect(err.expected).toMatch(
        /^a boolean: 1, t, T, TRUE, true, True, 0, f/,
      );
    },
  );
});

describe("parseInteger", () => {
  it.each([
    ["42", 42],
    ["+5", 5],
    ["-5", -5],
    ["0", 0],
    ["00", 0],
    ["0x1F", 31],
    ["0X1f", 31],
    ["-0x1F", -31],
    ["0o17", 15],
    ["0O17", 15],
    ["017", 15],
    ["0b101", 5],
    ["0B11", 3],
    ["1_000", 1000],
    ["1_0_0", 100],
    ["0x_1F", 31],
    ["0b_1", 1],
    ["0o_7", 7],
    ["0_7", 7],
    ["9007199254740991", Number.MAX_SAFE_INTEGER],
  ])("reads %j as %d", (text, expected) => {
    expect(parseInteger(text)).toBe(expected);
  });

  it.each([
    "",
    "08",
    "0x",
    "0x_",
    "_1",
    "1_",
    "1__0",
    "0__7",
    "0_x1",
    " 5",
    "5 ",
    "1.0",
    "1e3",
    "-",
    "+",
    "ten",
    "0xG",
    "0b2",
  ])("rejects %j", (text) => {
    expect(parseError(() => parseInteger(text)).expected).toBe("an integer");
  });

  it("rejects values outside the field's range", () => {
    const err = parseError(() =>
      parseInteger("65536", { min: 0, max: 65_535 }),
    );
    expect(err.expected).toBe("an integer from 0 to 65535");
    expect(err.message).toBe(
      "out of range; expected an integer from 0 to 65535",
    );
    expect(
      parseError(() => parseInteger("-1", nonNegativeInteger)).expected,
    ).toBe("a non-negative integer");
    expect(parseError(() => parseInteger("9223372036854775808")).detail).toBe(
      "out of range",
    );
  });

  it("accepts the range bounds", () => {
    expect(parseInteger("0", { min: 0, max: 65_535 })).toBe(0);
    expect(parseInteger("0xFFFF", { min: 0, max: 65_535 })).toBe(65_535);
  });
});

describe("parseFloat", () => {
  it.each([
    ["1.5", 1.5],
    [".5", 0.5],
    ["5.", 5],
    ["00.5", 0.5],
    ["+1", 1],
    ["-1", -1],
    ["1e3", 1000],
    ["1E-2", 0.01],
    ["0.8", 0.8],
    ["1_000", 1000],
    ["1_000.5", 1000.5],
    ["1e1_0", 1e10],
    ["0x1p-2", 0.25],
    ["0x1.8p1", 3],
    ["0X1P+2", 4],
    ["0x.8p1", 1],
    ["0x_1p0", 1],
    ["inf", Number.POSITIVE_INFINITY],
    ["+Inf", Number.POSITIVE_INFINITY],
    ["INF", Number.POSITIVE_INFINITY],
    ["infinity", Number.POSITIVE_INFINITY],
    ["-Infinity", Number.NEGATIVE_INFINITY],
  ])("reads %j as %d", (text, expected) => {
    expect(parseFloat(text)).toBe(expected);
  });

  it.each(["NaN", "nan"])("reads %j as NaN", (text) => {
    expect(parseFloat(text)).toBeNaN();
  });

  it.each([
    "",
    ".",
    "e3",
    "1e",
    "+nan",
    "-nan",
    "1_.5",
    "1._5",
    "1__0",
    "_1",
    "  1",
    "1 ",
    "0x1",
    "0x_.8p1",
    "1e400",
    "one",
  ])("rejects %j", (text) => {
    expect(parseError(() => parseFloat(text)).expected).toBe(
      "a number such as 0.5, 1e-3 or 2",
    );
  });

  it("checks an optional range and requires a finite value then", () => {
    expect(parseFloat("2.5", { min: 0, max: Number.POSITIVE_INFINITY })).toBe(
      2.5,
    );
    const err = parseError(() =>
      parseFloat("-0.1", { min: 0, max: Number.POSITIVE_INFINITY }),
    );
    expect(err.expected).toBe("a number of at least 0");
    expect(() =>
      parseFloat("inf", { min: 0, max: Number.POSITIVE_INFINITY }),
    ).toThrow(EnvParseError);
  });
});

describe("parseRatio", () => {
  it.each([
    ["0", 0],
    ["1", 1],
    ["0.8", 0.8],
    [".25", 0.25],
    ["1e-1", 0.1],
  ])("reads %j as %d", (text, expected) => {
    expect(parseRatio(text)).toBe(expected);
  });

  it.each(["1.01", "-0.1", "NaN", "inf", "", "80%"])("rejects %j", (text) => {
    expect(parseError(() => parseRatio(text)).expected).toBe(
      "a number from 0 to 1",
    );
  });
});

describe("parseDurationMs", () => {
  it.each([
    ["300ms", 300],
    ["1.5h", 5_400_000],
    ["2h45m", 9_900_000],
    ["1h30m10s", 5_410_000],
    ["1m1.5s", 61_500],
    ["-1s", -1000],
    ["+1s", 1000],
    ["0", 0],
    ["+0", 0],
    ["-0", 0],
    ["0s", 0],
    [".5s", 500],
    ["5.s", 5000],
    ["00001s", 1000],
    ["1ns", 0.000001],
    ["1us", 0.001],
    ["1\u00b5s", 0.001], // micro sign
    ["1\u03bcs", 0.001], // Greek mu
    ["0.5ns", 0], // sub-nanosecond parts are truncated
    ["1.0000000001s", 1000],
    ["3.14159265358979323846s", 3141.592653],
    ["24h", 86_400_000],
    ["2562047h", 9_223_369_200_000],
  ])("reads %j as %d ms", (text, expected) => {
    expect(parseDurationMs(text)).toBeCloseTo(expected, 9);
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
    "1e3s",
    " 1s",
    "1s ",
    "1..5s",
    "2562048h", // beyond Go's signed 64-bit nanoseconds
    "9223372036854775808ns",
  ])("rejects %j", (text) => {
    expect(parseError(() => parseDurationMs(text)).expected).toMatch(
      /^a duration such as 300ms, 1\.5h or 2h45m/,
    );
  });

  it("checks the sign the field allows, naming it in the expectation", () => {
    expect(parseDurationMs("0", "non-negative")).toBe(0);
    expect(parseDurationMs("1s", "positive")).toBe(1000);
    const negative = parseError(() => parseDurationMs("-1s", "non-negative"));
    expect(negative.detail).toBe("negative");
    expect(negative.expected).toMatch(/^a non-negative duration such as 300ms/);
    const zero = parseError(() => parseDurationMs("0", "positive"));
    expect(zero.detail).toBe("not positive");
    expect(zero.expected).toMatch(/^a positive duration such as 300ms/);
    expect(
      parseError(() => parseDurationMs("10", "positive")).expected,
    ).toMatch(/^a positive duration/);
  });

  it("accepts the most negative Go duration but not its positive twin", () => {
    expect(parseDurationMs("-9223372036854775808ns")).toBeCloseTo(
      -9_223_372_036_854.775,
      0,
    );
    expect(() => parseDurationMs("9223372036854775808ns")).toThrow(
      EnvParseError,
    );
  });
});

describe("formatDurationMs", () => {
  it.each([
    [0, "0"],
    [86_400_000, "24h"],
    [3_600_000, "1h"],
    [60_000, "1m"],
    [90_000, "1m30s"],
    [10_000, "10s"],
    [1500, "1s500ms"],
    [0.001, "1us"],
    [-1000, "-1s"],
  ])("formats %d ms as %j", (durationMs, expected) => {
    expect(formatDurationMs(durationMs)).toBe(expected);
    expect(parseDurationMs(expected)).toBeCloseTo(durationMs, 9);
  });
});

describe("parseList", () => {
  it.each([
    ["", []],
    ["   ", []],
    ["a", ["a"]],
    ["a,b", ["a", "b"]],
    ["a, b", ["a", " b"]],
    ["a,,b", ["a", "", "b"]],
    ["host1:11211,host2:11211", ["host1:11211", "host2:11211"]],
  ])("reads %j as %j", (text, expected) => {
    expect(parseList(text)).toEqual(expected);
  });
});

describe("parseMap", () => {
  it.each([
    ["", {}],
    ["  ", {}],
    ["k1:v1", { k1: "v1" }],
    ["k1:v1,k2:v2", { k1: "v1", k2: "v2" }],
    ["k: v", { k: " v" }],
    ["k:", { k: "" }],
    [":v", { "": "v" }],
    ["k:1,k:2", { k: "2" }],
  ])("reads %j as %j", (text, expected) => {
    expect(parseMap(text)).toEqual(expected);
  });

  it.each([
    ["k", '"k"'],
    ["k1:v1,k2", '"k2"'],
    ["a:b:c", '"a:b:c"'],
    ["url:http://x", '"url:http://x"'],
    ["k1:v1,", '""'],
  ])("rejects %j naming the bad item", (text, item) => {
    const err = parseError(() => parseMap(text));
    expect(err.detail).toBe(`invalid map item: ${item}`);
    expect(err.expected).toBe(
      'comma-separated key:value pairs, each with exactly one ":"',
    );
  });

  it("stores a __proto__ key as data", () => {
    const value = parseMap("__proto__:x");
    expect(Object.keys(value)).toEqual(["__proto__"]);
    expect(Object.getPrototypeOf(value)).toBe(Object.prototype);
  });
});
