// Hot-key leases (issue 33 item 2) on a fake clock: several pipelines ("replicas") with their
// own lease tables share one memory backend (the store); every store increment is counted.
import { describe, expect, it } from "vitest";
import { MemoryCounterBackend } from "../../../src/backends/memory/memory-counter-backend.js";
import { compileLease } from "../../../src/config/lease.js";
import type { RateLimit } from "../../../src/config/rate-limit-config.js";
import type {
  BucketSlot,
  CounterBackend,
  CounterSlot,
} from "../../../src/limiter/counter-backend.js";
import { BackendError } from "../../../src/limiter/backend-error.js";
import { createDecider } from "../../../src/limiter/decide.js";
import { RateLimitPipeline } from "../../../src/limiter/pipeline.js";
import {
  RateLimitResponse_Code as Code,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../../../src/proto.js";
import {
  createStatsManager,
  type StatsManager,
} from "../../../src/stats/stats-manager.js";
import type { Clock } from "../../../src/util/clock.js";
import { limitRequest } from "../../helpers/limit-request.js";
import { slidingWindow, testRateLimit } from "../../helpers/rate-limit.js";
import { descriptor } from "../../helpers/requests.js";
import { mulberry32 } from "../../helpers/seeded-random.js";

/** A clock in ms the test moves by hand. */
class MsClock implements Clock {
  ms: number;
  constructor(ms: number) {
    this.ms = ms;
  }
  nowSeconds(): number {
    return Math.floor(this.ms / 1000);
  }
  nowMs(): number {
    return this.ms;
  }
}

/** The memory store, counting increments (store operations) and able to hold them back. */
class CountingStore implements CounterBackend {
  readonly inProcess = true;
  readonly inner: MemoryCounterBackend;
  increments = 0;
  hold: Promise<void> | undefined;
  fail = false;
  constructor(clock: Clock) {
    this.inner = new MemoryCounterBackend({ clock });
  }
  increment(
    slots: readonly CounterSlot[],
    nowSeconds: number,
  ): void | Promise<void> {
    this.increments++;
    if (this.fail)
      return Promise.reject(new BackendError("memory", "store down"));
    const hold = this.hold;
    if (hold === undefined) {
      this.inner.increment(slots, nowSeconds);
      return;
    }
    return hold.then(() => {
      this.inner.increment(slots, nowSeconds);
    });
  }
  peek(slots: readonly CounterSlot[]): void {
    this.inner.peek(slots);
  }
  add(slots: readonly CounterSlot[], nowSeconds: number): void {
    this.inner.add(slots, nowSeconds);
  }
  takeTokens(slots: readonly BucketSlot[], nowUs: number): void {
    this.inner.takeTokens(slots, nowUs);
  }
  flush(): Promise<void> {
    return this.inner.flush();
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}

const start = 1_700_000_040_000; // a minute boundary, ms

function setup(options: {
  limit: number;
  leaseMax?: number;
  replicas?: number;
  extra?: Partial<RateLimit>;
}) {
  const clock = new MsClock(start);
  const stats = createStatsManager();
  const store = new CountingStore(clock);
  const limit = testRateLimit(stats, "d.k", options.limit, Unit.MINUTE, {
    lease: compileLease(options.leaseMax ?? 10, stats, "d.k"),
    ...options.extra,
  });
  const replicas = Array.from(
    { length: options.replicas ?? 1 },
    () =>
      new RateLimitPipeline({
        backend: store,
        decider: createDecider({ clock, expirationJitterMaxSeconds: 0 }),
        leaseClock: clock,
      }),
  );
  const call = async (replica: number, hits = 1) => {
    const statuses = await replicas[replica]!.doLimit(
      limitRequest("d", [descriptor(["k", "v"])], [limit], [hits]),
    );
    return statuses[0]!;
  };
  return { clock, stats, store, limit, replicas, call };
}

function counter(stats: StatsManager, name: string): number {
  return stats.store
    .counter(`ratelimit.service.rate_limit.d.k.${name}`)
    .value();
}

describe("LeaseTable", () => {
  it("admits exactly the limit from one replica, with one increment per lease", async () => {
    const { store, call, clock, stats } = setup({ limit: 100, leaseMax: 10 });
    let admitted = 0;
    for (let i = 0; i < 150; i++) {
      clock.ms += 1;
      if ((await call(0)).code === Code.OK) admitted++;
    }
    expect(admitted).toBe(100);
    // A 1 ms gap between calls is 50 calls per 50 ms: leases grow to lease_max at once.
    expect(store.increments).toBeLessThanOrEqual(100 / 10 + 3);
    expect(counter(stats, "lease_taken")).toBe(100);
  });

  it("answers limit_remaining from the count less the lease's unspent hits", async () => {
    const { call, clock } = setup({ limit: 100, leaseMax: 10 });
    const first = await call(0);
    expect(first.code).toBe(Code.OK);
    expect(first.limitRemaining).toBe(99);
    expect(first.durationUntilReset?.seconds).toBe(60n);
    clock.ms += 1;
    expect((await call(0)).limitRemaining).toBe(98);
    clock.ms += 1;
    expect((await call(0)).limitRemaining).toBe(97);
  });

  it("clips a lease to what fits, and a replica admits only that", async () => {
    const { call, clock, replicas } = setup({
      limit: 20,
      leaseMax: 10,
      replicas: 2,
    });
    // Replica 0 grows its lease to 10, then replica 1 takes what is left.
    let admitted = 0;
    for (let i = 0; i < 12; i++) {
      clock.ms += 1;
      if ((await call(0)).code === Code.OK) admitted++;
    }
    for (let i = 0; i < 30; i++) {
      clock.ms += 1;
      if ((await call(1)).code === Code.OK) admitted++;
    }
    for (let i = 0; i < 30; i++) {
      clock.ms += 1;
      if ((await call(0)).code === Code.OK) admitted++;
    }
    expect(admitted).toBeLessThanOrEqual(20);
    const unspent =
      replicas[0]!.leases!.unspent(`d_k_v_${String(start / 1000)}`) +
      replicas[1]!.leases!.unspent(`d_k_v_${String(start / 1000)}`);
    expect(admitted + unspent).toBe(20);
    expect(unspent).toBeLessThanOrEqual(2 * 10);
  });

  it("refuses over the limit with OVER_LIMIT and the over_limit statistic", async () => {
    const { call, clock, stats } = setup({ limit: 3, leaseMax: 1 });
    for (let i = 0; i < 3; i++) expect((await call(0)).code).toBe(Code.OK);
    clock.ms += 1;
    const over = await call(0);
    expect(over.code).toBe(Code.OVER_LIMIT);
    expect(over.limitRemaining).toBe(0);
    expect(counter(stats, "over_limit")).toBe(1);
    expect(counter(stats, "within_limit")).toBe(3);
  });

  it("lets concurrent calls on one key wait for one lease", async () => {
    const { call, clock, store } = setup({ limit: 1000, leaseMax: 50 });
    await call(0); // the first lease: 1 hit
    clock.ms += 1;
    let release!: () => void;
    store.hold = new Promise((resolve) => {
      release = resolve;
    });
    const before = store.increments;
    const calls = Array.from({ length: 20 }, () => call(0));
    release();
    const statuses = await Promise.all(calls);
    store.hold = undefined;
    expect(statuses.every((s) => s.code === Code.OK)).toBe(true);
    // One lease for the first caller; the others wait and are served from it or the next.
    expect(store.increments - before).toBeLessThanOrEqual(2);
  });

  it("discards a lease at the window's end and counts its unspent hits in lease_unused", async () => {
    const { call, clock, stats, replicas } = setup({
      limit: 1000,
      leaseMax: 10,
    });
    for (let i = 0; i < 5; i++) {
      clock.ms += 1;
      await call(0);
    }
    const key = `d_k_v_${String(start / 1000)}`;
    const unspent = replicas[0]!.leases!.unspent(key);
    expect(unspent).toBeGreaterThan(0);
    clock.ms = start + 60_000;
    const next = await call(0);
    expect(next.limitRemaining).toBe(999);
    expect(counter(stats, "lease_unused")).toBe(unspent);
    expect(replicas[0]!.leases!.unspent(key)).toBe(0);
    expect(counter(stats, "lease_taken") - counter(stats, "lease_unused")).toBe(
      5 +
        1 +
        replicas[0]!.leases!.unspent(`d_k_v_${String(start / 1000 + 60)}`),
    );
  });

  it("gives a refund back to the local lease first", async () => {
    const { call, clock, store, replicas } = setup({
      limit: 100,
      leaseMax: 10,
    });
    for (let i = 0; i < 4; i++) {
      clock.ms += 1;
      await call(0);
    }
    const key = `d_k_v_${String(start / 1000)}`;
    const unspent = replicas[0]!.leases!.unspent(key);
    const increments = store.increments;
    const refund = await call(0, -2);
    expect(refund.code).toBe(Code.OK);
    expect(refund.limitRemaining).toBe(98);
    expect(replicas[0]!.leases!.unspent(key)).toBe(Math.min(10, unspent + 2));
    expect(store.increments).toBe(increments);
  });

  it("answers a check of 0 hits from the store's counter", async () => {
    const { call, store, replicas } = setup({
      limit: 100,
      leaseMax: 5,
      replicas: 2,
    });
    await call(1); // another replica's lease of 1
    const check = await call(0, 0);
    expect(check.code).toBe(Code.OK);
    expect(check.limitRemaining).toBe(99);
    expect(store.increments).toBe(2);
    expect(replicas[0]!.leases!.size).toBe(0);
  });

  it("never holds more than lease_max unspent hits", async () => {
    const { call, clock, replicas } = setup({ limit: 1000, leaseMax: 5 });
    const key = `d_k_v_${String(start / 1000)}`;
    for (let i = 0; i < 40; i++) {
      clock.ms += 1;
      await call(0, 1 + (i % 5));
      expect(replicas[0]!.leases!.unspent(key)).toBeLessThanOrEqual(5);
    }
  });

  it("counts hits above lease_max directly", async () => {
    const { call, store } = setup({ limit: 100, leaseMax: 5 });
    const status = await call(0, 30);
    expect(status.code).toBe(Code.OK);
    expect(status.limitRemaining).toBe(70);
    expect(store.increments).toBe(1);
  });

  it("never admits more than the limit per window across replicas, and under-admits at most replicas × lease_max (seeded)", async () => {
    for (const seed of [1, 2, 3, 4, 5]) {
      for (const algorithm of ["fixed", "sliding"] as const) {
        const random = mulberry32(seed);
        const replicas = 3;
        const leaseMax = 7;
        const {
          call,
          clock,
          replicas: pipelines,
        } = setup({
          limit: 200,
          leaseMax,
          replicas,
          extra:
            algorithm === "sliding"
              ? { algorithm: slidingWindow(60), cacheKeySuffix: "_s60" }
              : {},
        });
        const admitted = new Map<number, number>();
        // Three windows of bursts: several calls in flight at once, random replicas.
        while (clock.ms < start + 180_000) {
          clock.ms += Math.floor(random() * 200);
          const burst = Array.from(
            { length: 1 + Math.floor(random() * 8) },
            () => call(Math.floor(random() * replicas)),
          );
          const window = Math.floor(clock.nowSeconds() / 60);
          for (const status of await Promise.all(burst))
            if (status.code === Code.OK)
              admitted.set(window, (admitted.get(window) ?? 0) + 1);
        }
        const first = start / 60_000;
        for (const [window, count] of admitted) {
          if (window >= first + 3) continue; // the last burst may open a fourth window
          if (algorithm === "fixed") {
            expect(
              count,
              `seed ${String(seed)} window ${String(window)}`,
            ).toBeLessThanOrEqual(200);
            expect(count).toBeGreaterThanOrEqual(200 - replicas * leaseMax);
          } else {
            // A sliding window also carries the previous window's weight: only the cap holds.
            expect(count).toBeLessThanOrEqual(200);
          }
        }
        expect(pipelines.length).toBe(replicas);
      }
    }
  });

  it("fails every caller waiting on a lease whose increment fails, and tries again after", async () => {
    const { call, clock, store } = setup({ limit: 100, leaseMax: 10 });
    store.fail = true;
    const calls = Array.from({ length: 3 }, () => call(0));
    const results = await Promise.allSettled(calls);
    expect(results.map((r) => r.status)).toEqual([
      "rejected",
      "rejected",
      "rejected",
    ]);
    expect(store.increments).toBe(1);
    store.fail = false;
    clock.ms += 1;
    expect((await call(0)).code).toBe(Code.OK);
  });

  it("sizes a lease to cover the callers queued behind it, up to lease_max", async () => {
    const { call, store } = setup({ limit: 1000, leaseMax: 5 });
    let release!: () => void;
    store.hold = new Promise((resolve) => {
      release = resolve;
    });
    // 21 calls at once, no time passing: one lease of 1 for the first, then leases of 5.
    const calls = Array.from({ length: 21 }, () => call(0));
    release();
    const statuses = await Promise.all(calls);
    store.hold = undefined;
    expect(statuses.every((s) => s.code === Code.OK)).toBe(true);
    expect(store.increments).toBe(1 + 20 / 5);
  });
});
