// The read-only counter backend Explain decides over (src/limiter/read-only-backend.ts): every
// write answers what the memory backend answers for it, and the store is left as it was.
import { afterEach, describe, expect, it } from "vitest";
import { MemoryCounterBackend } from "../../../src/backends/memory/memory-counter-backend.js";
import { resolveGcraParams } from "../../../src/config/token-bucket.js";
import type {
  BucketSlot,
  CacheKeyRules,
  CounterBackend,
  CounterSlot,
} from "../../../src/limiter/counter-backend.js";
import { ReadOnlyCounterBackend } from "../../../src/limiter/read-only-backend.js";
import { FakeClock } from "../../helpers/fake-clock.js";

const nowSeconds = 1_800_000_000;
const nowUs = nowSeconds * 1_000_000;
const params = resolveGcraParams({ requestsPerUnit: 10, windowSeconds: 60 });

function slot(
  cacheKey: string,
  increment: number,
  previousCacheKey?: string,
): CounterSlot {
  return {
    cacheKey,
    previousCacheKey,
    perSecond: false,
    expirationSeconds: 0,
    windowSeconds: 60,
    windowEndSeconds: nowSeconds + 60,
    sliding: previousCacheKey !== undefined,
    requestsPerUnit: 10,
    shadowMode: false,
    increment,
    current: 0,
    previous: 0,
  };
}

function bucket(cacheKey: string, increment: number): BucketSlot {
  return {
    cacheKey,
    perSecond: false,
    tokenBucket: params,
    increment,
    decision: undefined,
  };
}

const opened: MemoryCounterBackend[] = [];
function memory(): MemoryCounterBackend {
  const store = new MemoryCounterBackend({ clock: new FakeClock(nowSeconds) });
  opened.push(store);
  return store;
}
afterEach(async () => {
  await Promise.all(opened.splice(0).map((b) => b.close()));
});

/** The values `peek` reads for `keys` (current only). */
function read(store: CounterBackend, keys: readonly string[]): number[] {
  const slots = keys.map((k) => slot(k, 0));
  void store.peek(slots);
  return slots.map((s) => s.current);
}

/** Runs the same calls on a memory store and on a read-only adapter over a copy of it. */
function pair(seed: (store: MemoryCounterBackend) => void): {
  real: MemoryCounterBackend;
  readOnly: ReadOnlyCounterBackend;
  under: MemoryCounterBackend;
} {
  const real = memory();
  const under = memory();
  seed(real);
  seed(under);
  return { real, readOnly: new ReadOnlyCounterBackend(under), under };
}

function seedCounters(store: MemoryCounterBackend): void {
  store.increment([slot("a", 4), slot("prev", 7)], nowSeconds);
  store.takeTokens([bucket("tb", 6)], nowUs);
}

describe("ReadOnlyCounterBackend", () => {
  it("answers increment, add and peek as the store does, writing nothing", async () => {
    const { real, readOnly, under } = pair(seedCounters);
    const calls: ((b: CounterBackend) => CounterSlot[])[] = [
      (b) => {
        const s = [slot("a", 2, "prev"), slot("b", 1), slot("a", 3)];
        void b.increment(s, nowSeconds);
        return s;
      },
      (b) => {
        const s = [slot("a", -20), slot("c", -1), slot("b", 5)];
        void b.add(s, nowSeconds);
        return s;
      },
      (b) => {
        const s = [slot("a", 0, "prev"), slot("b", 0), slot("c", 0)];
        void b.peek(s);
        return s;
      },
    ];
    for (const call of calls) {
      const want = call(real).map((s) => [s.current, s.previous]);
      const got = call(readOnly).map((s) => [s.current, s.previous]);
      expect(got).toEqual(want);
    }
    expect(read(under, ["a", "b", "c", "prev"])).toEqual([4, 0, 0, 7]);
    await readOnly.close();
    expect(under.size).toBe(3);
  });

  it("charges all or nothing as the store does", async () => {
    const fitsUnder = (limit: number) => (slots: readonly CounterSlot[]) =>
      slots.every((s) => s.current + s.increment <= limit);
    for (const limit of [5, 10]) {
      const { real, readOnly, under } = pair(seedCounters);
      const want = [slot("a", 3), slot("b", 3)];
      const got = [slot("a", 3), slot("b", 3)];
      const charged = real.chargeAllOrNothing(
        want,
        nowSeconds,
        fitsUnder(limit),
      );
      expect(
        await readOnly.chargeAllOrNothing(got, nowSeconds, fitsUnder(limit)),
      ).toBe(charged);
      expect(got.map((s) => s.current)).toEqual(want.map((s) => s.current));
      expect(read(under, ["a", "b"])).toEqual([4, 0]);
    }
  });

  it("decides token buckets one after the other as the store does", () => {
    const { real, readOnly, under } = pair(seedCounters);
    for (const hits of [[3, 2], [-4], [0, 9, 1]]) {
      const want = hits.map((h) => bucket("tb", h));
      const got = hits.map((h) => bucket("tb", h));
      real.takeTokens(want, nowUs);
      void readOnly.takeTokens(got, nowUs);
      expect(got.map((s) => s.decision)).toEqual(want.map((s) => s.decision));
    }
    const check = [bucket("tb", 0)];
    under.takeTokens(check, nowUs);
    expect(check[0]!.decision!.limitRemaining).toBe(4);
  });

  it("does not read a key the store cannot hold, and counts it from 0", () => {
    const store = memory();
    store.increment([slot("ok", 2)], nowSeconds);
    const asked: string[] = [];
    const rules: CacheKeyRules = {
      backendLabel: "test",
      maxKeyBytes: 8,
      problem: (key: string) =>
        key.includes(" ") ? "illegal-character" : undefined,
      hasIllegalCharacter: (text: string) => text.includes(" "),
    };
    const ruled: CounterBackend = {
      increment: (slots, now) => {
        store.increment(slots, now);
      },
      add: (slots, now) => {
        store.add(slots, now);
      },
      takeTokens: (slots, now) => {
        store.takeTokens(slots, now);
      },
      flush: () => store.flush(),
      close: () => store.close(),
      peek: (slots) => {
        asked.push(...slots.map((x) => x.cacheKey));
        store.peek(slots);
      },
      cacheKeyRules: rules,
    };
    const readOnly = new ReadOnlyCounterBackend(ruled);
    const s = [slot("ok", 1), slot("b ad", 1)];
    void readOnly.increment(s, nowSeconds);
    expect(asked).toEqual(["ok"]);
    expect(s.map((x) => x.current)).toEqual([3, 1]);
    expect(readOnly.storedValue("b ad")).toBe(0);
    expect(readOnly.storedValue("ok")).toBe(2);
  });

  it("sees only its own slot's increment when the store reads before it writes (mc)", () => {
    const { readOnly } = {
      readOnly: new ReadOnlyCounterBackend(memory(), {
        incrementAccumulates: false,
      }),
    };
    const s = [slot("k", 2), slot("k", 3)];
    void readOnly.increment(s, nowSeconds);
    expect(s.map((x) => x.current)).toEqual([2, 3]);
    const after = [slot("k", 0)];
    void readOnly.peek(after);
    expect(after[0]!.current).toBe(5);
  });
});
