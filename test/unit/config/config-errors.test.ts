// Config errors name the file, line and field path and say what would fix them, while their
// message keeps the reference's text (docs/configuration.md#errors).
import { describe, expect, it } from "vitest";
import { ConfigError } from "../../../src/config/config-error.js";
import {
  loadConfig,
  loadConfigFromRoots,
  type ConfigFile,
} from "../../../src/config/load-config.js";
import { nearestName } from "../../../src/config/nearest-name.js";
import {
  failedReloadLine,
  toFailedReload,
} from "../../../src/config/reload-status.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";

function loadError(files: readonly ConfigFile[]): ConfigError {
  try {
    loadConfig(files, { statsManager: createStatsManager() });
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  throw new Error("loaded without error");
}

/** One rule under `domain: d`, with `rateLimit` as the lines of its `rate_limit` block. */
function ruleFile(name: string, ...rateLimit: string[]): ConfigFile {
  return {
    name,
    text: [
      "domain: d",
      "descriptors:",
      "  - key: k",
      "    rate_limit:",
      ...rateLimit.map((line) => `      ${line}`),
    ].join("\n"),
  };
}

describe("ConfigError locations", () => {
  it("suggests the nearest key for an unknown one and names its line and field path", () => {
    const error = loadError([
      ruleFile("a.yaml", "unit: minute", "requets_per_unit: 5"),
    ]);
    expect(error.message).toBe(
      "a.yaml: config error, unknown key 'requets_per_unit'",
    );
    expect(error.file).toBe("a.yaml");
    expect(error.line).toBe(6);
    expect(error.fieldPath).toBe("descriptors[0].rate_limit.requets_per_unit");
    expect(error.hint).toBe("did you mean 'requests_per_unit'?");
    expect(error.detail).toBe(
      "a.yaml: config error, unknown key 'requets_per_unit' (did you mean 'requests_per_unit'?); " +
        "line 6, field descriptors[0].rate_limit.requets_per_unit",
    );
  });

  it("lists the valid keys when no key is near an unknown one", () => {
    const error = loadError([
      { name: "a.yaml", text: "domain: d\ncolour: blue\n" },
    ]);
    expect(error.line).toBe(2);
    expect(error.fieldPath).toBe("colour");
    expect(error.hint).toMatch(
      /^valid keys: domain, key, value, descriptors, /,
    );
  });

  it("lists the valid units for an unknown unit, at the unit's line", () => {
    const error = loadError([
      ruleFile("a.yaml", "requests_per_unit: 5", "unit: fortnight"),
    ]);
    expect(error.message).toBe("a.yaml: invalid rate limit unit 'fortnight'");
    expect(error.line).toBe(6);
    expect(error.fieldPath).toBe("descriptors[0].rate_limit.unit");
    expect(error.hint).toBe(
      "valid units: SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR (any case)",
    );
  });

  it("points a missing unit at its rate_limit block", () => {
    const error = loadError([ruleFile("a.yaml", "requests_per_unit: 5")]);
    expect(error.message).toBe("a.yaml: invalid rate limit unit ''");
    expect(error.line).toBe(5);
    expect(error.fieldPath).toBe("descriptors[0].rate_limit.unit");
  });

  it("names the field path and line of a negative requests_per_unit", () => {
    const error = loadError([
      ruleFile("a.yaml", "unit: minute", "requests_per_unit: -5"),
    ]);
    expect(error.message).toBe(
      "a.yaml: error loading config file: yaml: unmarshal errors:\n" +
        "  line 6: cannot unmarshal !!int `-5` into uint32",
    );
    expect(error.line).toBe(6);
    expect(error.fieldPath).toBe("descriptors[0].rate_limit.requests_per_unit");
    expect(error.detail).toBe(
      "a.yaml: error loading config file: yaml: unmarshal errors:\n" +
        "  line 6: cannot unmarshal !!int `-5` into uint32 " +
        "(field descriptors[0].rate_limit.requests_per_unit: expected an unquoted integer from 0 to 4294967295)",
    );
  });

  it("names every field of several type errors in the detail", () => {
    const error = loadError([
      {
        name: "a.yaml",
        text: "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: 'true'\n    rate_limit:\n      requests_per_unit: '10'\n",
      },
    ]);
    expect(error.detail).toContain(
      "line 4: cannot unmarshal !!str `true` into bool (field descriptors[0].shadow_mode: expected true or false (unquoted))",
    );
    expect(error.detail).toContain(
      "line 6: cannot unmarshal !!str `10` into uint32 (field descriptors[0].rate_limit.requests_per_unit: ",
    );
  });

  it("explains a float where the reference says only 'error checking config'", () => {
    const error = loadError([
      {
        name: "a.yaml",
        text: "domain: d\ndescriptors:\n  - key: k\n    value: 2.5\n",
      },
    ]);
    expect(error.message).toBe("a.yaml: error checking config");
    expect(error.line).toBe(4);
    expect(error.fieldPath).toBe("descriptors[0].value");
    expect(error.hint).toBe(
      "'2.5' is a float: values must be strings, integers, booleans or null; quote it to use it as a string",
    );
  });

  it("says a float requests_per_unit must be a whole number", () => {
    const error = loadError([
      ruleFile("a.yaml", "unit: minute", "requests_per_unit: 2.5"),
    ]);
    expect(error.message).toBe("a.yaml: error checking config");
    expect(error.line).toBe(6);
    expect(error.fieldPath).toBe("descriptors[0].rate_limit.requests_per_unit");
    expect(error.hint).toContain(
      "requests_per_unit takes an integer from 0 to 4294967295",
    );
  });

  it("names both files of a duplicate domain", () => {
    const error = loadError([
      { name: "a.yaml", text: "# first\ndomain: same\n" },
      { name: "b.yaml", text: "domain: same\n" },
    ]);
    expect(error.message).toBe(
      "b.yaml: duplicate domain 'same' in config file",
    );
    expect(error.file).toBe("b.yaml");
    expect(error.line).toBe(1);
    expect(error.fieldPath).toBe("domain");
    expect(error.hint).toBe(
      "first defined in a.yaml:2; to merge them set MERGE_DOMAIN_CONFIG=true (config check: -merge_domain_configs)",
    );
  });

  it("lists the valid algorithms and suggests the nearest", () => {
    const error = loadError([
      ruleFile(
        "a.yaml",
        "unit: minute",
        "requests_per_unit: 5",
        "algorithm: sliding_windows",
      ),
    ]);
    expect(error.message).toBe(
      "a.yaml: config error, line 7: invalid rate limit algorithm 'sliding_windows' (expected one of: fixed_window, sliding_window, token_bucket)",
    );
    expect(error.line).toBe(7);
    expect(error.fieldPath).toBe("descriptors[0].rate_limit.algorithm");
    expect(error.hint).toBe("did you mean 'sliding_window'?");
    // The message names the line already: the detail does not repeat it.
    expect(error.detail).toBe(
      `${error.message} (did you mean 'sliding_window'?); field descriptors[0].rate_limit.algorithm`,
    );
  });

  it("lists the valid charge modes and suggests the nearest", () => {
    const error = loadError([
      { name: "a.yaml", text: "domain: d\ncharge: all-or-nothing\n" },
    ]);
    expect(error.message).toBe(
      "a.yaml: config error, line 2: invalid charge 'all-or-nothing' (expected one of: each, all_or_nothing)",
    );
    expect(error.line).toBe(2);
    expect(error.fieldPath).toBe("charge");
    expect(error.hint).toBe("did you mean 'all_or_nothing'?");
  });

  it("lists the valid failure modes", () => {
    const error = loadError([
      { name: "a.yaml", text: "domain: d\nfailure_mode: alow\n" },
    ]);
    expect(error.message).toBe(
      "a.yaml: invalid failure_mode 'alow' for domain 'd' (expected one of error, allow, deny, local)",
    );
    expect(error.line).toBe(2);
    expect(error.hint).toBe("did you mean 'allow'?");
  });

  it("names where a duplicate composite key was first defined, in a nested rule", () => {
    const error = loadError([
      {
        name: "a.yaml",
        text: "domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: x\n      - key: x\n",
      },
    ]);
    expect(error.message).toBe(
      "a.yaml: duplicate descriptor composite key 'd.k.x'",
    );
    expect(error.line).toBe(6);
    expect(error.fieldPath).toBe("descriptors[0].descriptors[1]");
    expect(error.hint).toBe("first defined in a.yaml:5");
  });

  it("gives the line of a YAML syntax error", () => {
    const error = loadError([
      { name: "a.yaml", text: "domain: d\ndescriptors: [\n" },
    ]);
    expect(error.message).toMatch(
      /^a\.yaml: error loading config file: yaml: line \d+: /,
    );
    expect(error.line).toBeTypeOf("number");
  });

  it("names the field path but no line for an xDS resource", () => {
    let error: unknown;
    try {
      loadConfigFromRoots(
        [
          {
            name: "resource-a",
            root: {
              domain: "d",
              descriptors: [
                {
                  key: "k",
                  value: "",
                  descriptors: [],
                  shadowMode: false,
                  quotaMode: false,
                  detailedMetric: false,
                  valueToMetric: false,
                  shareThreshold: false,
                  rateLimit: {
                    unit: "UNKNOWN",
                    requestsPerUnit: 1,
                    unlimited: false,
                    name: "",
                    replaces: [],
                  },
                },
              ],
            },
          },
        ],
        { statsManager: createStatsManager() },
      );
    } catch (e) {
      error = e;
    }
    if (!(error instanceof ConfigError))
      throw new Error("expected a ConfigError");
    expect(error.message).toBe("resource-a: invalid rate limit unit 'UNKNOWN'");
    expect(error.line).toBeUndefined();
    expect(error.fieldPath).toBe("descriptors[0].rate_limit.unit");
    expect(error.problem).toBe(
      "invalid rate limit unit 'UNKNOWN' (valid units: SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR (any case)); field descriptors[0].rate_limit.unit",
    );
  });
});

describe("nearestName", () => {
  it("suggests a close name and nothing for a distant one", () => {
    const keys = ["requests_per_unit", "unit", "unlimited", "name"];
    expect(nearestName("requets_per_unit", keys)).toBe("requests_per_unit");
    expect(nearestName("requests_per_uint", keys)).toBe("requests_per_unit");
    expect(nearestName("unti", keys)).toBe("unit");
    expect(nearestName("colour", keys)).toBeUndefined();
    expect(nearestName("unit", keys)).toBeUndefined();
  });
});

describe("reload status", () => {
  it("describes a failed load for the JSON form and the /healthcheck line", () => {
    const error = loadError([
      ruleFile("a.yaml", "unit: fortnight", "requests_per_unit: 5"),
    ]);
    const failed = toFailedReload(error, Date.UTC(2026, 0, 2, 3, 4, 5, 678));
    expect(failed).toEqual({
      file: "a.yaml",
      line: 5,
      fieldPath: "descriptors[0].rate_limit.unit",
      message:
        "invalid rate limit unit 'fortnight' (valid units: SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR (any case)); field descriptors[0].rate_limit.unit",
      time: "2026-01-02T03:04:05.678Z",
    });
    expect(failedReloadLine(failed)).toBe(
      `last config reload failed at 2026-01-02T03:04:05.678Z: a.yaml:5: ${failed.message}`,
    );
  });

  it("leaves out the parts it does not know", () => {
    const failed = toFailedReload(
      new ConfigError("unexpected error loading config: boom"),
      0,
    );
    expect(failed).toEqual({
      file: null,
      line: null,
      fieldPath: null,
      message: "unexpected error loading config: boom",
      time: "1970-01-01T00:00:00.000Z",
    });
    expect(failedReloadLine(failed)).toBe(
      "last config reload failed at 1970-01-01T00:00:00.000Z: unexpected error loading config: boom",
    );
    expect(
      failedReloadLine({ ...failed, file: "resource-a", line: null }),
    ).toBe(
      "last config reload failed at 1970-01-01T00:00:00.000Z: resource-a: unexpected error loading config: boom",
    );
  });
});
