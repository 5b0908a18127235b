// The RLQS ledger shared through the kv store (BACKEND_TYPE=kv): two connections to the main
// kv instance (`KV_*`: single, sentinel or cluster, with its auth and TLS), one for commands
// and one for the change channel, under `CACHE_KEY_PREFIX`
// (backends/kv/kv-quota-ledger-commands.ts). Imported only with the kv backend.

import { connectKvQuotaLedgerCommands } from "../backends/kv/kv-quota-ledger-commands.js";
import { resolveKvInstanceOptions } from "../backends/kv/kv-options.js";
import { KvQuotaLedger } from "../rlqs/kv-quota-ledger.js";
import type { Settings } from "../settings/settings.js";
import type { AppContext } from "./app-context.js";
import { kvMainInstanceOptions, kvTlsOptions } from "./kv-cache.js";

/**
 * Builds the kv ledger of the RLQS service; {@link KvQuotaLedger.start} connects it.
 *
 * @throws the errors of `createKvCache` for the same settings (built first, so never here)
 */
export function createKvQuotaLedger(
  settings: Settings,
  context: AppContext,
): KvQuotaLedger {
  const logger = context.logger.child({ component: "rlqs-ledger" });
  return new KvQuotaLedger({
    storage: connectKvQuotaLedgerCommands(
      resolveKvInstanceOptions(kvMainInstanceOptions(settings)),
      kvTlsOptions(settings),
      settings.cacheKeyPrefix,
    ),
    reportIntervalMs: settings.rlqsReportIntervalMs,
    clock: context.clock,
    logger,
    stats: context.statsManager.store,
  });
}
