// One extra ioredis connection to a kv instance (single, sentinel or cluster, with its auth and
// TLS), for the features that keep shared state beside the counters: the RLQS ledger and the
// run-time overrides (kv-override-commands.ts, kv-quota-ledger-commands.ts).

import { Cluster, Redis } from "ioredis";
import { toKvConnectionOptions } from "./kv-client-options.js";
import type { KvTlsOptions, ResolvedKvInstanceOptions } from "./kv-options.js";

/**
 * Opens a connection to an instance as the counters' client reaches it (same resolution of
 * `KV_*`, same TLS, and the same reconnect on a `READONLY`, `LOADING` or `MASTERDOWN` reply,
 * with a new lookup of the host name: `isFailoverReply`), with the legacy reply mapping the
 * stores expect. Lazy: the first command or `connect()` connects it.
 */
export function openKvConnection(
  instance: ResolvedKvInstanceOptions,
  tls: KvTlsOptions | undefined,
): Redis | Cluster {
  const connection = toKvConnectionOptions(instance, tls);
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
