import { describe, expect, it } from "vitest";
import {
  deprecatedSettings,
  notImplementedSettings,
} from "../../../src/settings/setting-warnings.js";
import {
  loadSettings,
  type SettingsEnv,
} from "../../../src/settings/settings.js";

const memory = { BACKEND_TYPE: "memory" };

function warningsFor(env: SettingsEnv): string[] {
  return loadSettings(env, { randomUUID: () => "id" }).warnings;
}

describe("settingWarnings", () => {
  it("warns about nothing for the memory backend with defaults", () => {
    expect(warningsFor(memory)).toEqual([]);
  });

  it.each([
    { USE_PUSHSTATS: "false" },
    { USE_PUSHSTATS: "true" },
    { USE_PUSHSTATS: "false", USE_PULLSTATS: "true" },
    { EXTRA_TAGS: "env:prod" },
    { STATS_FLUSH_INTERVAL: "10s" },
    { LOCAL_CACHE_SIZE_IN_BYTES: "1024" },
    { CONFIG_TYPE: "FILE" },
    { QUOTA_MODE: "true" },
    { GRPC_UDS: "/run/rl.sock" },
    { GRPC_MAX_CONNECTION_AGE: "24h" },
    { RESPONSE_DYNAMIC_METADATA: "true" },
    { KV_PIPELINE_LIMIT: "0" },
  ])(
    "does not warn for a built feature or a setting that asks for nothing: %j",
    (env) => {
      expect(warningsFor({ ...memory, ...env })).toEqual([]);
    },
  );

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

  it("keeps frozen tables naming real variables", () => {
    expect(Object.isFrozen(notImplementedSettings)).toBe(true);
    expect(Object.isFrozen(deprecatedSettings)).toBe(true);
    for (const entry of [...notImplementedSettings, ...deprecatedSettings]) {
      expect(entry.variable).toMatch(/^[A-Z][A-Z0-9_]*$/);
    }
  });
});
