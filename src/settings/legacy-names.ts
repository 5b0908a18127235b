// The Go reference service's environment variable names and `BACKEND_TYPE` words, each with the
// neutral name of ours that replaces it. Never read for their values (the spec's identifiers stay
// the neutral ones): an operator who carries over a reference environment gets one warning per
// such variable, at start (`loadSettings` warnings) and in `ratelimit-config-check`, and
// docs/migration.md prints this table (`make docs`). Imports nothing, so cli/ may use it.

/** The environment as read here; `undefined` means unset (same shape as `SettingsEnv`). */
export type LegacyEnv = Readonly<Record<string, string | undefined>>;

/** One variable of the reference and the variable of ours that replaces it. */
export interface LegacyName {
  /** The reference's variable; `<M>` stands for a name chosen by the operator (a mogrifier). */
  readonly legacy: string;
  /** Our variable to set instead, with the same `<M>` when `legacy` has one. */
  readonly replacement: string;
  /**
   * Where the meaning, default or value format differs, in one sentence; absent when the
   * variable means exactly the same under its new name.
   */
  readonly note?: string;
}

/** Placeholder for an operator-chosen part of a variable name. */
const placeholder = "<M>";

const same = (
  legacyPrefix: string,
  ourPrefix: string,
  suffixes: readonly string[],
): LegacyName[] =>
  suffixes.map((suffix) => ({
    legacy: `${legacyPrefix}${suffix}`,
    replacement: `${ourPrefix}${suffix}`,
  }));

const timeoutNote =
  "The reference only dials with it; here it is also the longest a connection with pending commands may stay silent.";
const poolSizeNote =
  "ioredis multiplexes one connection per node, so here it only caps cluster pipeline parallelism.";
const poolOnEmptyNote =
  "Default CREATE (the spec's) instead of WAIT; CREATE and ERROR are accepted here, the reference refuses them at start.";
const waitDurationNote =
  "In the reference's README but not read by its code; here it is how long ERROR waits for a connection.";
const pipelineWindowNote =
  "The reference uses it in cluster mode only; here it batches commands for every KV_TYPE.";

/**
 * Every environment variable of the reference whose name differs from ours, in table order
 * (kv store, memcached, statistics). Variables whose names are the same in both (`PORT`,
 * `RUNTIME_*`, `CACHE_KEY_PREFIX`, …) are not listed: they are read as they are.
 */
export const legacyNames: readonly LegacyName[] = Object.freeze(
  [
    { legacy: "REDIS_SOCKET_TYPE", replacement: "KV_SOCKET_TYPE" },
    { legacy: "REDIS_TYPE", replacement: "KV_TYPE" },
    { legacy: "REDIS_URL", replacement: "KV_URL" },
    {
      legacy: "REDIS_POOL_SIZE",
      replacement: "KV_POOL_SIZE",
      note: poolSizeNote,
    },
    { legacy: "REDIS_TIMEOUT", replacement: "KV_TIMEOUT", note: timeoutNote },
    {
      legacy: "REDIS_POOL_ON_EMPTY_BEHAVIOR",
      replacement: "KV_POOL_ON_EMPTY_BEHAVIOR",
      note: poolOnEmptyNote,
    },
    {
      legacy: "REDIS_POOL_ON_EMPTY_WAIT_DURATION",
      replacement: "KV_POOL_ON_EMPTY_WAIT_DURATION",
      note: waitDurationNote,
    },
    {
      legacy: "REDIS_PIPELINE_WINDOW",
      replacement: "KV_PIPELINE_WINDOW",
      note: pipelineWindowNote,
    },
    {
      legacy: "REDIS_PIPELINE_LIMIT",
      replacement: "KV_PIPELINE_LIMIT",
      note: "Deprecated in both: no effect.",
    },
    ...same("REDIS_", "KV_", [
      "CLUSTER_PIPELINE_PARALLELISM",
      "TLS",
      "TLS_CLIENT_CERT",
      "TLS_CLIENT_KEY",
      "TLS_CACERT",
      "TLS_SKIP_HOSTNAME_VERIFICATION",
      "AUTH",
      "SENTINEL_AUTH",
      "HEALTH_CHECK_ACTIVE_CONNECTION",
      "STARTUP_INITIAL_INTERVAL",
      "STARTUP_MAX_INTERVAL",
      "STARTUP_MAX_ELAPSED_TIME",
      "PERSECOND",
      "PERSECOND_SOCKET_TYPE",
      "PERSECOND_TYPE",
      "PERSECOND_URL",
    ]),
    {
      legacy: "REDIS_PERSECOND_POOL_SIZE",
      replacement: "KV_PERSECOND_POOL_SIZE",
      note: poolSizeNote,
    },
    {
      legacy: "REDIS_PERSECOND_TIMEOUT",
      replacement: "KV_PERSECOND_TIMEOUT",
      note: timeoutNote,
    },
    {
      legacy: "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
      replacement: "KV_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
      note: poolOnEmptyNote,
    },
    {
      legacy: "REDIS_PERSECOND_POOL_ON_EMPTY_WAIT_DURATION",
      replacement: "KV_PERSECOND_POOL_ON_EMPTY_WAIT_DURATION",
      note: waitDurationNote,
    },
    {
      legacy: "REDIS_PERSECOND_PIPELINE_WINDOW",
      replacement: "KV_PERSECOND_PIPELINE_WINDOW",
      note: pipelineWindowNote,
    },
    {
      legacy: "REDIS_PERSECOND_PIPELINE_LIMIT",
      replacement: "KV_PERSECOND_PIPELINE_LIMIT",
      note: "Deprecated in both: no effect.",
    },
    ...same("REDIS_", "KV_", [
      "PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
      "PERSECOND_TLS",
      "PERSECOND_AUTH",
      "PERSECOND_SENTINEL_AUTH",
    ]),
    ...same("MEMCACHE_", "MC_", [
      "HOST_PORT",
      "SRV",
      "SRV_REFRESH",
      "MAX_IDLE_CONNS",
      "TLS",
      "TLS_CLIENT_CERT",
      "TLS_CLIENT_KEY",
      "TLS_CACERT",
      "TLS_SKIP_HOSTNAME_VERIFICATION",
    ]),
    { legacy: "USE_STATSD", replacement: "USE_PUSHSTATS" },
    ...same("STATSD_", "PUSHSTATS_", ["HOST", "PORT", "PROTOCOL"]),
    { legacy: "USE_DOG_STATSD", replacement: "USE_TAGGED_PUSHSTATS" },
    {
      legacy: "USE_DOG_STATSD_MOGRIFIERS",
      replacement: "TAGGED_PUSHSTATS_MOGRIFIERS",
    },
    {
      legacy: "DOG_STATSD_MOGRIFIERS",
      replacement: "TAGGED_PUSHSTATS_MOGRIFIERS",
      note: "The spelling of the reference's README, which its code does not read.",
    },
    {
      legacy: `DOG_STATSD_MOGRIFIER_${placeholder}_PATTERN`,
      replacement: `TAGGED_PUSHSTATS_MOGRIFIERS_${placeholder}_PATTERN`,
      note: "A JavaScript regular expression instead of Go's RE2 (the common syntax is the same).",
    },
    {
      legacy: `DOG_STATSD_MOGRIFIER_${placeholder}_NAME`,
      replacement: `TAGGED_PUSHSTATS_MOGRIFIERS_${placeholder}_NAME`,
    },
    {
      legacy: `DOG_STATSD_MOGRIFIER_${placeholder}_TAGS`,
      replacement: `TAGGED_PUSHSTATS_MOGRIFIERS_${placeholder}_TAGS`,
    },
    { legacy: "USE_PROMETHEUS", replacement: "USE_PULLSTATS" },
    ...same("PROMETHEUS_", "PULLSTATS_", ["ADDR", "PATH"]),
    {
      legacy: "PROMETHEUS_MAPPER_YAML",
      replacement: "PULLSTATS_MAPPER_YAML",
      note: "A bad file stops start-up here with its line; the reference ignores it.",
    },
    {
      legacy: "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
      replacement: "PULLSTATS_RESPONSE_TIME_AS_MILLISECONDS",
    },
  ].map((entry: LegacyName) => Object.freeze(entry)),
);

/**
 * The reference's `BACKEND_TYPE` words and ours: `redis` → `kv`, `memcache` → `mc`. A legacy
 * word is refused (never taken as ours), with a problem line naming the word to use.
 */
export const legacyBackendTypes: ReadonlyMap<string, string> = new Map([
  ["redis", "kv"],
  ["memcache", "mc"],
]);

/** One legacy variable found in an environment. */
export interface LegacyVariableFound {
  /** The variable as set, e.g. `DOG_STATSD_MOGRIFIER_rule_NAME`. */
  readonly variable: string;
  /** Our variable to set instead, with the operator's part filled in. */
  readonly replacement: string;
  /** The table entry it matched. */
  readonly entry: LegacyName;
}

const escapeRegExp = (text: string): string =>
  text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

const families = legacyNames
  .filter((entry) => entry.legacy.includes(placeholder))
  .map((entry) => {
    const [before = "", after = ""] = entry.legacy.split(placeholder);
    return {
      entry,
      pattern: new RegExp(
        `^${escapeRegExp(before)}(.+)${escapeRegExp(after)}$`,
      ),
    };
  });

/**
 * Every legacy variable set in `env` (set to anything, "" included): plain names in table order,
 * then the mogrifier families' variables in name order. Looks at the names only: lists the keys
 * and their property descriptors, never reading a value through `env[name]`.
 */
export function findLegacyVariables(env: LegacyEnv): LegacyVariableFound[] {
  const names = Object.keys(env)
    .filter(
      (name) => Object.getOwnPropertyDescriptor(env, name)?.value !== undefined,
    )
    .sort();
  const present = new Set(names);
  const found: LegacyVariableFound[] = [];
  for (const entry of legacyNames) {
    if (present.has(entry.legacy))
      found.push({
        variable: entry.legacy,
        replacement: entry.replacement,
        entry,
      });
  }
  for (const name of names) {
    for (const { entry, pattern } of families) {
      const match = pattern.exec(name);
      if (match === null) continue;
      found.push({
        variable: name,
        replacement: entry.replacement.replace(placeholder, match[1] ?? ""),
        entry,
      });
      break;
    }
  }
  return found;
}

/**
 * One warning per legacy variable set in `env` (see {@link findLegacyVariables}):
 * `<VAR> is the Go reference's name and is ignored: set <OURS>`, plus
 * ` (see docs/migration.md)` when the table has a note for it.
 */
export function legacyNameWarnings(env: LegacyEnv): string[] {
  return findLegacyVariables(env).map(
    ({ variable, replacement, entry }) =>
      `${variable} is the Go reference's name and is ignored: set ${replacement}${
        entry.note === undefined ? "" : " (see docs/migration.md)"
      }`,
  );
}
