// The run-time overrides shared through the kv store (BACKEND_TYPE=kv): two connections to
// the main kv instance (`KV_*`: single, sentinel or cluster, with its auth and TLS), one for
// commands and one for the change channel, under `CACHE_KEY_PREFIX`
// (backends/kv/kv-override-commands.ts). Imported only with the kv backend.

import { connectKvOverrideCommands } from "../backends/kv/kv-override-commands.js";
import { resolveKvInstanceOptions } from "../backends/kv/kv-options.js";
import { KvOverrideStore } from "../overrides/kv-override-store.js";
import type { OverrideTable } from "../overrides/override-table.js";
import type { Settings } from "../settings/settings.js";
import { compactHeapNow } from "../util/compact-heap.js";
import type { AppContext } from "./app-context.js";
import { kvMainInstanceOptions, kvTlsOptions } from "./kv-cache.js";

/**
 * Overrides loaded at the start from which the heap is compacted (`compactHeapNow`) once the
 * load is done, before the ports open. Reading a million leaves ~190 MiB of parsed chunks in
 * a heap V8 grew for them: RSS after the start was 435 MiB without the compaction and
 * 229 MiB with it, for 265–335 ms more start (bench/override-load.ts, docs/operations.md
 * "Cost"). main.ts compacts before the start, which is before this load. Below this count
 * the garbage is small and not worth the pause.
 */
const compactAfterOverrides = 50_000;

/**
 * Builds the kv store of the run-time overrides over `table`; {@link KvOverrideStore.start}
 * connects it and loads the overrides.
 *
 * @throws the errors of `createKvCache` for the same settings (built first, so never here)
 */
export function createKvOverrideStore(
  settings: Settings,
  context: AppContext,
  table: OverrideTable,
): KvOverrideStore {
  const logger = context.logger.child({ component: "overrides" });
  return new KvOverrideStore({
    table,
    storage: connectKvOverrideCommands(
      resolveKvInstanceOptions(kvMainInstanceOptions(settings)),
      kvTlsOptions(settings),
      settings.cacheKeyPrefix,
    ),
    auditLogMax: settings.adminAuditLogMax,
    syncIntervalMs: settings.adminOverridesSyncIntervalMs,
    clock: context.clock,
    logger,
    onFirstLoad: (overrides, ms) => {
      const compactStartMs = performance.now();
      const compacted = overrides >= compactAfterOverrides && compactHeapNow();
      logger.info(
        {
          overrides,
          ms: Math.round(ms),
          ...(compacted
            ? { compactMs: Math.round(performance.now() - compactStartMs) }
            : {}),
        },
        "overrides loaded from the store",
      );
    },
  });
}
