import { describe, expect, it } from "vitest";
import { suffixedCounterBackend } from "../../../src/canary/canary-backend.js";
import type {
  BucketSlot,
  CounterBackend,
  CounterSlot,
} from "../../../src/limiter/counter-backend.js";

function slot(cacheKey: string, increment: number): CounterSlot {
  return {
    cacheKey,
    previousCacheKey: `${cacheKey}_prev`,
    perSecond: false,
    expirationSeconds: 120,
    windowSeconds: 60,
    windowEndSeconds: 1_700_000_060,
    sliding: true,
    requestsPerUnit: 10,
    shadowMode: false,
    increment,
    current: 0,
    previous: 0,
  };
}

describe("suffixedCounterBackend", () => {
  it("stores every key with the suffix and hands the results back", async () => {
    const seen: string[] = [];
    const store = new Map<string, number>([["k_prev|canary", 4]]);
    const backend: CounterBackend = {
      increment(slots) {
        return Promise.resolve().then(() => {
          for (const s of slots) {
            seen.push(`incr ${s.cacheKey} ${s.previousCacheKey ?? ""}`);
            s.current = (store.get(s.cacheKey) ?? 0) + s.increment;
            store.set(s.cacheKey, s.current);
            s.previous = store.get(s.previousCacheKey ?? "") ?? 0;
          }
        });
      },
      peek(slots) {
        for (const s of slots) s.current = store.get(s.cacheKey) ?? 0;
      },
      add(slots) {
        for (const s of slots) {
          seen.push(`add ${s.cacheKey}`);
          s.increment = 0;
        }
      },
      takeTokens(slots: readonly BucketSlot[]) {
        for (const s of slots) {
          seen.push(`tokens ${s.cacheKey}`);
          s.decision = {
            allowed: true,
            tatUs: 1,
            newTatUs: 1,
            limitRemaining: 3,
            resetAfterUs: 1,
            durationUntilResetSeconds: 1,
            retryAfterUs: 0,
            retryAfterSeconds: 0,
          };
        }
      },
      flush: () => Promise.resolve(),
      close: () => Promise.resolve(),
    };
    const suffixed = suffixedCounterBackend(backend, "|canary");
    const a = slot("k", 2);
    await suffixed.increment([a], 0);
    expect(seen).toEqual(["incr k|canary k_prev|canary"]);
    expect([a.cacheKey, a.current, a.previous]).toEqual(["k", 2, 4]);
    const b = slot("k", 3);
    await suffixed.peek([b]);
    expect(b.current).toBe(2);
    await suffixed.add([b], 0);
    // What the store did to the copy's increment (a write it could not confirm) comes back.
    expect(b.increment).toBe(0);
    const bucket: BucketSlot = {
      cacheKey: "tb",
      perSecond: false,
      tokenBucket: undefined,
      increment: 1,
      decision: undefined,
    };
    await suffixed.takeTokens([bucket], 0);
    expect(bucket.decision?.limitRemaining).toBe(3);
    expect(seen.slice(1)).toEqual(["add k|canary", "tokens tb|canary"]);
    expect("chargeAllOrNothing" in suffixed).toBe(false);
  });
});
