import type { Settings, SettingsEnv } from "./settings.js";

/** A setting whose feature this build does not implement yet. */
export interface NotImplementedSetting {
  /** Environment variable name. */
  readonly variable: string;
  /** The missing feature, as a noun phrase ("the local over-limit cache"). */
  readonly feature: string;
  /** True when the environment asks for the feature, so a warning is due. */
  readonly isInUse: (settings: Settings, env: SettingsEnv) => boolean;
  /** Replaces the standard warning text when the standard form would mislead. */
  readonly warning?: (settings: Settings) => string;
}

/**
 * Settings read and checked by {@link loadSettings} but not acted on yet. Each entry yields the
 * warning `<VAR> has no effect yet: <feature> is not implemented in this build` when in use.
 * Delete an entry when its feature lands.
 */
export const notImplementedSettings: readonly NotImplementedSetting[] =
  Object.freeze([]);

/** A setting kept for compatibility that does nothing, in this build or any later one. */
export interface DeprecatedSetting {
  /** Environment variable name. */
  readonly variable: string;
  /** True when the environment sets it to a value that used to matter. */
  readonly isInUse: (settings: Settings) => boolean;
}

/** Deprecated settings; each yields `<VAR> is deprecated and has no effect` when in use. */
export const deprecatedSettings: readonly DeprecatedSetting[] = Object.freeze([
  {
    variable: "KV_PIPELINE_LIMIT",
    isInUse: (settings) => settings.kvPipelineLimit > 0,
  },
  {
    variable: "KV_PERSECOND_PIPELINE_LIMIT",
    isInUse: (settings) => settings.kvPerSecondPipelineLimit > 0,
  },
]);

/**
 * Returns one warning per setting in use that this build ignores: entries of
 * {@link notImplementedSettings}, then of {@link deprecatedSettings}, in table order.
 */
export function settingWarnings(
  settings: Settings,
  env: SettingsEnv,
): string[] {
  const warnings: string[] = [];
  for (const entry of notImplementedSettings) {
    if (!entry.isInUse(settings, env)) continue;
    warnings.push(
      entry.warning?.(settings) ??
        `${entry.variable} has no effect yet: ${entry.feature} is not implemented in this build`,
    );
  }
  for (const entry of deprecatedSettings) {
    if (entry.isInUse(settings))
      warnings.push(`${entry.variable} is deprecated and has no effect`);
  }
  return warnings;
}
