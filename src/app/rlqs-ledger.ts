// The RLQS ledger shared through the kv store (BACKEND_TYPE=kv): two ioredis connections to
// the main kv instance (`KV_*`: single, sentinel or cluster, with its auth and TLS), one for
// commands and one for the change channel, under `CACHE_KEY_PREFIX`. Imported only with the
// kv backend.

import { KvQuotaLedger } from "../rlqs/kv-quota-ledger.js";
import type { Settings } from "../settings/settings.js";
import type { AppContext } from "./app-context.js";
import { connectMainKv } from "./kv-main-connection.js";

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
  const client = connectMainKv(settings);
  const subscriber = connectMainKv(settings);
  // Connection errors are counted and logged once by the ledger when a command fails.
  client.on("error", () => undefined);
  subscriber.on("error", () => undefined);
  return new KvQuotaLedger({
    client,
    subscriber,
    keyPrefix: settings.cacheKeyPrefix,
    reportIntervalMs: settings.rlqsReportIntervalMs,
    clock: context.clock,
    logger,
    stats: context.statsManager.store,
  });
}
