// Loads the service's settings from the environment (house style §7). What each variable means,
// its default and its validation are declared once, in ./schema/ (see its index.ts for how to
// add one); this file derives the `Settings` type, `settingsDefaults` and the parse from it.
// Names are the spec's neutral ones (KV_*, MC_*, PUSHSTATS_*, TAGGED_PUSHSTATS_*, PULLSTATS_*);
// defaults the spec leaves open come from docs/reference-parity.md#settings-defaults. Parsing
// follows the reference's env library (docs/reference-parity.md#settings-parsing): an unset
// variable takes its default, a variable set to "" is parsed as "" (invalid for bool, integer,
// duration and number fields; fine for strings, lists and maps), and every problem is collected
// before failing.

import { randomUUID as cryptoRandomUUID } from "node:crypto";
import { createEnvReader, type SettingsEnv } from "./env-reader.js";
import {
  declarationEntries,
  settingsChecks,
  type SchemaSettings,
} from "./schema/index.js";
import { settingWarnings } from "./setting-warnings.js";
import { SettingsError } from "./settings-error.js";

export type { SettingsEnv } from "./env-reader.js";
export type {
  BackendFailureMode,
  BackendType,
  ChargeMode,
  ConfigType,
  GrpcHttp2Engine,
  KvPoolOnEmptyBehavior,
  KvSocketType,
  KvType,
  LogFormat,
  LogLevel,
  PushStatsProtocol,
  StatsSinkKind,
  TaggedPushStatsMogrifier,
  TracingExporterProtocol,
} from "./schema/index.js";

/**
 * The service's settings, parsed from the environment by {@link loadSettings} and deep-frozen.
 * One field per declaration in ./schema/, whose TSDoc, variable, unit and default
 * ({@link settingsDefaults}) are written there.
 */
export type Settings = SchemaSettings;

function deepFreeze<T>(value: T): T {
  if (typeof value === "object" && value !== null && !Object.isFrozen(value)) {
    for (const child of Object.values(value)) deepFreeze(child);
    Object.freeze(value);
  }
  return value;
}

function buildDefaults(): Readonly<Omit<Settings, "statsSink">> {
  const defaults: Record<string, unknown> = {};
  for (const { field, declaration } of declarationEntries) {
    if (declaration.kind !== "derived") defaults[field] = declaration.default;
  }
  return deepFreeze(defaults as Omit<Settings, "statsSink">);
}

/**
 * The default of every setting, used when its variable is unset (a variable set to "" is parsed,
 * not defaulted); taken from the schema's declarations. `statsSink` is derived, not read, so it
 * has no entry here.
 */
export const settingsDefaults: Readonly<Omit<Settings, "statsSink">> =
  buildDefaults();

/** Options of {@link loadSettings}. */
export interface LoadSettingsOptions {
  /**
   * Source of `TRACING_SERVICE_INSTANCE_ID` when it is unset or "".
   * @defaultValue `randomUUID` of `node:crypto` (version-4 UUID)
   */
  readonly randomUUID?: () => string;
}

/** Result of {@link loadSettings}. */
export interface LoadedSettings {
  /** The parsed settings, deep-frozen. */
  readonly settings: Settings;
  /**
   * Human-readable notes for the log: the Go reference's variable names found in `env`, which
   * are not read (see `legacyNames`), settings for features this build does not implement yet
   * (see `notImplementedSettings`) and deprecated settings. Not errors.
   */
  readonly warnings: string[];
}

/**
 * Parses the service's settings from an environment. Pure: reads only `env` (never
 * `process.env`), so tests pass plain objects. An unset variable takes its default from
 * {@link settingsDefaults}; a set one is parsed with the reference's rules (see
 * `env-parsers.ts`), so "" is invalid for flags, numbers and durations. Variables are read in
 * table order, then composite fields (mogrifiers), then derived fields, then the combination
 * checks run.
 *
 * @param env - variable name → value; `src/main.ts` passes `process.env`
 * @returns the deep-frozen settings, and warnings about settings this build ignores (the Go
 * reference's names among them)
 * @throws {@link SettingsError} listing every invalid variable and invalid combination at once
 */
export function loadSettings(
  env: SettingsEnv,
  options: LoadSettingsOptions = {},
): LoadedSettings {
  const reader = createEnvReader(env);
  const context = { randomUUID: options.randomUUID ?? cryptoRandomUUID };
  const values: Record<string, unknown> = {};
  for (const { field, declaration } of declarationEntries) {
    if (declaration.kind !== "setting") continue;
    const value = reader.read(
      declaration.env,
      declaration.default,
      declaration.codec.parse,
      declaration.secret,
    );
    values[field] =
      declaration.resolve === undefined
        ? value
        : declaration.resolve(value, context);
  }
  for (const { field, declaration } of declarationEntries) {
    if (declaration.kind === "composite")
      values[field] = declaration.read(reader, values);
  }
  for (const { field, declaration } of declarationEntries) {
    if (declaration.kind === "derived")
      values[field] = declaration.derive(values);
  }
  const settings = values as Settings;

  for (const check of settingsChecks) check(settings, reader);
  if (reader.problems.length > 0) throw new SettingsError(reader.problems);
  return {
    settings: deepFreeze(settings),
    warnings: settingWarnings(settings, env),
  };
}
