// Concurrent creates of one fresh counter on a real memcached: with many connections sending
// the increment-with-initial-value for the same missing key at once, memcached answers some
// losers NOT_STORED (status 0x05) without counting them. The connection sends those again, so
// every increment counts exactly once and answers a distinct value (issue 33 item 1: exact
// counting on memcached).
import { afterAll, beforeAll, expect, it } from "vitest";
import { McConnection } from "../../src/backends/mc/mc-connection.js";
import {
  startMemcached,
  type MemcachedServer,
} from "../helpers/memcached-server.js";

const connectionCount = 32;
const keyCount = 2000;

let memcached: MemcachedServer;
let connections: McConnection[] = [];

beforeAll(async () => {
  // memcached's default 4 worker threads: connections on different threads race.
  memcached = await startMemcached({ threads: 4 });
  connections = Array.from(
    { length: connectionCount },
    () =>
      new McConnection(
        {
          address: memcached.address,
          host: memcached.host,
          port: memcached.port,
        },
        { timeoutMs: 10_000, connectTimeoutMs: 5000, tls: undefined },
      ),
  );
});

afterAll(async () => {
  await Promise.all(connections.map((c) => c.shutdown(1000)));
  await memcached.stop();
});

function increment(
  connection: McConnection,
  key: string,
): Promise<[Error | undefined, number | undefined]> {
  return new Promise((resolve) => {
    connection.incrementMultiValues(
      [{ key, hits: 1, expiration: 60 }],
      (err, values) => {
        resolve([err, values[0]]);
      },
    );
  });
}

it(`${String(connectionCount)} connections creating each of ${String(keyCount)} fresh counters at once: every increment counts once`, async () => {
  const prefix = `race_${String(process.pid)}_${String(Date.now())}_`;
  // Rounds of 50 keys in flight at once, each key sent on every connection.
  for (let k = 0; k < keyCount; k += 50) {
    const keys = Array.from(
      { length: 50 },
      (_, i) => `${prefix}${String(k + i)}`,
    );
    const perKey = await Promise.all(
      keys.map((key) =>
        Promise.all(connections.map((c) => increment(c, key))).then(
          (results) => ({ key, results }),
        ),
      ),
    );
    for (const { key, results } of perKey) {
      const errors = results.flatMap(([err]) =>
        err === undefined ? [] : [err.message],
      );
      expect(errors, key).toEqual([]);
      const values = results
        .map(([, value]) => value ?? 0)
        .sort((a, b) => a - b);
      // Each increment answered the count after it: 1, 2, … connectionCount, once each.
      expect(values, key).toEqual(
        Array.from({ length: connectionCount }, (_, i) => i + 1),
      );
    }
  }
}, 120_000);
