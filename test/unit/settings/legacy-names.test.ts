import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  findLegacyVariables,
  legacyBackendTypes,
  legacyNames,
  legacyNameWarnings,
} from "../../../src/settings/legacy-names.js";
import {
  legacyNamesMarkdown,
  withLegacyNamesBlock,
} from "../../../src/settings/legacy-names-markdown.js";
import { SettingsError } from "../../../src/settings/settings-error.js";
import { settingsTable } from "../../../src/settings/settings-table.js";
import {
  loadSettings,
  settingsDefaults,
  type SettingsEnv,
} from "../../../src/settings/settings.js";

const root = join(import.meta.dirname, "..", "..", "..");
const memory = { BACKEND_TYPE: "memory" };
const options = { randomUUID: () => "id" };

function load(env: SettingsEnv): ReturnType<typeof loadSettings> {
  return loadSettings(env, options);
}

function loadError(env: SettingsEnv): SettingsError {
  try {
    load(env);
  } catch (err) {
    if (err instanceof SettingsError) return err;
    throw err;
  }
  throw new Error("expected a SettingsError");
}

describe("legacyNames", () => {
  const ours = new Set(settingsTable.map((row) => row.name));

  it("names one of our variables for each entry, and none of ours as legacy", () => {
    expect(legacyNames.length).toBeGreaterThan(50);
    for (const { legacy, replacement } of legacyNames) {
      expect(ours.has(replacement), replacement).toBe(true);
      expect(ours.has(legacy), legacy).toBe(false);
      expect(legacy).toMatch(/^[A-Z][A-Z0-9_]*(<M>[A-Z0-9_]*)?$/);
    }
  });

  it("lists each legacy variable once, frozen", () => {
    const legacy = legacyNames.map((entry) => entry.legacy);
    expect(new Set(legacy).size).toBe(legacy.length);
    expect(Object.isFrozen(legacyNames)).toBe(true);
    for (const entry of legacyNames) expect(Object.isFrozen(entry)).toBe(true);
  });

  it("covers the reference's product-word families", () => {
    const legacy = new Set(legacyNames.map((entry) => entry.legacy));
    for (const name of [
      "REDIS_URL",
      "REDIS_SOCKET_TYPE",
      "REDIS_TYPE",
      "REDIS_AUTH",
      "REDIS_TLS",
      "REDIS_TLS_CACERT",
      "REDIS_POOL_SIZE",
      "REDIS_PIPELINE_WINDOW",
      "REDIS_PIPELINE_LIMIT",
      "REDIS_PERSECOND",
      "REDIS_PERSECOND_URL",
      "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
      "MEMCACHE_HOST_PORT",
      "MEMCACHE_SRV",
      "USE_STATSD",
      "STATSD_HOST",
      "STATSD_PORT",
      "STATSD_PROTOCOL",
      "USE_DOG_STATSD",
      "USE_DOG_STATSD_MOGRIFIERS",
      "DOG_STATSD_MOGRIFIER_<M>_PATTERN",
      "USE_PROMETHEUS",
      "PROMETHEUS_ADDR",
      "PROMETHEUS_PATH",
      "PROMETHEUS_MAPPER_YAML",
      "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
    ]) {
      expect(legacy.has(name), name).toBe(true);
    }
    // Every REDIS_ / MEMCACHE_ variable maps to the KV_ / MC_ variable with the same suffix.
    for (const { legacy: name, replacement } of legacyNames) {
      if (name.startsWith("REDIS_"))
        expect(replacement).toBe(`KV_${name.slice("REDIS_".length)}`);
      if (name.startsWith("MEMCACHE_"))
        expect(replacement).toBe(`MC_${name.slice("MEMCACHE_".length)}`);
    }
  });

  it("maps the reference's BACKEND_TYPE words to ours", () => {
    expect([...legacyBackendTypes]).toEqual([
      ["redis", "kv"],
      ["memcache", "mc"],
    ]);
  });
});

describe("legacyNameWarnings", () => {
  it("finds nothing in an environment without the reference's names", () => {
    expect(legacyNameWarnings({})).toEqual([]);
    expect(
      legacyNameWarnings({ KV_URL: "h:1", PATH: "/bin", REDISX: "1" }),
    ).toEqual([]);
  });

  it("gives one warning per legacy variable set, in table order, naming ours", () => {
    expect(
      legacyNameWarnings({
        USE_PROMETHEUS: "true",
        REDIS_URL: "localhost:6379",
        REDIS_SOCKET_TYPE: "tcp",
        REDIS_TIMEOUT: "1s",
        MEMCACHE_HOST_PORT: "",
        UNRELATED: "x",
      }),
    ).toEqual([
      "REDIS_SOCKET_TYPE is the Go reference's name and is ignored: set KV_SOCKET_TYPE",
      "REDIS_URL is the Go reference's name and is ignored: set KV_URL",
      "REDIS_TIMEOUT is the Go reference's name and is ignored: set KV_TIMEOUT (see docs/migration.md)",
      "MEMCACHE_HOST_PORT is the Go reference's name and is ignored: set MC_HOST_PORT",
      "USE_PROMETHEUS is the Go reference's name and is ignored: set USE_PULLSTATS",
    ]);
  });

  it("names the mogrifier's variable of ours, with the operator's name filled in", () => {
    expect(
      findLegacyVariables({
        DOG_STATSD_MOGRIFIER_rule_TAGS: "a:$1",
        DOG_STATSD_MOGRIFIER_rule_PATTERN: "^x$",
        USE_DOG_STATSD_MOGRIFIERS: "rule",
        TAGGED_PUSHSTATS_MOGRIFIER_rule_NAME: "ours",
      }).map(({ variable, replacement }) => [variable, replacement]),
    ).toEqual([
      ["USE_DOG_STATSD_MOGRIFIERS", "TAGGED_PUSHSTATS_MOGRIFIERS"],
      [
        "DOG_STATSD_MOGRIFIER_rule_PATTERN",
        "TAGGED_PUSHSTATS_MOGRIFIERS_rule_PATTERN",
      ],
      [
        "DOG_STATSD_MOGRIFIER_rule_TAGS",
        "TAGGED_PUSHSTATS_MOGRIFIERS_rule_TAGS",
      ],
    ]);
  });

  it("ignores a variable that is present but unset", () => {
    expect(legacyNameWarnings({ REDIS_URL: undefined })).toEqual([]);
  });
});

describe("loadSettings with the reference's names", () => {
  it("returns their warnings first and never reads their values", () => {
    const { settings, warnings } = load({
      ...memory,
      REDIS_URL: "elsewhere:6379",
      REDIS_POOL_SIZE: "not a number",
      USE_STATSD: "false",
      KV_PIPELINE_LIMIT: "8",
    });
    expect(warnings).toEqual([
      "REDIS_URL is the Go reference's name and is ignored: set KV_URL",
      "REDIS_POOL_SIZE is the Go reference's name and is ignored: set KV_POOL_SIZE (see docs/migration.md)",
      "USE_STATSD is the Go reference's name and is ignored: set USE_PUSHSTATS",
      "KV_PIPELINE_LIMIT is deprecated and has no effect",
    ]);
    expect(settings.kvUrl).toBe(settingsDefaults.kvUrl);
    expect(settings.kvPoolSize).toBe(settingsDefaults.kvPoolSize);
    expect(settings.statsSink).toBe("pushstats");
  });

  it("looks at their names only, never reading their values", () => {
    const read = new Set<string>();
    const env = new Proxy<SettingsEnv>(
      { ...memory, REDIS_URL: "x", DOG_STATSD_MOGRIFIER_m_NAME: "y" },
      {
        get(target, name) {
          if (typeof name === "string") read.add(name);
          return typeof name === "string" ? target[name] : undefined;
        },
      },
    );
    expect(load(env).warnings).toHaveLength(2);
    expect(read.has("REDIS_URL")).toBe(false);
    expect(read.has("DOG_STATSD_MOGRIFIER_m_NAME")).toBe(false);
    expect(read.has("BACKEND_TYPE")).toBe(true);
  });

  it("keeps our variable's value when both names are set", () => {
    const { settings, warnings } = load({
      ...memory,
      REDIS_URL: "old:1",
      KV_URL: "new:2",
    });
    expect(settings.kvUrl).toBe("new:2");
    expect(warnings).toEqual([
      "REDIS_URL is the Go reference's name and is ignored: set KV_URL",
    ]);
  });

  it.each([
    ["redis", "kv"],
    ["memcache", "mc"],
  ])("rejects BACKEND_TYPE=%s naming BACKEND_TYPE=%s", (legacy, ours) => {
    expect(loadError({ BACKEND_TYPE: legacy }).problems).toEqual([
      `BACKEND_TYPE="${legacy}": ${legacy} is the Go reference's word: set BACKEND_TYPE=${ours}; expected kv, mc or memory`,
    ]);
  });

  it("still accepts our BACKEND_TYPE words, and refuses others as before", () => {
    expect(load({ BACKEND_TYPE: "" }).settings.backendType).toBe("kv");
    expect(load(memory).settings.backendType).toBe("memory");
    expect(loadError({ BACKEND_TYPE: "memcached" }).problems).toEqual([
      'BACKEND_TYPE="memcached": expected kv, mc or memory',
    ]);
  });
});

describe("docs/migration.md", () => {
  const doc = readFileSync(join(root, "docs", "migration.md"), "utf8");

  it("holds the table generated from legacyNames (run `make docs`)", () => {
    expect(doc).toContain(legacyNamesMarkdown());
    expect(withLegacyNamesBlock(doc)).toBe(doc);
  });

  it("lists every legacy variable and BACKEND_TYPE word in the generated block", () => {
    const block = legacyNamesMarkdown();
    for (const { legacy, replacement } of legacyNames)
      expect(block).toContain(`| \`${legacy}\` | \`${replacement}\` |`);
    for (const [legacy, ours] of legacyBackendTypes)
      expect(block).toContain(
        `| \`BACKEND_TYPE=${legacy}\` | \`BACKEND_TYPE=${ours}\` |`,
      );
  });

  it("replaces a stale block and refuses a document without one", () => {
    const stale = doc.replace("`REDIS_URL` | `KV_URL`", "`REDIS_URL` | `X`");
    expect(stale).not.toBe(doc);
    expect(withLegacyNamesBlock(stale)).toBe(doc);
    expect(() => withLegacyNamesBlock("# no block\n")).toThrow(
      /no generated block/,
    );
  });

  it("is linked from README, which names what differs", () => {
    const readme = readFileSync(join(root, "README.md"), "utf8");
    expect(readme).toContain("(docs/migration.md)");
    expect(readme).not.toContain("same statistic names");
  });
});
