import { describe, expect, it } from "vitest";
import { EnvParseError } from "../../../src/settings/env-parsers.js";
import {
  declarationEntries,
  settingsGroups,
} from "../../../src/settings/schema/index.js";
import { kv } from "../../../src/settings/schema/kv.js";
import {
  loadSettings,
  settingsDefaults,
} from "../../../src/settings/settings.js";

const settingEntries = declarationEntries.flatMap(({ field, declaration }) =>
  declaration.kind === "setting" ? [{ field, declaration }] : [],
);

describe("settings schema", () => {
  it("declares each variable and each field once", () => {
    const envs = settingEntries.map(({ declaration }) => declaration.env);
    expect(new Set(envs).size).toBe(envs.length);
    for (const env of envs) expect(env).toMatch(/^[A-Z][A-Z0-9_]*$/);
    const fields = declarationEntries.map(({ field }) => field);
    expect(new Set(fields).size).toBe(fields.length);
  });

  it("keeps groups together, in table order", () => {
    const order = declarationEntries.map(({ group }) => group);
    const seen = order.filter((group, i) => group !== order[i - 1]);
    expect(seen).toEqual(settingsGroups.map(({ group }) => group));
  });

  it("derives settingsDefaults from every read field's declared default", () => {
    const expected = Object.fromEntries(
      declarationEntries.flatMap(({ field, declaration }) =>
        declaration.kind === "derived" ? [] : [[field, declaration.default]],
      ),
    );
    expect(settingsDefaults).toEqual(expected);
  });

  it("spells every default so that its own codec reads it back", () => {
    for (const { declaration } of settingEntries) {
      if (declaration.defaultText !== undefined) continue;
      const text = declaration.codec.format(declaration.default);
      if (text === "(empty)") continue;
      expect(declaration.codec.parse(text), declaration.env).toEqual(
        declaration.default,
      );
    }
  });

  it("gives the per-second instance the first instance's codec, default and hooks", () => {
    const { declarations: d } = kv;
    const twins = [
      [d.kvPerSecondPoolSize, d.kvPoolSize],
      [d.kvPerSecondTimeoutMs, d.kvTimeoutMs],
      [d.kvPerSecondType, d.kvType],
      [d.kvPerSecondPipelineLimit, d.kvPipelineLimit],
    ] as const;
    for (const [twin, first] of twins) {
      expect(twin.codec, twin.env).toBe(first.codec);
      expect(twin.default, twin.env).toEqual(first.default);
      expect(twin.deprecatedWhen, twin.env).toBe(first.deprecatedWhen);
    }
    expect(d.kvPerSecondPoolSize.meaning).toBe(
      "As KV_POOL_SIZE, per-second instance.",
    );
    expect(d.kvPerSecondUrl.default).not.toBe(d.kvUrl.default);
  });

  it("rejects through the codec with the reason the problem line shows", () => {
    const { kvPoolSize } = kv.declarations;
    expect(() => kvPoolSize.codec.parse("0")).toThrow(EnvParseError);
    expect(() => loadSettings({ KV_POOL_SIZE: "0" })).toThrow(
      'KV_POOL_SIZE="0": out of range; expected a positive integer',
    );
  });

  it("reads MEMORY_MAX_KEYS as a positive key count (default 1,000,000)", () => {
    expect(loadSettings({}).settings.memoryMaxKeys).toBe(1_000_000);
    expect(
      loadSettings({ MEMORY_MAX_KEYS: "5000" }).settings.memoryMaxKeys,
    ).toBe(5000);
    expect(() => loadSettings({ MEMORY_MAX_KEYS: "0" })).toThrow(
      'MEMORY_MAX_KEYS="0": out of range; expected a positive integer',
    );
  });

  it("freezes the declarations", () => {
    expect(Object.isFrozen(declarationEntries)).toBe(true);
    for (const { declarations } of settingsGroups) {
      expect(Object.isFrozen(declarations)).toBe(true);
    }
    for (const { declaration } of declarationEntries) {
      expect(Object.isFrozen(declaration)).toBe(true);
    }
  });
});
