import { describe, expect, it } from "vitest";
import { settingsTable } from "../../../src/settings/settings-table.js";
import {
  loadSettings,
  type SettingsEnv,
} from "../../../src/settings/settings.js";

const options = { randomUUID: () => "id" };

/** Every variable name loadSettings asks for, with mogrifier names replaced by `<M>`. */
function variablesRead(env: Record<string, string>): Set<string> {
  const read = new Set<string>();
  const recording = new Proxy<SettingsEnv>(env, {
    get(target, name) {
      if (typeof name === "string") read.add(name);
      return typeof name === "string" ? target[name] : undefined;
    },
  });
  loadSettings(recording, options);
  return new Set(
    [...read].map((name) =>
      name.replace(/^(TAGGED_PUSHSTATS_MOGRIFIERS?_)M_/, "$1<M>_"),
    ),
  );
}

describe("settingsTable", () => {
  const names = settingsTable.map((row) => row.name);

  it("has one row per variable", () => {
    expect(new Set(names).size).toBe(names.length);
  });

  it("lists every variable loadSettings reads, and nothing else", () => {
    const read = variablesRead({
      USE_PUSHSTATS: "false",
      USE_TAGGED_PUSHSTATS: "true",
      TAGGED_PUSHSTATS_MOGRIFIERS: "M",
      TAGGED_PUSHSTATS_MOGRIFIERS_M_PATTERN: "x",
      TAGGED_PUSHSTATS_MOGRIFIERS_M_NAME: "y",
      TAGGED_PUSHSTATS_MOGRIFIERS_M_TAGS: "a:b",
    });
    expect([...read].sort()).toEqual([...names].sort());
  });

  it("gives defaults that load to the same settings as leaving the variables unset", () => {
    const defaults = loadSettings({}, options).settings;
    for (const row of settingsTable) {
      if (row.defaultText.startsWith("(")) continue; // "(empty)", "(random UUID v4)"
      const { settings } = loadSettings(
        { [row.name]: row.defaultText },
        options,
      );
      expect(settings, row.name).toEqual(defaults);
    }
  });

  it("spells defaults the way the environment would", () => {
    const byName = new Map(
      settingsTable.map((row) => [row.name, row.defaultText]),
    );
    expect(byName.get("PORT")).toBe("8080");
    expect(byName.get("GRPC_MAX_CONNECTION_AGE")).toBe("24h");
    expect(byName.get("GRPC_MAX_CONNECTION_AGE_GRACE")).toBe("1h");
    expect(byName.get("STATS_FLUSH_INTERVAL")).toBe("10s");
    expect(byName.get("XDS_CLIENT_BACKOFF_MAX_INTERVAL")).toBe("1m");
    expect(byName.get("MC_SRV_REFRESH")).toBe("0");
    expect(byName.get("LOG_LEVEL")).toBe("WARN");
    expect(byName.get("BACKEND_TYPE")).toBe("kv");
    expect(byName.get("USE_PUSHSTATS")).toBe("true");
    expect(byName.get("NEAR_LIMIT_RATIO")).toBe("0.8");
    expect(byName.get("CACHE_KEY_PREFIX")).toBe("(empty)");
    expect(byName.get("TRACING_SERVICE_INSTANCE_ID")).toBe("(random UUID v4)");
  });

  it("explains every variable in one line", () => {
    for (const row of settingsTable) {
      expect(row.meaning, row.name).toMatch(/^\S.*\.$/);
      expect(row.meaning, row.name).not.toContain("\n");
    }
  });

  it("is frozen", () => {
    expect(Object.isFrozen(settingsTable)).toBe(true);
    expect(settingsTable.every((row) => Object.isFrozen(row))).toBe(true);
  });
});
