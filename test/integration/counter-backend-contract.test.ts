import { Cluster, type Redis } from "ioredis";
import { Client } from "memjs";
import { silentLogger } from "../helpers/silent-logger.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KvCounterBackend } from "../../src/backends/kv/kv-counter-backend.js";
import { McCounterBackend } from "../../src/backends/mc/mc-counter-backend.js";
import { MemoryCounterBackend } from "../../src/backends/memory/memory-counter-backend.js";
import type {
  BucketSlot,
  CounterBackend,
  CounterSlot,
} from "../../src/limiter/counter-backend.js";
import {
  gcraDecide,
  resolveGcraParams,
  type GcraDecision,
  type GcraParams,
} from "../../src/limiter/gcra.js";
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
import { mulberry32 } from "../helpers/seeded-random.js";

// The CounterBackend contract, run once against every backend on a real store: what the
// decision pipeline (src/limiter/pipeline.ts) relies on from increment, peek, add, the
// atomic all-or-nothing charge and token buckets (takeTokens: each backend must decide exactly
// as the pure gcraDecide on one in-memory TAT). The decisions themselves are tested once, in
// the unit tests of the pipeline; here only the I/O is.

const now = 1_700_000_040;
const silent = silentLogger();

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

/**
 * A token bucket of the contract's sequences: 6 per minute, burst 4, so T = 10 s and C = 40 s.
 * Times move in steps of T / 5 = 2 s from a whole second, so every TAT ahead of now is at
 * least 2 s ahead: the stores expire keys on their own clock (kv `PX`, mc seconds), which
 * stands still while the sequence moves the request time, and 2 s outlasts a sequence.
 */
const tb: GcraParams = resolveGcraParams({
  requestsPerUnit: 6,
  windowSeconds: 60,
  burst: 4,
});
const tbStepUs = tb.emissionIntervalUs / 5;
const nowUs = now * 1_000_000;

/** A token-bucket slot as the pipeline builds it. */
function bucket(
  cacheKey: string,
  increment: number,
  params: GcraParams = tb,
  perSecond = false,
): BucketSlot {
  return {
    cacheKey,
    perSecond,
    tokenBucket: params,
    increment,
    decision: undefined,
  };
}

/** Runs one `takeTokens` call and returns the decisions, in slot order. */
async function take(
  backend: CounterBackend,
  slots: BucketSlot[],
  atUs: number,
): Promise<GcraDecision[]> {
  await backend.takeTokens(slots, atUs);
  return slots.map((s) => s.decision!);
}

/** Raw access to what a remote store holds at a key (a second, independent client). */
interface RawStore {
  get(key: string): Promise<string | null>;
  set(key: string, value: string): Promise<void>;
  /** kv: makes every instance forget its scripts (`SCRIPT FLUSH`), as a restart would. */
  flushScripts?(): Promise<void>;
  /** kv: stores a hash at `key`, which a script's GET fails on (WRONGTYPE). */
  setWrongType?(key: string): Promise<void>;
  close(): void;
}

interface Subject {
  readonly name: string;
  readonly backend: () => CounterBackend;
  /** Whether a write may land after `increment` answers (mc: background increments). */
  readonly deferred: boolean;
  /** Whether `chargeAllOrNothing` is atomic on this store (else absent or undefined). */
  readonly atomic: boolean;
  /** An independent client of the store; undefined for memory (in process). */
  readonly raw?: () => RawStore;
}

/** Raw access through `client`; `servers`: every instance, whose scripts a flush forgets. */
function redisRaw(
  client: Redis | Cluster,
  servers: () => readonly RedisServer[],
): RawStore {
  return {
    get: (key) => client.get(key),
    set: async (key, value) => {
      await client.set(key, value, "EX", 600);
    },
    flushScripts: async () => {
      await Promise.all(
        servers().map(async (server) => {
          const admin = server.client();
          try {
            expect(await admin.script("FLUSH")).toBe("OK");
          } finally {
            admin.disconnect();
          }
        }),
      );
    },
    setWrongType: async (key) => {
      await client.hset(key, "field", "1");
    },
    close: () => {
      client.disconnect();
    },
  };
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
    raw: () => redisRaw(redis.client(), () => [redis]),
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
    raw: () =>
      redisRaw(
        new Cluster(
          cluster.nodes.map((node) => ({ host: "127.0.0.1", port: node.port })),
        ),
        () => cluster.nodes,
      ),
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
    raw: () => memjsRaw(memcached),
  },
];

function memjsRaw(server: MemcachedServer): RawStore {
  const client = Client.create(server.address, {
    retries: 1,
    logger: { log: () => undefined },
  });
  return {
    get: async (key) => {
      const { value } = await client.get(key);
      return value === null ? null : value.toString();
    },
    set: async (key, value) => {
      await client.set(key, value, { expires: 600 });
    },
    close: () => {
      client.close();
    },
  };
}

let next = 0;
/** A cache key no earlier test used. */
const freshKey = (name: string): string =>
  `contract_${name.replace(" ", "_")}_${String(next++)}_${String(now)}`;

describe.each(subjects)("CounterBackend contract: $name", (subject) => {
  let backend: CounterBackend;
  let raw: RawStore | undefined;
  beforeAll(async () => {
    backend = subject.backend();
    backends.push(backend);
    await backend.start?.();
    raw = subject.raw?.();
  });
  afterAll(() => {
    raw?.close();
  });

  /** What the store holds at `key`, read by the independent client (kv and mc only). */
  async function stored(key: string): Promise<string | null> {
    if (raw === undefined) throw new Error("memory has no raw client");
    return raw.get(key);
  }

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

  it("a negative add (a refund) of a sliding window leaves previous alone", async () => {
    const previousKey = freshKey(subject.name);
    const key = freshKey(subject.name);
    await backend.increment([slot(previousKey, 4), slot(key, 3)], now);
    await backend.flush();
    // The pipeline does not read the previous window for a refund: previous stays as given.
    const refund = slot(key, -1, previousKey);
    refund.previous = 0;
    await backend.add([refund], now);
    expect([refund.current, refund.previous]).toEqual([2, 0]);
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

  it("takeTokens decides seeded sequences exactly as gcraDecide on an in-memory TAT", async () => {
    let admitted = 0;
    let refused = 0;
    let refunds = 0;
    for (let seed = 1; seed <= 4; seed++) {
      const random = mulberry32(seed);
      const pick = <T>(items: readonly T[]): T =>
        items[Math.floor(random() * items.length)]!;
      const keys = [0, 1, 2].map(() => freshKey(subject.name));
      const model = new Map<string, number>();
      let at = nowUs;
      for (let i = 0; i < 120; i++) {
        at += pick([0, 0, 0, 1, 1, 2, 5, 10, 25]) * tbStepUs;
        // One to three distinct buckets per call, in a random order.
        const chosen = keys
          .map((key) => ({ key, order: random() }))
          .sort((a, b) => a.order - b.order)
          .slice(0, 1 + Math.floor(random() * 3));
        const slots = chosen.map(({ key }) =>
          bucket(key, pick([-2, -1, 0, 0, 1, 1, 2, 3])),
        );
        const expected = slots.map((slot) => {
          const decision = gcraDecide(
            model.get(slot.cacheKey),
            at,
            slot.increment,
            tb,
          );
          if (decision.newTatUs !== undefined)
            model.set(slot.cacheKey, decision.newTatUs);
          if (slot.increment > 0) {
            if (decision.allowed) admitted++;
            else refused++;
          }
          if (slot.increment < 0 && decision.newTatUs !== undefined) refunds++;
          return decision;
        });
        expect(
          await take(backend, slots, at),
          `seed ${seed} step ${i}`,
        ).toEqual(expected);
      }
    }
    // The sequences reached every branch: admissions, refusals, refunds that moved a TAT.
    expect(admitted).toBeGreaterThan(100);
    expect(refused).toBeGreaterThan(50);
    expect(refunds).toBeGreaterThan(20);
  });

  it("takeTokens with 0 hits reads the bucket and writes nothing", async () => {
    const key = freshKey(subject.name);
    const sizeBefore =
      backend instanceof MemoryCounterBackend ? backend.size : 0;
    const [empty] = await take(backend, [bucket(key, 0)], nowUs);
    expect(empty).toEqual(gcraDecide(undefined, nowUs, 0, tb));
    expect(empty!.limitRemaining).toBe(4);
    if (backend instanceof MemoryCounterBackend)
      expect(backend.size).toBe(sizeBefore);
    else expect(await stored(key)).toBeNull();
    const [taken] = await take(backend, [bucket(key, 3)], nowUs);
    const tat = nowUs + 3 * tb.emissionIntervalUs;
    expect(taken!.tatUs).toBe(tat);
    const value = raw === undefined ? undefined : await stored(key);
    const later = nowUs + tbStepUs;
    const [check] = await take(backend, [bucket(key, 0)], later);
    expect(check).toEqual(gcraDecide(tat, later, 0, tb));
    expect(check!.limitRemaining).toBe(1);
    if (raw !== undefined) expect(await stored(key)).toBe(value);
    const [again] = await take(backend, [bucket(key, 1)], later);
    expect(again!.tatUs).toBe(tat + tb.emissionIntervalUs);
  });

  it("takeTokens refunds never take a bucket above full", async () => {
    const key = freshKey(subject.name);
    // A refund on an absent key: a full bucket, nothing written.
    const [refund] = await take(backend, [bucket(key, -2)], nowUs);
    expect(refund).toEqual(gcraDecide(undefined, nowUs, -2, tb));
    expect([refund!.allowed, refund!.limitRemaining]).toEqual([true, 4]);
    if (raw !== undefined) expect(await stored(key)).toBeNull();
    await take(backend, [bucket(key, 1)], nowUs);
    const [back] = await take(backend, [bucket(key, -3)], nowUs);
    expect([back!.allowed, back!.tatUs, back!.limitRemaining]).toEqual([
      true,
      nowUs,
      4,
    ]);
    // Full, not fuller: four hits at once, then no fifth.
    const burst = [1, 1, 1, 1, 1].map(() => bucket(key, 1));
    const decisions = await take(backend, burst, nowUs);
    expect(decisions.map((d) => d.allowed)).toEqual([
      true,
      true,
      true,
      true,
      false,
    ]);
  });

  it("takeTokens reads a TAT stored as decimal µs by another backend, and stores one", async () => {
    if (raw === undefined) return;
    const key = freshKey(subject.name);
    const tat = nowUs + 25 * tbStepUs; // 50 s ahead: 1 hit taken beyond the capacity
    await raw.set(key, String(tat));
    const [check] = await take(backend, [bucket(key, 0)], nowUs);
    expect(check).toEqual(gcraDecide(tat, nowUs, 0, tb));
    const later = nowUs + 10 * tbStepUs;
    const [hit] = await take(backend, [bucket(key, 1)], later);
    expect(hit).toEqual(gcraDecide(tat, later, 1, tb));
    expect(await raw.get(key)).toBe(String(tat + tb.emissionIntervalUs));
    // An unreadable value is a full bucket, replaced by the next write.
    const junk = freshKey(subject.name);
    await raw.set(junk, "not a number");
    const [fresh] = await take(backend, [bucket(junk, 1)], nowUs);
    expect(fresh).toEqual(gcraDecide(undefined, nowUs, 1, tb));
    expect(await raw.get(junk)).toBe(String(nowUs + tb.emissionIntervalUs));
  });

  it("takeTokens loads the script again after the store forgot it", async () => {
    if (raw?.flushScripts === undefined) return;
    const key = freshKey(subject.name);
    await take(backend, [bucket(key, 1)], nowUs);
    await raw.flushScripts();
    const decisions = await take(
      backend,
      [bucket(key, 1), bucket(freshKey(subject.name), 2)],
      nowUs,
    );
    expect(decisions).toEqual([
      gcraDecide(nowUs + tb.emissionIntervalUs, nowUs, 1, tb),
      gcraDecide(undefined, nowUs, 2, tb),
    ]);
    // Cached again: the next call goes by SHA.
    const [next] = await take(backend, [bucket(key, 0)], nowUs);
    expect(next!.tatUs).toBe(nowUs + 2 * tb.emissionIntervalUs);
  });

  it("takeTokens rejects with BackendError when the store fails the script", async () => {
    if (raw?.setWrongType === undefined) return;
    const key = freshKey(subject.name);
    await raw.setWrongType(key);
    await expect(
      take(backend, [bucket(freshKey(subject.name), 1), bucket(key, 1)], nowUs),
    ).rejects.toMatchObject({ name: "BackendError", backend: "kv" });
  });
});

describe("CounterBackend contract: calendar windows on memory", () => {
  it("a counter expires at windowEndSeconds, not at a multiple of windowSeconds", () => {
    const backend = new MemoryCounterBackend({ clock });
    backends.push(backend);
    // A local day of some zone: it ends 3 h 17 min from now, not at a multiple of a day since
    // the epoch (where `now − now mod window` would put it).
    const windowEndSeconds = now + 3 * 3600 + 17 * 60;
    const calendar: CounterSlot = {
      ...slot("calendar_day_2023-11-14@Etc/Test", 2),
      expirationSeconds: 0,
      windowSeconds: 86_400,
      windowEndSeconds,
    };
    expect(windowEndSeconds % 86_400).not.toBe(0);
    backend.increment([calendar], now);
    const read = { ...calendar, increment: 0 };
    backend.sweep(windowEndSeconds - 1);
    backend.peek([read]);
    expect(read.current).toBe(2);
    backend.sweep(windowEndSeconds);
    backend.peek([read]);
    expect(read.current).toBe(0);
    expect(backend.size).toBe(0);
  });
});

describe("CounterBackend contract: kv per-second instance", () => {
  it("takeTokens sends per-second buckets to the per-second instance", async () => {
    const perSecond = await startRedisServer();
    const backend = new KvCounterBackend({
      main: { type: "single", socketType: "tcp", url: redis.address },
      perSecond: {
        type: "single",
        socketType: "tcp",
        url: perSecond.address,
      },
      logger: silent,
    });
    const mainRaw = redis.client();
    const perSecondRaw = perSecond.client();
    try {
      await backend.start();
      const perSecondParams = resolveGcraParams({
        requestsPerUnit: 5,
        windowSeconds: 1,
        burst: 5,
      });
      const minuteKey = freshKey("kv per-second");
      const secondKey = freshKey("kv per-second");
      const slots = [
        bucket(secondKey, 2, perSecondParams, true),
        bucket(minuteKey, 1),
      ];
      const decisions = await take(backend, slots, nowUs);
      expect(decisions).toEqual([
        gcraDecide(undefined, nowUs, 2, perSecondParams),
        gcraDecide(undefined, nowUs, 1, tb),
      ]);
      expect(await perSecondRaw.get(secondKey)).toBe(
        String(nowUs + 2 * perSecondParams.emissionIntervalUs),
      );
      expect(await mainRaw.get(secondKey)).toBeNull();
      expect(await mainRaw.get(minuteKey)).toBe(
        String(nowUs + tb.emissionIntervalUs),
      );
      expect(await perSecondRaw.get(minuteKey)).toBeNull();
    } finally {
      mainRaw.disconnect();
      perSecondRaw.disconnect();
      await backend.close();
      await perSecond.stop();
    }
  });
});

describe("CounterBackend contract: mc compare-and-swap", () => {
  it("two clients racing on one bucket never admit more than the bound", async () => {
    const a = new McCounterBackend({
      clock,
      logger: silent,
      hostPorts: [memcached.address],
    });
    const b = new McCounterBackend({
      clock,
      logger: silent,
      hostPorts: [memcached.address],
    });
    backends.push(a, b);
    await Promise.all([a.start(), b.start()]);
    const key = freshKey("mc race");
    // Round r at now + r × T: a full bucket admits 4 at once, then one per T.
    for (let round = 0; round < 4; round++) {
      const at = nowUs + round * tb.emissionIntervalUs;
      const slots = Array.from({ length: 24 }, () => bucket(key, 1));
      // Each request alone, half on each client, all at once.
      await Promise.all(
        slots.map((s, i) => (i % 2 === 0 ? a : b).takeTokens([s], at)),
      );
      const allowed = slots.filter((s) => s.decision!.allowed).length;
      expect(allowed, `round ${round}`).toBe(round === 0 ? 4 : 1);
    }
    const [check] = await take(
      a,
      [bucket(key, 0)],
      nowUs + 3 * tb.emissionIntervalUs,
    );
    expect(check!.tatUs).toBe(nowUs + 7 * tb.emissionIntervalUs);
  });
});
