import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { fixedEpochWindow } from "../../../src/config/algorithm.js";
import { ConfigError } from "../../../src/config/config-error.js";
import {
  loadConfig,
  loadConfigFromRoots,
} from "../../../src/config/load-config.js";
import { rateLimitConfigToYamlRoot } from "../../../src/provider/xds/xds-provider.js";
import {
  ConfigChargeMode,
  ConfigRateLimitAlgorithm,
  ConfigRateLimitConfigSchema,
  ConfigRateLimitUnit,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../../../src/proto.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { descriptor } from "../../helpers/requests.js";

function load(text: string, name = "config.windows.yaml") {
  return loadConfig([{ name, text }], { statsManager: createStatsManager() });
}

function loadError(text: string, name = "config.windows.yaml"): string {
  try {
    load(text, name);
  } catch (error) {
    if (error instanceof ConfigError) return error.message;
    throw error;
  }
  throw new Error("loaded without error");
}

const windows = `domain: api
charge: all_or_nothing
descriptors:
  - key: user
    rate_limit:
      unit: minute
      unit_multiplier: 5
      requests_per_unit: 100
  - key: ip
    rate_limit:
      unit: second
      requests_per_unit: 10
      algorithm: sliding_window
  - key: plain
    rate_limit:
      unit: hour
      requests_per_unit: 1
      algorithm: fixed_window
`;

describe("config: window extensions", () => {
  it("decides window, algorithm and charge mode at load", () => {
    const config = load(windows);
    expect(config.getLimit("api", descriptor(["user", "u"]))).toMatchObject({
      unit: Unit.MINUTE,
      unitSeconds: 60,
      unitMultiplier: 5,
      windowSeconds: 300,
      algorithm: fixedEpochWindow(300),
      cacheKeySuffix: "_w300",
      allOrNothing: true,
    });
    expect(config.getLimit("api", descriptor(["ip", "1"]))).toMatchObject({
      windowSeconds: 1,
      algorithm: {
        kind: "sliding_window",
        window: { kind: "epoch", seconds: 1 },
      },
      cacheKeySuffix: "_s1",
    });
    expect(config.getLimit("api", descriptor(["plain", "x"]))).toMatchObject({
      windowSeconds: 3600,
      algorithm: fixedEpochWindow(3600),
      cacheKeySuffix: "",
      extraLimits: undefined,
      statsKeySuffix: "",
    });
  });

  it("dumps the extension fields only when set", () => {
    expect(load(windows).dump()).toBe(
      "api.user: unit=MINUTE requests_per_unit=100, shadow_mode: false, quota_mode: false, unit_multiplier: 5, charge: all_or_nothing\n" +
        "api.ip: unit=SECOND requests_per_unit=10, shadow_mode: false, quota_mode: false, algorithm: sliding_window, charge: all_or_nothing\n" +
        "api.plain: unit=HOUR requests_per_unit=1, shadow_mode: false, quota_mode: false, charge: all_or_nothing\n",
    );
  });

  it("applies the global charge mode to domains without charge:", () => {
    const text =
      "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    const each = loadConfig([{ name: "a", text }], {
      statsManager: createStatsManager(),
    });
    expect(each.getLimit("d", descriptor(["k", "v"]))?.allOrNothing).toBe(
      false,
    );
    const all = loadConfig([{ name: "a", text }], {
      statsManager: createStatsManager(),
      chargeMode: "all_or_nothing",
    });
    expect(all.getLimit("d", descriptor(["k", "v"]))?.allOrNothing).toBe(true);
    // charge: each overrides the global mode.
    const explicit = loadConfig(
      [{ name: "a", text: `charge: each\n${text}` }],
      {
        statsManager: createStatsManager(),
        chargeMode: "all_or_nothing",
      },
    );
    expect(explicit.getLimit("d", descriptor(["k", "v"]))?.allOrNothing).toBe(
      false,
    );
  });

  it.each([
    [
      "algorithm: leaky_bucket",
      "config.windows.yaml: config error, line 6: invalid rate limit algorithm 'leaky_bucket' (expected one of: fixed_window, sliding_window, token_bucket)",
    ],
    [
      "unit_multiplier: 0",
      "config.windows.yaml: config error, line 6: invalid unit_multiplier '0' (expected an integer >= 1)",
    ],
    [
      "unit_multiplier: -2",
      "config.windows.yaml: config error, line 6: invalid unit_multiplier '-2' (expected an integer >= 1)",
    ],
    [
      "unit_multiplier: 1.5",
      "config.windows.yaml: config error, line 6: invalid unit_multiplier '1.5' (expected an integer >= 1)",
    ],
    [
      "unit_multiplier: five",
      "config.windows.yaml: config error, line 6: invalid unit_multiplier 'five' (expected an integer >= 1)",
    ],
  ])("rejects %s, naming file and line", (field, message) => {
    const text = `domain: d
descriptors:
  - key: k
    rate_limit:
      unit: minute
      ${field}
      requests_per_unit: 1
`;
    expect(loadError(text)).toBe(message);
  });

  it("rejects an unknown charge, naming file and line", () => {
    expect(loadError("domain: d\n\ncharge: some\n")).toBe(
      "config.windows.yaml: config error, line 3: invalid charge 'some' (expected one of: each, all_or_nothing)",
    );
  });

  it("rejects a window longer than 2^32 − 1 seconds", () => {
    expect(
      loadError(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, unit_multiplier: 200, requests_per_unit: 1}\n",
      ),
    ).toBe(
      "config.windows.yaml: unit_multiplier 200 × YEAR is longer than 4294967295 seconds",
    );
  });

  it("rejects merged files of one domain that disagree on charge", () => {
    expect(() =>
      loadConfig(
        [
          { name: "a.yaml", text: "domain: d\ncharge: each\n" },
          { name: "b.yaml", text: "domain: d\ncharge: all_or_nothing\n" },
        ],
        { statsManager: createStatsManager(), mergeDomainConfig: true },
      ),
    ).toThrow(
      "b.yaml: conflicting charge 'all_or_nothing' for domain 'd' (another file says 'each')",
    );
  });
});

describe("xDS: window extension fields", () => {
  it("maps charge, algorithm and unit_multiplier to the YAML model", () => {
    const config = create(ConfigRateLimitConfigSchema, {
      name: "r",
      domain: "d",
      charge: ConfigChargeMode.ALL_OR_NOTHING,
      descriptors: [
        {
          key: "k",
          rateLimit: {
            unit: ConfigRateLimitUnit.MINUTE,
            requestsPerUnit: 3,
            algorithm: ConfigRateLimitAlgorithm.SLIDING_WINDOW,
            unitMultiplier: 5,
          },
        },
        { key: "plain", rateLimit: { unit: ConfigRateLimitUnit.SECOND } },
      ],
    });
    const root = rateLimitConfigToYamlRoot(config);
    expect(root.root.charge).toBe("all_or_nothing");
    expect(root.root.descriptors[0]?.rateLimit).toMatchObject({
      algorithm: "sliding_window",
      unitMultiplier: 5,
    });
    // Unset extension fields leave the YAML model as the reference maps it.
    expect(root.root.descriptors[1]?.rateLimit).not.toHaveProperty("algorithm");
    expect(root.root.descriptors[1]?.rateLimit).not.toHaveProperty(
      "unitMultiplier",
    );
    const loaded = loadConfigFromRoots([root], {
      statsManager: createStatsManager(),
    });
    expect(loaded.getLimit("d", descriptor(["k", "v"]))).toMatchObject({
      windowSeconds: 300,
      algorithm: {
        kind: "sliding_window",
        window: { kind: "epoch", seconds: 300 },
      },
      allOrNothing: true,
    });
  });

  it("rejects an algorithm number this build does not know", () => {
    const config = create(ConfigRateLimitConfigSchema, {
      name: "r",
      domain: "d",
      descriptors: [
        {
          key: "k",
          rateLimit: {
            unit: ConfigRateLimitUnit.MINUTE,
            // A number from a newer build: open enums carry it through decoding.
            // eslint-disable-next-line @typescript-eslint/no-unsafe-enum-assignment -- on purpose
            algorithm: 9 as ConfigRateLimitAlgorithm,
          },
        },
      ],
    });
    expect(() => rateLimitConfigToYamlRoot(config)).toThrow(
      "r: invalid rate limit algorithm 9",
    );
  });
});
