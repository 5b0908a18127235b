import { describe, expect, it } from "vitest";
import {
  formatGoFloat,
  resolveYamlScalar,
  YamlDocumentError,
} from "../../../src/config/yaml-scalar.js";

describe("resolveYamlScalar", () => {
  // gopkg.in/yaml.v2 resolution of untagged plain scalars (docs/reference-parity.md#yaml-dialect).
  const plain = [
    ["yes", { kind: "bool", value: true }],
    ["Y", { kind: "bool", value: true }],
    ["On", { kind: "bool", value: true }],
    ["TRUE", { kind: "bool", value: true }],
    ["n", { kind: "bool", value: false }],
    ["NO", { kind: "bool", value: false }],
    ["off", { kind: "bool", value: false }],
    ["", { kind: "null" }],
    ["~", { kind: "null" }],
    ["Null", { kind: "null" }],
    ["123", { kind: "int", value: 123n }],
    ["-7", { kind: "int", value: -7n }],
    ["+7", { kind: "int", value: 7n }],
    ["0x1F", { kind: "int", value: 31n }],
    ["010", { kind: "int", value: 8n }],
    ["0o17", { kind: "int", value: 15n }],
    ["0b101", { kind: "int", value: 5n }],
    ["1_000", { kind: "int", value: 1000n }],
    ["9223372036854775808", { kind: "int", value: 9223372036854775808n }],
    ["08", { kind: "float", value: 8 }],
    ["1.5", { kind: "float", value: 1.5 }],
    ["1e3", { kind: "float", value: 1000 }],
    [".5", { kind: "float", value: 0.5 }],
    [".inf", { kind: "float", value: Infinity }],
    ["-.Inf", { kind: "float", value: -Infinity }],
    ["1e400", { kind: "str", value: "1e400" }],
    ["2001-12-14", { kind: "timestamp", value: "2001-12-14" }],
    [
      "2001-12-14T21:59:43.10-05:00",
      { kind: "timestamp", value: "2001-12-14T21:59:43.10-05:00" },
    ],
    ["2001-02-30", { kind: "str", value: "2001-02-30" }],
    ["12abc", { kind: "str", value: "12abc" }],
    ["nope", { kind: "str", value: "nope" }],
    ["<<", { kind: "str", value: "<<" }],
  ] as const;
  for (const [text, resolved] of plain) {
    it(`resolves plain '${text}' as ${resolved.kind}`, () => {
      expect(resolveYamlScalar(text, "", true).resolved).toEqual(resolved);
    });
  }

  it("keeps quoted scalars as strings", () => {
    expect(resolveYamlScalar("yes", "", false)).toEqual({
      resolved: { kind: "str", value: "yes" },
      tag: "!!str",
    });
  });

  it("honours explicit tags", () => {
    expect(resolveYamlScalar("12", "!!str", true).resolved).toEqual({
      kind: "str",
      value: "12",
    });
    expect(resolveYamlScalar("12", "!!int", false).resolved).toEqual({
      kind: "int",
      value: 12n,
    });
    expect(resolveYamlScalar("12", "!!float", true).resolved).toEqual({
      kind: "float",
      value: 12,
    });
    expect(resolveYamlScalar("x", "!custom", true)).toEqual({
      resolved: { kind: "str", value: "x" },
      tag: "!custom",
    });
    expect(resolveYamlScalar("aGVsbG8=", "!!binary", true).resolved).toEqual({
      kind: "binary",
      value: "hello",
    });
  });

  it("fails the document for a tag the text does not fit", () => {
    expect(() => resolveYamlScalar("abc", "!!int", true)).toThrow(
      new YamlDocumentError("cannot decode !!str `abc` as a !!int"),
    );
    expect(() => resolveYamlScalar("@@", "!!binary", true)).toThrow(
      YamlDocumentError,
    );
  });
});

describe("formatGoFloat", () => {
  const cases = [
    [0.25, "0.25"],
    [1000, "1000"],
    [1.5, "1.5"],
    [1e21, "1e+21"],
    [1e-5, "1e-05"],
    [0.0001, "0.0001"],
    [Infinity, "+Inf"],
    [-Infinity, "-Inf"],
    [NaN, "NaN"],
  ] as const;
  for (const [value, text] of cases) {
    it(`formats ${value} as ${text}`, () => {
      expect(formatGoFloat(value)).toBe(text);
    });
  }
});
