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

const isSet = (env: SettingsEnv, name: string): boolean =>
  env[name] !== undefined;

/**
 * Settings read and checked by {@link loadSettings} but not acted on yet. Each entry yields the
 * warning `<VAR> has no effect yet: <feature> is not implemented in this build` when in use.
 * Delete an entry when its feature lands.
 */
export const notImplementedSettings: readonly NotImplementedSetting[] =
  Object.freeze([
    {
      variable: "BACKEND_TYPE",
      feature: "the key-value store backend",
      isInUse: (settings) => settings.backendType === "kv",
      // kv is the default, so say how to get a working service rather than "has no effect".
      warning: () =>
        "BACKEND_TYPE=kv (the default when unset or empty): the key-value store backend is not implemented in this build; set BACKEND_TYPE=memory",
    },
    {
      variable: "USE_PUSHSTATS",
      feature: "the push-based metrics sink",
      // On by default; only an explicit USE_PUSHSTATS=true asks for it.
      isInUse: (settings, env) =>
        isSet(env, "USE_PUSHSTATS") && settings.usePushStats,
    },
    {
      variable: "USE_TAGGED_PUSHSTATS",
      feature: "the tagged push-based metrics sink",
      isInUse: (settings) => settings.useTaggedPushStats,
    },
    {
      variable: "USE_PULLSTATS",
      feature: "the pull-based metrics exporter",
      isInUse: (settings) => settings.usePullStats,
    },
    {
      variable: "EXTRA_TAGS",
      feature: "exporting statistics",
      isInUse: (settings) => Object.keys(settings.extraTags).length > 0,
    },
    {
      variable: "STATS_FLUSH_INTERVAL",
      feature: "exporting statistics",
      isInUse: (_settings, env) => isSet(env, "STATS_FLUSH_INTERVAL"),
    },
    {
      variable: "RESPONSE_DYNAMIC_METADATA",
      feature: "dynamic metadata in responses",
      isInUse: (settings) => settings.responseDynamicMetadata,
    },
  ]);

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
