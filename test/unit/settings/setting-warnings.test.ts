import { describe, expect, it } from "vitest";
import { notImplementedSettings } from "../../../src/settings/setting-warnings.js";
import {
  loadSettings,
  type SettingsEnv,
} from "../../../src/settings/settings.js";

const memory = { BACKEND_TYPE: "memory" };

function warningsFor(env: SettingsEnv): string[] {
  return loadSettings(env, { randomUUID: () => "id" }).warnings;
}

describe("settingWarnings", () => {
  it("warns only about the default backend for an empty environment", () => {
    expect(warningsFor({})).toEqual([
      "BACKEND_TYPE=kv (the default when unset or empty): the key-value store backend is not implemented in this build; set BACKEND_TYPE=memory",
    ]);
  });

  it("warns about nothing for the memory backend with defaults", () => {
    expect(warningsFor(memory)).toEqual([]);
  });

  it.each([
    [{ USE_PUSHSTATS: "true" }, "USE_PUSHSTATS", "the push-based metrics sink"],
    [
      { USE_PUSHSTATS: "false", USE_PULLSTATS: "true" },
      "USE_PULLSTATS",
      "the pull-based metrics exporter",
    ],
    [{ EXTRA_TAGS: "env:prod" }, "EXTRA_TAGS", "exporting statistics"],
    [
      { STATS_FLUSH_INTERVAL: "10s" },
      "STATS_FLUSH_INTERVAL",
      "exporting statistics",
    ],
    [
      { RESPONSE_DYNAMIC_METADATA: "true" },
      "RESPONSE_DYNAMIC_METADATA",
      "dynamic metadata in responses",
    ],
  ])("warns for %j", (env, variable, feature) => {
    expect(warningsFor({ ...memory, ...env })).toEqual([
      `${variable} has no effect yet: ${feature} is not implemented in this build`,
    ]);
  });

  it("warns for the tagged sink", () => {
    expect(
      warningsFor({
        ...memory,
        USE_PUSHSTATS: "false",
        USE_TAGGED_PUSHSTATS: "true",
      }),
    ).toEqual([
      "USE_TAGGED_PUSHSTATS has no effect yet: the tagged push-based metrics sink is not implemented in this build",
    ]);
  });

  it.each([
    { USE_PUSHSTATS: "false" },
    { LOCAL_CACHE_SIZE_IN_BYTES: "0" },
    { CONFIG_TYPE: "FILE" },
    { TRACING_ENABLED: "false" },
    { QUOTA_MODE: "false" },
    { EXTRA_TAGS: "" },
    { GRPC_UDS: "" },
    { KV_PIPELINE_LIMIT: "0" },
  ])("does not warn for a setting that asks for nothing: %j", (env) => {
    expect(warningsFor({ ...memory, ...env })).toEqual([]);
  });

  it("warns about deprecated pipeline limits above 0", () => {
    expect(
      warningsFor({
        ...memory,
        KV_PIPELINE_LIMIT: "8",
        KV_PERSECOND_PIPELINE_LIMIT: "4",
      }),
    ).toEqual([
      "KV_PIPELINE_LIMIT is deprecated and has no effect",
      "KV_PERSECOND_PIPELINE_LIMIT is deprecated and has no effect",
    ]);
  });

  it("lists warnings in table order", () => {
    expect(
      warningsFor({
        ...memory,
        RESPONSE_DYNAMIC_METADATA: "true",
        EXTRA_TAGS: "env:prod",
      }).map((warning) => warning.split(" ")[0]),
    ).toEqual(["EXTRA_TAGS", "RESPONSE_DYNAMIC_METADATA"]);
  });

  it("keeps one frozen table naming real variables", () => {
    expect(Object.isFrozen(notImplementedSettings)).toBe(true);
    for (const entry of notImplementedSettings) {
      expect(entry.variable).toMatch(/^[A-Z][A-Z0-9_]*$/);
      expect(entry.feature).not.toBe("");
    }
  });
});
