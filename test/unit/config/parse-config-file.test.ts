import { describe, expect, it } from "vitest";
import { ConfigError } from "../../../src/config/config-error.js";
import { parseConfigFile } from "../../../src/config/parse-config-file.js";
import type { YamlDescriptor } from "../../../src/config/yaml-types.js";
import { fixture } from "./config-fixtures.js";

function parseFixture(name: string) {
  const file = fixture(name);
  return parseConfigFile(file.name, file.text);
}

function parseError(name: string): ConfigError {
  try {
    parseFixture(name);
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  throw new Error(`${name} parsed without error`);
}

function byKey(
  descriptors: readonly YamlDescriptor[],
  key: string,
): YamlDescriptor {
  const found = descriptors.find((d) => d.key === key);
  if (found === undefined) throw new Error(`no descriptor ${key}`);
  return found;
}

describe("parseConfigFile key validation", () => {
  // docs/reference-parity.md#yaml-key-check, one fixture per message.
  const cases = [
    ["non-string-key-int.yaml", "config error, key is not of type string: 1"],
    [
      "non-string-key-float.yaml",
      "config error, key is not of type string: 0.25",
    ],
    [
      "non-string-key-bool.yaml",
      "config error, key is not of type string: true",
    ],
    ["unknown-key.yaml", "config error, unknown key 'ratelimit'"],
    [
      "unknown-key-in-rate-limit.yaml",
      "config error, unknown key 'requests_per_second'",
    ],
    [
      "list-of-scalars.yaml",
      "config error, yaml file contains list of type other than map: key1",
    ],
    [
      "list-of-lists.yaml",
      "config error, yaml file contains list of type other than map: [a 1 <nil> true]",
    ],
    ["float-leaf.yaml", "error checking config"],
    ["float-leaf-exponent.yaml", "error checking config"],
    ["float-leaf-inf.yaml", "error checking config"],
    ["int-leaf-too-large.yaml", "error checking config"],
    // The first pass refuses every float leaf before requests_per_unit is decoded.
    ["requests-per-unit-float.yaml", "error checking config"],
  ] as const;
  for (const [name, problem] of cases) {
    it(`rejects ${name} with '${problem}'`, () => {
      const error = parseError(name);
      expect(error.message).toBe(`${name}: ${problem}`);
      expect(error.code).toBe("RLS_CONFIG");
    });
  }

  it("accepts known keys in the wrong place and ignores them", () => {
    const root = parseFixture("misplaced-keys.yaml");
    expect(root.domain).toBe("test-domain");
    expect(root.descriptors[0]?.rateLimit).toEqual({
      unit: "minute",
      requestsPerUnit: 3,
      unlimited: false,
      name: "",
      replaces: [],
    });
  });

  it("does not check anything under metadata and converts it like a protobuf Struct", () => {
    const root = parseFixture("metadata-unchecked.yaml");
    expect(root.descriptors[0]?.metadata).toEqual({
      anything_goes: 1.5,
      list: ["a", 2, null],
      nested: { "1": "one", true: true },
      when: "2001-12-14",
    });
  });
});

describe("parseConfigFile typed decode", () => {
  // docs/reference-parity.md#yaml-dialect: requests_per_unit must decode into uint32.
  const cases = [
    [
      "requests-per-unit-negative.yaml",
      "error loading config file: yaml: unmarshal errors:\n  line 6: cannot unmarshal !!int `-1` into uint32",
    ],
    [
      "requests-per-unit-too-large.yaml",
      "error loading config file: yaml: unmarshal errors:\n  line 6: cannot unmarshal !!int `4294967296` into uint32",
    ],
    [
      "requests-per-unit-quoted.yaml",
      "error loading config file: yaml: unmarshal errors:\n  line 6: cannot unmarshal !!str `10` into uint32",
    ],
    [
      "several-type-errors.yaml",
      "error loading config file: yaml: unmarshal errors:\n" +
        "  line 4: cannot unmarshal !!int `5` into config.YamlRateLimit\n" +
        "  line 5: cannot unmarshal !!str `nested` into []config.YamlDescriptor\n" +
        "  line 6: cannot unmarshal !!str `true` into bool\n" +
        "  line 7: cannot unmarshal !!seq into string",
    ],
    [
      "top-level-list.yaml",
      "error loading config file: yaml: unmarshal errors:\n  line 1: cannot unmarshal !!seq into map[interface {}]interface {}",
    ],
    [
      "top-level-scalar.yaml",
      "error loading config file: yaml: unmarshal errors:\n  line 1: cannot unmarshal !!str `test-do...` into map[interface {}]interface {}",
    ],
    [
      "metadata-not-a-map.yaml",
      "error loading config file: yaml: unmarshal errors:\n  line 4: cannot unmarshal !!seq into map[string]interface {}",
    ],
    [
      "unknown-anchor.yaml",
      "error loading config file: yaml: unknown anchor 'missing' referenced",
    ],
    [
      "anchor-contains-itself.yaml",
      "error loading config file: yaml: anchor 'all' value contains itself",
    ],
    [
      "merge-bad.yaml",
      "error loading config file: yaml: map merge requires map or sequence of maps as the value",
    ],
    [
      "alias-bomb.yaml",
      "error loading config file: yaml: document contains excessive aliasing",
    ],
    [
      "tag-mismatch.yaml",
      "error loading config file: yaml: cannot decode !!str `test-domain` as a !!int",
    ],
  ] as const;
  for (const [name, problem] of cases) {
    it(`rejects ${name}`, () => {
      expect(parseError(name).message).toBe(`${name}: ${problem}`);
    });
  }

  it("accepts the largest uint32", () => {
    expect(
      parseFixture("requests-per-unit-max.yaml").descriptors[0]?.rateLimit
        ?.requestsPerUnit,
    ).toBe(4294967295);
  });

  it("reports a syntax error with its line as an error loading the file", () => {
    // Inline rather than a fixture: a fixture that is not YAML would fail `prettier --check`.
    const text = "domain: test-domain\ndescriptors: [\n";
    expect(() => parseConfigFile("bad-yaml.yaml", text)).toThrow(
      /^bad-yaml\.yaml: error loading config file: yaml: line \d+: \S/,
    );
  });

  it("reads an empty file as an empty config", () => {
    expect(parseFixture("empty-file.yaml")).toEqual({
      domain: "",
      descriptors: [],
    });
  });

  it("reads only the first document", () => {
    const root = parseFixture("multiple-documents.yaml");
    expect(root.domain).toBe("first-domain");
    expect(root.descriptors.map((d) => d.key)).toEqual(["key1"]);
  });

  it("resolves anchors, aliases and merge keys", () => {
    const root = parseFixture("anchors.yaml");
    const limits = root.descriptors.map((d) => [
      d.rateLimit?.unit,
      d.rateLimit?.requestsPerUnit,
    ]);
    expect(limits).toEqual([
      ["minute", 10],
      ["minute", 10],
      ["minute", 20],
    ]);
  });

  it("lets earlier maps of a merge list win and explicit keys override them", () => {
    expect(
      parseFixture("merge-list.yaml").descriptors[0]?.rateLimit,
    ).toMatchObject({
      unit: "second",
      requestsPerUnit: 5,
      name: "merged",
    });
  });

  it("keeps the last value of a repeated key", () => {
    const root = parseFixture("duplicate-yaml-keys.yaml");
    expect(root.domain).toBe("test-domain");
    expect(root.descriptors[0]?.key).toBe("key2");
  });

  it("gives missing fields their zero values", () => {
    const root = parseConfigFile(
      "x.yaml",
      "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {}\n",
    );
    expect(root.descriptors[0]).toEqual({
      key: "k",
      value: "",
      rateLimit: {
        unit: "",
        requestsPerUnit: 0,
        unlimited: false,
        name: "",
        replaces: [],
      },
      descriptors: [],
      shadowMode: false,
      quotaMode: false,
      detailedMetric: false,
      valueToMetric: false,
      shareThreshold: false,
      metadata: undefined,
      line: 3,
    });
  });

  it("reads a null rate_limit as no rate limit", () => {
    const root = parseConfigFile(
      "x.yaml",
      "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n",
    );
    expect(root.descriptors[0]?.rateLimit).toBeUndefined();
  });
});

describe("parseConfigFile YAML 1.1 scalars", () => {
  const root = parseFixture("yaml11-scalars.yaml");

  // docs/reference-parity.md#yaml-dialect: string fields keep the scalar text as written; null
  // forms become "".
  const values = [
    ["number", "123"],
    ["hex", "0x1F"],
    ["word", "yes"],
    ["upper", "OFF"],
    ["stamp", "2001-12-14"],
    ["empty", ""],
    ["tilde", ""],
    ["null_word", ""],
    ["quoted", "null"],
  ] as const;
  for (const [key, value] of values) {
    it(`keeps value of '${key}' as '${value}'`, () => {
      expect(byKey(root.descriptors, key).value).toBe(value);
    });
  }

  it("reads yes/on/Y/TRUE as true and off as false for bool fields", () => {
    const flags = byKey(root.descriptors, "flags");
    expect([
      flags.shadowMode,
      flags.quotaMode,
      flags.detailedMetric,
      flags.valueToMetric,
      flags.shareThreshold,
    ]).toEqual([true, true, true, true, false]);
  });

  it("reads hex, octal and underscored integers for requests_per_unit", () => {
    expect(byKey(root.descriptors, "limits").rateLimit).toMatchObject({
      unit: "MiNuTe",
      requestsPerUnit: 16,
    });
    expect(byKey(root.descriptors, "octal").rateLimit?.requestsPerUnit).toBe(8);
    expect(
      byKey(root.descriptors, "underscores").rateLimit?.requestsPerUnit,
    ).toBe(1000);
  });

  it("keeps the text of a quoted or numeric domain", () => {
    expect(parseConfigFile("x.yaml", "domain: 0x10\n").domain).toBe("0x10");
    expect(parseConfigFile("x.yaml", "domain: 'yes'\n").domain).toBe("yes");
  });

  it("treats a bool written for a string key as a key that is not a string", () => {
    expect(() => parseConfigFile("x.yaml", "domain: d\ny: 1\n")).toThrow(
      "x.yaml: config error, key is not of type string: true",
    );
  });

  it("accepts a quoted key that looks like a number and then rejects it as unknown", () => {
    expect(() => parseConfigFile("x.yaml", 'domain: d\n"1": 1\n')).toThrow(
      "x.yaml: config error, unknown key '1'",
    );
  });
});
