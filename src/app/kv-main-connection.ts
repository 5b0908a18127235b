// One extra ioredis connection to the main kv instance (`KV_*`: single, sentinel or cluster,
// with its auth and TLS), for the features that keep shared state beside the counters: the
// RLQS ledger and the run-time overrides. Imported only with the kv backend.

import { Cluster, Redis } from "ioredis";
import { toKvConnectionOptions } from "../backends/kv/kv-client-options.js";
import { resolveKvInstanceOptions } from "../backends/kv/kv-options.js";
import type { Settings } from "../settings/settings.js";
import { kvMainInstanceOptions, kvTlsOptions } from "./kv-cache.js";

/**
 * Opens a connection to the main kv instance as the counters' client reaches it (same
 * resolution of `KV_*`, same TLS), with the legacy reply mapping the stores expect.
 *
 * @throws the errors of `createKvCache` for the same settings (built first, so never here)
 */
export function connectMainKv(settings: Settings): Redis | Cluster {
  const connection = toKvConnectionOptions(
    resolveKvInstanceOptions(kvMainInstanceOptions(settings)),
    kvTlsOptions(settings),
  );
  // replyMapping is spelled out, as in kv-client.ts: the constructors' typing rejects an
  // optional one.
  return connection.kind === "cluster"
    ? new Cluster(
        connection.nodes.map(({ host, port }) => ({ host, port })),
        {
          ...connection.options,
          redisOptions: {
            ...connection.options.redisOptions,
            replyMapping: "legacy",
          },
        },
      )
    : new Redis({ ...connection.options, replyMapping: "legacy" });
}
