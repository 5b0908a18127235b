// Shared helpers of the config unit tests: fixture files (descriptors: test/helpers/requests.ts).
import { readFileSync } from "node:fs";
import type { ConfigFile } from "../../../src/config/load-config.js";
import { loadConfig } from "../../../src/config/load-config.js";
import type { RateLimitConfig } from "../../../src/config/rate-limit-config.js";
import type { StatsManager } from "../../../src/stats/stats-manager.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";

const fixtureDir = new URL("../../fixtures/config/", import.meta.url);

/** Returns `test/fixtures/config/<name>` as a named config file (the name is the file name). */
export function fixture(name: string): ConfigFile {
  return { name, text: readFileSync(new URL(name, fixtureDir), "utf8") };
}

/** Loads fixtures into a config with a fresh stats manager. */
export function loadFixtures(
  names: readonly string[],
  mergeDomainConfig = false,
): { config: RateLimitConfig; stats: StatsManager } {
  const stats = createStatsManager();
  const config = loadConfig(names.map(fixture), {
    statsManager: stats,
    mergeDomainConfig,
  });
  return { config, stats };
}
