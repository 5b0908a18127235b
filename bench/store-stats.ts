// The counter store's own statistics, read the way an operator would: redis `INFO
// commandstats` and memcached `stats`. The accuracy and hot-key benches count store
// operations per decision from these, never from the service's own statistics, so a counting
// fault in the service cannot hide in the figure.
import { connect } from "node:net";
import { Redis } from "ioredis";
import type { Store } from "../src/conformance/processes.js";

/** The memcached `stats` counters that are one command (or one key of a multi-get) each. */
const mcOperations = [
  "cmd_get",
  "cmd_set",
  "cmd_touch",
  "incr_hits",
  "incr_misses",
  "decr_hits",
  "decr_misses",
  "delete_hits",
  "delete_misses",
] as const;

/** Calls per command from redis `INFO commandstats` (`incrby` → calls). */
async function redisCommandCalls(
  address: string,
): Promise<Map<string, number>> {
  const client = new Redis(`redis://${address}`, { lazyConnect: false });
  try {
    const info = await client.info("commandstats");
    const calls = new Map<string, number>();
    for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm))
      calls.set(m[1]!, Number(m[2]));
    return calls;
  } finally {
    client.disconnect();
  }
}

/** memcached's `stats` as name → number (non-numeric values dropped). */
async function memcachedStats(address: string): Promise<Map<string, number>> {
  const [host, port] = address.split(":");
  const text = await new Promise<string>((resolve, reject) => {
    const socket = connect(Number(port), host);
    let data = "";
    socket.on("data", (chunk: Buffer) => {
      data += chunk.toString();
      if (data.endsWith("END\r\n")) {
        socket.end();
        resolve(data);
      }
    });
    socket.on("error", reject);
    socket.write("stats\r\n");
  });
  const stats = new Map<string, number>();
  for (const m of text.matchAll(/^STAT (\S+) (\d+)\r?$/gm))
    stats.set(m[1]!, Number(m[2]));
  return stats;
}

/** Store operations so far, in total and by command. */
export interface StoreOperations {
  /**
   * kv: every command's calls except the statistics reads themselves (`info`) and the
   * client's handshake (`client`, `hello`); mc: the sum of {@link mcOperations}.
   */
  readonly total: number;
  /** Increments alone: kv `incrby` (+ `incr`), mc `incr_hits + incr_misses`. */
  readonly increments: number;
  /** Calls by command name (kv) or by `stats` counter (mc). */
  readonly byCommand: ReadonlyMap<string, number>;
}

/**
 * Reads the store's operation counters (a new connection per read).
 *
 * @throws Error when the store does not answer
 */
export async function storeOperations(store: Store): Promise<StoreOperations> {
  if (store.kind === "kv") {
    const calls = await redisCommandCalls(store.address);
    let total = 0;
    for (const [name, n] of calls)
      if (!["info", "client", "hello", "command"].includes(name)) total += n;
    return {
      total,
      increments: (calls.get("incrby") ?? 0) + (calls.get("incr") ?? 0),
      byCommand: calls,
    };
  }
  const stats = await memcachedStats(store.address);
  const byCommand = new Map<string, number>();
  let total = 0;
  for (const name of mcOperations) {
    const n = stats.get(name) ?? 0;
    byCommand.set(name, n);
    total += n;
  }
  return {
    total,
    increments: (stats.get("incr_hits") ?? 0) + (stats.get("incr_misses") ?? 0),
    byCommand,
  };
}

/** `after − before`, per command (commands that did not move left out). */
export function operationsBetween(
  before: StoreOperations,
  after: StoreOperations,
): StoreOperations {
  const byCommand = new Map<string, number>();
  for (const [name, n] of after.byCommand) {
    const d = n - (before.byCommand.get(name) ?? 0);
    if (d !== 0 && !["info", "client", "hello", "command"].includes(name))
      byCommand.set(name, d);
  }
  return {
    total: after.total - before.total,
    increments: after.increments - before.increments,
    byCommand,
  };
}
