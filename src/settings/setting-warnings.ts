// Startup warnings about settings this build reads but ignores, derived from the schema's
// `deprecatedWhen` and `notImplemented` declarations (./schema/define.ts), and about the Go
// reference's variable names, which it does not read (./legacy-names.ts).

import type { SettingsEnv } from "./env-reader.js";
import { legacyNameWarnings } from "./legacy-names.js";
import { declarationEntries, type SchemaSettings } from "./schema/index.js";

/** A setting whose feature this build does not implement yet. */
export interface NotImplementedSetting {
  /** Environment variable name. */
  readonly variable: string;
  /** The missing feature, as a noun phrase ("the local over-limit cache"). */
  readonly feature: string;
  /** True when the environment asks for the feature, so a warning is due. */
  readonly isInUse: (settings: SchemaSettings, env: SettingsEnv) => boolean;
}

/** A setting kept for compatibility that does nothing, in this build or any later one. */
export interface DeprecatedSetting {
  /** Environment variable name. */
  readonly variable: string;
  /** True when the environment sets it to a value that used to matter. */
  readonly isInUse: (settings: SchemaSettings) => boolean;
}

/** The value of one field, looked up by name. */
const field = (settings: SchemaSettings, name: string): unknown => {
  const values: Readonly<Record<string, unknown>> = settings;
  return values[name];
};

/**
 * Settings read and checked by `loadSettings` but not acted on yet (declarations with
 * `notImplemented`). Each yields the warning
 * `<VAR> has no effect yet: <feature> is not implemented in this build` when in use.
 */
export const notImplementedSettings: readonly NotImplementedSetting[] =
  Object.freeze(
    declarationEntries.flatMap(({ field: name, declaration }) => {
      if (declaration.kind !== "setting") return [];
      const { notImplemented } = declaration;
      if (notImplemented === undefined) return [];
      return [
        Object.freeze({
          variable: declaration.env,
          feature: notImplemented.feature,
          isInUse: (settings: SchemaSettings, env: SettingsEnv) =>
            notImplemented.isInUse(field(settings, name), env),
        }),
      ];
    }),
  );

/**
 * Deprecated settings (declarations with `deprecatedWhen`); each yields
 * `<VAR> is deprecated and has no effect` when in use.
 */
export const deprecatedSettings: readonly DeprecatedSetting[] = Object.freeze(
  declarationEntries.flatMap(({ field: name, declaration }) => {
    if (declaration.kind !== "setting") return [];
    const { deprecatedWhen } = declaration;
    if (deprecatedWhen === undefined) return [];
    return [
      Object.freeze({
        variable: declaration.env,
        isInUse: (settings: SchemaSettings) =>
          deprecatedWhen(field(settings, name)),
      }),
    ];
  }),
);

/**
 * Returns one warning per setting in use that this build ignores: each of the Go reference's
 * variables set in `env` (`legacyNameWarnings`), then entries of {@link notImplementedSettings},
 * then of {@link deprecatedSettings}, in table order.
 */
export function settingWarnings(
  settings: SchemaSettings,
  env: SettingsEnv,
): string[] {
  const warnings = legacyNameWarnings(env);
  for (const entry of notImplementedSettings) {
    if (entry.isInUse(settings, env))
      warnings.push(
        `${entry.variable} has no effect yet: ${entry.feature} is not implemented in this build`,
      );
  }
  for (const entry of deprecatedSettings) {
    if (entry.isInUse(settings))
      warnings.push(`${entry.variable} is deprecated and has no effect`);
  }
  return warnings;
}
