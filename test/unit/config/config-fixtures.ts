// Shared helpers of the config unit tests: fixture files and request descriptors.
import { readFileSync } from "node:fs";
import { create } from "@bufbuild/protobuf";
import type { ConfigFile } from "../../../src/config/load-config.js";
import { loadConfig } from "../../../src/config/load-config.js";
import type { RateLimitConfig } from "../../../src/config/rate-limit-config.js";
import type {
  OverrideRateLimitUnit,
  RateLimitDescriptor,
} from "../../../src/proto.js";
import { RateLimitDescriptorSchema } from "../../../src/proto.js";
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

/**
 * Builds a request descriptor from `[key, value]` pairs, optionally with a limit override
 * (`requestsPerUnit`, unit numbered like `envoy.type.v3.RateLimitUnit`).
 */
export function descriptor(
  entries: readonly (readonly [string, string])[],
  override?: { requestsPerUnit: number; unit: OverrideRateLimitUnit },
): RateLimitDescriptor {
  return create(RateLimitDescriptorSchema, {
    entries: entries.map(([key, value]) => ({ key, value })),
    ...(override === undefined ? {} : { limit: override }),
  });
}
