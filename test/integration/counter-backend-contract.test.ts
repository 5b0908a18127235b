import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KvCounterBackend } from "../../src/backends/kv/kv-rate-limit-cache.js";
import { McCounterBackend } from "../../src/backends/mc/mc-rate-limit-cache.js";
import { MemoryCounterBackend } from "../../src/backends/memory/memory-rate-limit-cache.js";
import type {
  CounterBackend,
  CounterSlot,
} from "../../src/limiter/counter-backend.js";
import { FakeClock } from "../helpers/fake-clock.js";
import {
  startMemcached,
  type MemcachedServer,
} from "../helpers/memcached-server.js";
import {
  startRedisCluster,
  startRedisServer,
  type RedisCluster,
  type RedisServer,
} from "../helpers/redis-server.js";

// The CounterBackend contract, run once against every backend on a real store: what the
// decision pipeline (src/limiter/pipeline.ts) relies on from increment, peek, add and the
// atomic all-or-nothing charge. The decisions themselves are tested once, in the unit tests of
// the pipeline; here only the I/O is.

const now = 1_700_000_040;
const silent = pino({ level: "silent" });

/** A counter slot as the pipeline builds it (60 s window, expiration 60 s). */
function slot(
  cacheKey: string,
  increment: number,
  previousCacheKey?: string,
): CounterSlot {
  return {
    cacheKey,
    previousCacheKey,
    perSecond: false,
    expirationSeconds: previousCacheKey === undefined ? 60 : 120,
    windowSeconds: 60,
    windowEndSeconds: now - (now % 60) + 60,
    sliding: previousCacheKey !== undefined,
    requestsPerUnit: 5,
    shadowMode: false,
    increment,
    current: 0,
    previous: 0,
  };
}

interface Subject {
  readonly name: string;
  readonly backend: () => CounterBackend;
  /** Whether a write may land after `increment` answers (mc: background increments). */
  readonly deferred: boolean;
  /** Whether `chargeAllOrNothing` is atomic on this store (else absent or undefined). */
  readonly atomic: boolean;
}

let redis: RedisServer;
let cluster: RedisCluster;
let memcached: MemcachedServer;
const clock = new FakeClock(now);
const backends: CounterBackend[] = [];

beforeAll(async () => {
  [redis, cluster, memcached] = await Promise.all([
    startRedisServer(),
    startRedisCluster(3),
    startMemcached(),
  ]);
}, 60_000);

afterAll(async () => {
  await Promise.all(backends.map((b) => b.close()));
  await Promise.all([redis.stop(), cluster.stop(), memcached.stop()]);
});

const subjects: Subject[] = [
  {
    name: "memory",
    backend: () => new MemoryCounterBackend({ clock }),
    deferred: false,
    atomic: true,
  },
  {
    name: "kv single",
    backend: () =>
      new KvCounterBackend({
        main: { type: "single", socketType: "tcp", url: redis.address },
        logger: silent,
      }),
    deferred: false,
    atomic: true,
  },
  {
    name: "kv cluster",
    backend: () =>
      new KvCounterBackend({
        main: { type: "cluster", socketType: "tcp", url: cluster.url },
        logger: silent,
      }),
    deferred: false,
    atomic: false,
  },
  {
    name: "mc",
    backend: () =>
      new McCounterBackend({
        clock,
        logger: silent,
        hostPorts: [memcached.address],
      }),
    deferred: true,
    atomic: false,
  },
];

let next = 0;
/** A cache key no earlier test used. */
const freshKey = (name: string): string =>
  `contract_${name.replace(" ", "_")}_${String(next++)}_${String(now)}`;

describe.each(subjects)("CounterBackend contract: $name", (subject) => {
  let backend: CounterBackend;
  beforeAll(async () => {
    backend = subject.backend();
    backends.push(backend);
    await backend.start?.();
  });

  it("increment adds to a new counter and answers the value after it", async () => {
    const key = freshKey(subject.name);
    const first = slot(key, 3);
    await backend.increment([first], now);
    expect(first.current).toBe(3);
    await backend.flush();
    const second = slot(key, 2);
    await backend.increment([second], now);
    expect(second.current).toBe(5);
    await backend.flush();
  });

  it("peek reads current and previous windows and changes nothing", async () => {
    const previousKey = freshKey(subject.name);
    const key = freshKey(subject.name);
    await backend.increment([slot(previousKey, 4), slot(key, 1)], now);
    await backend.flush();
    const read = slot(key, 9, previousKey);
    await backend.peek([read]);
    expect([read.current, read.previous]).toEqual([1, 4]);
    const again = slot(key, 9, previousKey);
    await backend.peek([again]);
    expect([again.current, again.previous]).toEqual([1, 4]);
    const absent = slot(freshKey(subject.name), 1);
    await backend.peek([absent]);
    expect(absent.current).toBe(0);
  });

  it("increment of a sliding window reads the previous window's counter", async () => {
    const previousKey = freshKey(subject.name);
    const key = freshKey(subject.name);
    await backend.increment([slot(previousKey, 7)], now);
    await backend.flush();
    const sliding = slot(key, 1, previousKey);
    await backend.increment([sliding], now);
    expect([sliding.current, sliding.previous]).toEqual([1, 7]);
    await backend.flush();
  });

  it("add waits for the write, and a negative add takes it back", async () => {
    const key = freshKey(subject.name);
    await backend.increment([slot(key, 2)], now);
    await backend.flush();
    const charge = slot(key, 3);
    await backend.peek([charge]);
    await backend.add([charge], now);
    expect(charge.current).toBe(5);
    charge.increment = -charge.increment;
    await backend.add([charge], now);
    const read = slot(key, 0);
    await backend.peek([read]);
    expect(read.current).toBe(2);
  });

  it("a negative add (a refund) never goes below 0 and never creates a counter", async () => {
    const key = freshKey(subject.name);
    await backend.increment([slot(key, 3)], now);
    await backend.flush();
    const refund = slot(key, -2);
    await backend.add([refund], now);
    expect(refund.current).toBe(1);
    const tooMuch = slot(key, -5);
    await backend.add([tooMuch], now);
    expect(tooMuch.current).toBe(0);
    const read = slot(key, 0);
    await backend.peek([read]);
    expect(read.current).toBe(0);
    // The counter still counts from 0 (not from -4).
    const again = slot(key, 1);
    await backend.increment([again], now);
    expect(again.current).toBe(1);
    await backend.flush();
    // A refund of a counter that does not exist leaves it absent: a later hit starts at 1.
    const missing = freshKey(subject.name);
    const nothing = slot(missing, -1);
    await backend.add([nothing], now);
    expect(nothing.current).toBe(0);
    const first = slot(missing, 1);
    await backend.increment([first], now);
    expect(first.current).toBe(1);
    await backend.flush();
  });

  it("chargeAllOrNothing charges every counter or none, where the store can", async () => {
    const a = freshKey(subject.name);
    const b = freshKey(subject.name);
    // The rule kv's script runs in the store, given to memory as the check.
    const fits = (slots: readonly CounterSlot[]): boolean =>
      slots.every((x) => x.current + x.increment <= x.requestsPerUnit);
    if (!subject.atomic) {
      expect(
        backend.chargeAllOrNothing?.([slot(a, 1), slot(b, 1)], now, fits),
      ).toBeUndefined();
      // Nothing was read or written.
      const read = [slot(a, 0), slot(b, 0)];
      await backend.peek(read);
      expect(read.map((s) => s.current)).toEqual([0, 0]);
      return;
    }
    await backend.increment([slot(b, 5)], now);
    const refused = [slot(a, 1), slot(b, 1)];
    expect(await backend.chargeAllOrNothing?.(refused, now, fits)).toBe(false);
    // Answered with the values before the request.
    expect(refused.map((s) => s.current)).toEqual([0, 5]);
    const read = [slot(a, 0), slot(b, 0)];
    await backend.peek(read);
    expect(read.map((s) => s.current)).toEqual([0, 5]);
    const c = freshKey(subject.name);
    const admitted = [slot(a, 1), slot(c, 2)];
    expect(await backend.chargeAllOrNothing?.(admitted, now, fits)).toBe(true);
    expect(admitted.map((s) => s.current)).toEqual([1, 2]);
  });
});
