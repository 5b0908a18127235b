import type { StatsManager } from "../stats/stats-manager.js";
import type { RateLimitConfig } from "./rate-limit-config.js";

/** One named config text: for the file provider the runtime key (e.g. `config.basic.yaml`). */
export interface ConfigFile {
  readonly name: string;
  readonly text: string;
}

/** Options of {@link loadConfig}. */
export interface LoadConfigOptions {
  /** Creates the stats handles of each rate limit at load time. */
  readonly statsManager: StatsManager;
  /** Allow several files for one domain (`MERGE_DOMAIN_CONFIG`). @defaultValue false */
  readonly mergeDomainConfig?: boolean;
}

/**
 * Parses and validates every file and builds one immutable config (all-or-nothing).
 *
 * @throws {@link ConfigError} with `<file name>: <problem>` for the first invalid file.
 */
export function loadConfig(
  _files: readonly ConfigFile[],
  _options: LoadConfigOptions,
): RateLimitConfig {
  throw new Error("not implemented yet");
}
