import { Writable } from "node:stream";
import { create } from "@bufbuild/protobuf";
import { pino } from "pino";
import { describe, expect, it, vi } from "vitest";
import type { FailureMode } from "../../../src/config/failure-mode.js";
import type { RateLimit } from "../../../src/config/rate-limit-config.js";
import { BackendError } from "../../../src/limiter/backend-error.js";
import {
  BackendGuard,
  type BackendGuardOptions,
} from "../../../src/limiter/backend-guard.js";
import { createDecider } from "../../../src/limiter/decide.js";
import { CacheKeyError } from "../../../src/limiter/cache-key-error.js";
import type { RateLimitCache } from "../../../src/limiter/rate-limit-cache.js";
import {
  RateLimitDescriptorSchema,
  RateLimitResponse_Code as Code,
  type RateLimitResponse_DescriptorStatus,
} from "../../../src/proto.js";
import { statNames } from "../../../src/stats/names.js";
import {
  createStatsManager,
  type StatsManager,
} from "../../../src/stats/stats-manager.js";
import type { Clock } from "../../../src/util/clock.js";
import { testRateLimit } from "../../helpers/rate-limit.js";
import { memoryLimiter } from "../../helpers/limiters.js";
import { MemoryCounterBackend } from "../../../src/backends/memory/memory-counter-backend.js";
import { RateLimitPipeline } from "../../../src/limiter/pipeline.js";
import type { LimitRequest } from "../../../src/limiter/limit-request.js";
import { peekCounters } from "../../helpers/decisions.js";
import { limitRequest } from "../../helpers/limit-request.js";

/** A clock in milliseconds the test moves by hand. */
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

/** A backend (exact memory counters) that fails while `down` is set. */
class FlakyBackend implements RateLimitCache {
  down = false;
  /** Calls never settle while set (a store that stopped answering). */
  hang = false;
  calls = 0;
  /** Calls wait in {@link held} while set, until the test settles them (a frozen store). */
  holdCalls = false;
  readonly held: {
    /** Counts the call in the store and answers it (the store thawed). */
    answer(): Promise<void>;
    /** Fails the call (the connection closed: `unanswered` says whether it was written). */
    fail(unanswered: boolean): void;
  }[] = [];
  failWith: () => Error = () => new BackendError("kv", "kv store error");
  readonly store: RateLimitPipeline<MemoryCounterBackend>;
  constructor(clock: Clock) {
    this.store = memoryLimiter({
      decider: createDecider({ clock }),
      clock,
    });
  }
  doLimit(
    request: LimitRequest,
  ): Promise<RateLimitResponse_DescriptorStatus[]> {
    this.calls++;
    if (this.hang) return new Promise(() => undefined);
    if (this.holdCalls)
      return new Promise((resolve, reject) => {
        this.held.push({
          answer: async () => {
            resolve(await this.store.doLimit(request));
          },
          fail: (unanswered) => {
            reject(new BackendError("kv", "connection closed", { unanswered }));
          },
        });
      });
    if (this.down) return Promise.reject(this.failWith());
    return this.store.doLimit(request);
  }
  flush(): Promise<void> {
    return Promise.resolve();
  }
  close(): Promise<void> {
    return this.store.close();
  }
}

interface Fixture {
  readonly clock: MsClock;
  readonly backend: FlakyBackend;
  readonly guard: BackendGuard;
  readonly stats: StatsManager;
  readonly limit: RateLimit;
  readonly transitions: boolean[];
  readonly logs: string[];
  call(domain?: string, limit?: RateLimit): Promise<Code>;
}

function fixture(
  mode: FailureMode,
  extra: Partial<BackendGuardOptions> = {},
  requestsPerUnit = 10,
): Fixture {
  const clock = new MsClock(60_000 * 1000);
  const backend = new FlakyBackend(clock);
  const stats = createStatsManager();
  const transitions: boolean[] = [];
  const logs: string[] = [];
  const logger = pino(
    { level: "info" },
    new Writable({
      write(chunk: Buffer, _enc, done) {
        logs.push(String(chunk));
        done();
      },
    }),
  );
  const guard = new BackendGuard({
    backend,
    backendName: "kv",
    mode,
    createLocalBackend: () => new MemoryCounterBackend({ clock }),
    createLocalLimiter: (counters) =>
      new RateLimitPipeline({
        backend: counters,
        decider: createDecider({ clock }),
      }),
    clock,
    logger,
    statsStore: stats.store,
    onDegradedChange: (d) => transitions.push(d),
    ...extra,
  });
  const limit = testRateLimit(stats, "d.k", requestsPerUnit);
  const descriptor = create(RateLimitDescriptorSchema, {
    entries: [{ key: "k", value: "v" }],
  });
  return {
    clock,
    backend,
    guard,
    stats,
    limit,
    transitions,
    logs,
    async call(domain = "d", l = limit) {
      const statuses = await guard.doLimit(
        limitRequest(domain, [descriptor], [l], [1]),
      );
      return statuses[0]!.code;
    },
  };
}

/** `promise`, and whether it has settled yet (read after advancing fake timers). */
function watch<T>(promise: Promise<T>): {
  promise: Promise<T>;
  settled: boolean;
} {
  const watched = { promise, settled: false };
  const settle = (): void => {
    watched.settled = true;
  };
  void promise.then(settle, settle);
  return watched;
}

function counter(stats: StatsManager, name: string): number {
  return stats.store.counter(name).value();
}

describe("BackendGuard", () => {
  it("passes answers through and adds no statistic while the backend answers", async () => {
    const f = fixture("error");
    for (let i = 0; i < 12; i++) await f.call();
    expect(f.backend.calls).toBe(12);
    expect(await f.call()).toBe(Code.OVER_LIMIT);
    const names = f.stats.store.snapshot();
    expect(JSON.stringify(names)).not.toContain("ratelimit.backend");
  });

  it("error: opens after the threshold, fails fast while open, probes once per interval, closes on success", async () => {
    const f = fixture("error", { failureThreshold: 3, probeIntervalMs: 500 });
    f.backend.down = true;
    for (let i = 0; i < 3; i++)
      await expect(f.call()).rejects.toBeInstanceOf(BackendError);
    expect(f.guard.degraded).toBe(true);
    expect(f.backend.calls).toBe(3);
    // Open: no backend call, immediate BackendError.
    await expect(f.call()).rejects.toThrow(/circuit open/);
    expect(f.backend.calls).toBe(3);
    // A failed probe after the interval, then nothing until the next interval.
    f.clock.ms += 500;
    await expect(f.call()).rejects.toBeInstanceOf(BackendError);
    expect(f.backend.calls).toBe(4);
    await expect(f.call()).rejects.toThrow(/circuit open/);
    expect(f.backend.calls).toBe(4);
    // The store is back: the next probe closes the circuit.
    f.backend.down = false;
    f.clock.ms += 499;
    await expect(f.call()).rejects.toThrow(/circuit open/);
    f.clock.ms += 1;
    expect(await f.call()).toBe(Code.OK);
    expect(f.guard.degraded).toBe(false);
    expect(await f.call()).toBe(Code.OK);
    expect(f.backend.calls).toBe(6);
    expect(f.transitions).toEqual([true, false]);
    expect(counter(f.stats, statNames.backendFailures)).toBe(4);
    expect(counter(f.stats, statNames.backendCircuitOpened)).toBe(1);
    expect(counter(f.stats, statNames.backendDegradedDecisions)).toBe(0);
    expect(f.stats.store.gauge(statNames.backendDegraded).value()).toBe(0);
    expect(f.logs.filter((l) => l.includes("circuit opened"))).toHaveLength(1);
    expect(f.logs.filter((l) => l.includes("circuit closed"))).toHaveLength(1);
  });

  it("resets the failure count on success (failures must be consecutive)", async () => {
    const f = fixture("error", { failureThreshold: 3 });
    for (let round = 0; round < 3; round++) {
      f.backend.down = true;
      await expect(f.call()).rejects.toBeInstanceOf(BackendError);
      await expect(f.call()).rejects.toBeInstanceOf(BackendError);
      f.backend.down = false;
      await f.call();
    }
    expect(f.guard.degraded).toBe(false);
    expect(counter(f.stats, statNames.backendCircuitOpened)).toBe(0);
  });

  it("allow: answers OK without counting, from the first failure", async () => {
    const f = fixture("allow", { failureThreshold: 2 });
    f.backend.down = true;
    for (let i = 0; i < 30; i++) expect(await f.call()).toBe(Code.OK);
    expect(f.backend.calls).toBe(2);
    expect(counter(f.stats, statNames.backendDegradedDecisions)).toBe(30);
    expect(f.limit.stats.withinLimit.value()).toBe(0);
    const statuses = await f.guard.doLimit(
      limitRequest(
        "d",
        [create(RateLimitDescriptorSchema, { entries: [{ key: "k" }] })],
        [f.limit],
        [1],
      ),
    );
    expect(statuses[0]!.currentLimit?.requestsPerUnit).toBe(10);
    expect(statuses[0]!.limitRemaining).toBe(10);
    expect(statuses[0]!.durationUntilReset?.seconds).toBe(60n);
  });

  it("allow and deny: report the reset of the rule's whole window (unit_multiplier)", async () => {
    const f = fixture("deny", { failureThreshold: 1 });
    f.backend.down = true;
    const fiveMinutes = testRateLimit(f.stats, "d.w", 10, undefined, {
      unitMultiplier: 5,
      windowSeconds: 300,
    });
    const statuses = await f.guard.doLimit(
      limitRequest(
        "d",
        [create(RateLimitDescriptorSchema, { entries: [{ key: "w" }] })],
        [fiveMinutes],
        [1],
      ),
    );
    // 60 000 s is a multiple of 300: the whole window is ahead.
    expect(statuses[0]!.durationUntilReset?.seconds).toBe(300n);
  });

  it("deny: answers OVER_LIMIT, OK for shadow-mode rules and descriptors without a limit", async () => {
    const f = fixture("deny");
    f.backend.down = true;
    expect(await f.call()).toBe(Code.OVER_LIMIT);
    const shadow = testRateLimit(f.stats, "d.s", 10, undefined, {
      shadowMode: true,
    });
    expect(await f.call("d", shadow)).toBe(Code.OK);
    const d = create(RateLimitDescriptorSchema, { entries: [{ key: "x" }] });
    const statuses = await f.guard.doLimit(
      limitRequest("d", [d, d], [undefined, f.limit], [1, 1]),
    );
    expect(statuses.map((s) => s.code)).toEqual([Code.OK, Code.OVER_LIMIT]);
    expect(statuses[1]!.limitRemaining).toBe(0);
  });

  it("local: continues the counts seen before the outage and admits at most the limit per window", async () => {
    const f = fixture("local", { failureThreshold: 3 }, 10);
    for (let i = 0; i < 4; i++) expect(await f.call()).toBe(Code.OK);
    f.backend.down = true;
    const codes: Code[] = [];
    for (let i = 0; i < 20; i++) codes.push(await f.call());
    // 4 admitted by the store, 6 locally, then over limit; never an error.
    expect(codes.filter((c) => c === Code.OK)).toHaveLength(6);
    expect(codes.slice(6).every((c) => c === Code.OVER_LIMIT)).toBe(true);
    expect(f.guard.degraded).toBe(true);
    // The store comes back in the same window: it never saw the local hits, so the local
    // verdict still applies; in the next window the store decides alone.
    f.backend.down = false;
    f.clock.ms += 500;
    expect(await f.call()).toBe(Code.OVER_LIMIT);
    expect(f.guard.degraded).toBe(false);
    f.clock.ms += 60_000;
    expect(await f.call()).toBe(Code.OK);
    expect(f.transitions).toEqual([true, false]);
  });

  it("local: keeps the local verdict after recovery for windows that started during the outage", async () => {
    const f = fixture("local", { failureThreshold: 1 }, 3);
    f.backend.down = true;
    await f.call();
    // A failed probe just before the window ends, then the outage goes on into the next
    // window, where the local limiter admits 3 more (none of them a probe).
    f.clock.ms += 59_800;
    expect(await f.call()).toBe(Code.OK);
    f.clock.ms += 300;
    const codes: Code[] = [];
    for (let i = 0; i < 4; i++) codes.push(await f.call());
    expect(codes).toEqual([Code.OK, Code.OK, Code.OK, Code.OVER_LIMIT]);
    // The store comes back in that window: it saw none of them, the local verdict holds.
    f.backend.down = false;
    f.clock.ms += 1000;
    expect(await f.call()).toBe(Code.OVER_LIMIT);
    expect(f.guard.degraded).toBe(false);
  });

  it("local: adds the hits counted during the outage to the store's counters when it answers again", async () => {
    let f: Fixture | undefined = undefined;
    const replayed: number[] = [];
    f = fixture(
      "local",
      {
        failureThreshold: 3,
        replay: (slots, now) => {
          replayed.push(...slots.map((slot) => slot.increment));
          f!.backend.store.backend.add(slots, now);
        },
      },
      10,
    );
    const read = async (): Promise<number> => {
      const [reading] = await peekCounters(
        f.backend.store,
        limitRequest(
          "d",
          [
            create(RateLimitDescriptorSchema, {
              entries: [{ key: "k", value: "v" }],
            }),
          ],
          [f.limit],
        ),
      );
      return reading!.value;
    };
    for (let i = 0; i < 4; i++) await f.call();
    expect(await read()).toBe(4);
    f.backend.down = true;
    for (let i = 0; i < 20; i++) await f.call();
    expect(await read()).toBe(4);
    f.backend.down = false;
    f.clock.ms += 600; // past one probe interval: the next call probes and closes the circuit
    expect(await f.call()).toBe(Code.OVER_LIMIT);
    expect(f.guard.degraded).toBe(false);
    await new Promise((resolve) => setImmediate(resolve));
    // The 20 hits counted locally (admitted or not, as the store itself counts them) plus the
    // probe's own hit, so the store holds what it would have held without the outage.
    expect(replayed).toEqual([20]);
    expect(await read()).toBe(4 + 1 + 20);
    expect(counter(f.stats, statNames.backendReplayedHits)).toBe(20);
    // A second recovery replays nothing more.
    f.backend.down = true;
    for (let i = 0; i < 3; i++) await f.call();
    f.backend.down = false;
    f.clock.ms += 600;
    await f.call();
    await new Promise((resolve) => setImmediate(resolve));
    expect(replayed).toEqual([20, 3]);
  });

  it("local: replays only windows still open, and keeps a failed replay for the next recovery", async () => {
    let failReplay = true;
    const replayed: number[][] = [];
    const f = fixture(
      "local",
      {
        failureThreshold: 1,
        replay: (slots) => {
          if (failReplay) throw new BackendError("kv", "down again");
          replayed.push(slots.map((slot) => slot.increment));
        },
      },
      10,
    );
    f.backend.down = true;
    for (let i = 0; i < 3; i++) await f.call();
    f.backend.down = false;
    f.clock.ms += 600;
    await f.call(); // closes; the replay fails and is kept
    await new Promise((resolve) => setImmediate(resolve));
    f.backend.down = true;
    await f.call(); // opens again, 1 more hit
    failReplay = false;
    f.backend.down = false;
    f.clock.ms += 600;
    await f.call();
    await new Promise((resolve) => setImmediate(resolve));
    expect(replayed).toEqual([[4]]);
    // An outage whose window has ended by the recovery replays nothing.
    f.backend.down = true;
    await f.call();
    f.clock.ms += 120_000;
    f.backend.down = false;
    await f.call();
    await new Promise((resolve) => setImmediate(resolve));
    expect(replayed).toEqual([[4]]);
  });

  it("answers by the failure mode when the backend does not answer within BACKEND_DECISION_TIMEOUT", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    try {
      const f = fixture("allow", {
        decisionTimeoutMs: 20,
        failureThreshold: 2,
      });
      f.backend.hang = true;
      const first = watch(f.call());
      await vi.advanceTimersByTimeAsync(19);
      expect(first.settled).toBe(false);
      await vi.advanceTimersByTimeAsync(1);
      expect(await first.promise).toBe(Code.OK);
      expect(counter(f.stats, statNames.backendFailures)).toBe(1);
      const second = f.call();
      await vi.advanceTimersByTimeAsync(20);
      expect(await second).toBe(Code.OK);
      expect(f.guard.degraded).toBe(true);
      const e = fixture("error", { decisionTimeoutMs: 20 });
      e.backend.hang = true;
      const refused = watch(e.call());
      await vi.advanceTimersByTimeAsync(19);
      expect(refused.settled).toBe(false);
      await vi.advanceTimersByTimeAsync(1);
      await expect(refused.promise).rejects.toThrow(
        "kv backend did not answer within 20 ms (BACKEND_DECISION_TIMEOUT)",
      );
    } finally {
      vi.useRealTimers();
    }
  });

  it("local: a call in doubt is replayed only when its own outcome says the store did not count it", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    try {
      const replayed: number[][] = [];
      const f = fixture(
        "local",
        {
          decisionTimeoutMs: 20,
          failureThreshold: 4,
          replay: (slots) => {
            replayed.push(slots.map((slot) => slot.increment));
          },
        },
        100,
      );
      f.backend.holdCalls = true;
      for (let i = 0; i < 4; i++) {
        const answer = f.call();
        await vi.advanceTimersByTimeAsync(20);
        expect(await answer).toBe(Code.OK);
      }
      expect(f.guard.degraded).toBe(true);
      expect(f.stats.store.gauge(statNames.backendCallsInDoubt).value()).toBe(
        4,
      );
      const [a, b, c, d] = f.backend.held;
      await a!.answer(); // counted by the store, late
      await b!.answer();
      c!.fail(false); // the connection closed: not counted, replayed
      d!.fail(true); // written, abandoned for silence: the store applies it
      await vi.advanceTimersByTimeAsync(0);
      expect(counter(f.stats, statNames.backendCountedLate)).toBe(3);
      expect(f.stats.store.gauge(statNames.backendCallsInDoubt).value()).toBe(
        0,
      );
      f.backend.holdCalls = false;
      f.clock.ms += 600;
      expect(await f.call()).toBe(Code.OK); // the probe closes the circuit
      await vi.advanceTimersByTimeAsync(0);
      expect(replayed).toEqual([[1]]);
    } finally {
      vi.useRealTimers();
    }
  });

  it("local: the replay waits for the calls in doubt; beyond maxCallsInDoubt a call is replayed", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    try {
      const replayed: number[][] = [];
      const f = fixture(
        "local",
        {
          decisionTimeoutMs: 20,
          failureThreshold: 2,
          maxCallsInDoubt: 1,
          replay: (slots) => {
            replayed.push(slots.map((slot) => slot.increment));
          },
        },
        100,
      );
      f.backend.holdCalls = true;
      for (let i = 0; i < 2; i++) {
        const answer = f.call();
        await vi.advanceTimersByTimeAsync(20);
        expect(await answer).toBe(Code.OK);
      }
      expect(counter(f.stats, statNames.backendInDoubtOverflow)).toBe(1);
      f.backend.holdCalls = false;
      f.clock.ms += 600;
      expect(await f.call()).toBe(Code.OK); // closes the circuit; the replay waits
      await vi.advanceTimersByTimeAsync(0);
      expect(replayed).toEqual([]);
      await f.backend.held[0]!.answer(); // the call in doubt was counted
      await vi.advanceTimersByTimeAsync(0);
      // Only the call beyond the bound is replayed (the store may count it twice).
      expect(replayed).toEqual([[1]]);
    } finally {
      vi.useRealTimers();
    }
  });

  it("answers by the failure mode before the caller's deadline passes", async () => {
    const f = fixture("error");
    f.backend.hang = true;
    const descriptor = create(RateLimitDescriptorSchema, {
      entries: [{ key: "k", value: "v" }],
    });
    // The deadline is on the performance.now() clock: fake it with the timer.
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "performance"] });
    try {
      const answer = watch(
        f.guard.doLimit(
          limitRequest("d", [descriptor], [f.limit], [1]),
          performance.now() + 40,
        ),
      );
      // 40 ms left: the reserve is 5 ms, so the answer comes at 35 ms.
      await vi.advanceTimersByTimeAsync(34);
      expect(answer.settled).toBe(false);
      await vi.advanceTimersByTimeAsync(1);
      await expect(answer.promise).rejects.toThrow(
        "kv backend did not answer within 35 ms (the caller's deadline)",
      );
    } finally {
      vi.useRealTimers();
    }
    // Without a deadline nothing bounds the wait but the backend's own timeouts.
    f.backend.hang = false;
    expect(await f.call()).toBe(Code.OK);
  });

  it("local: scales each limit by the local share (at least 1)", async () => {
    const f = fixture("local", { localShare: 0.25, failureThreshold: 1 }, 10);
    f.backend.down = true;
    const codes: Code[] = [];
    for (let i = 0; i < 10; i++) codes.push(await f.call());
    expect(codes.filter((c) => c === Code.OK)).toHaveLength(2);
    const one = testRateLimit(f.stats, "d.one", 1);
    expect(await f.call("d2", one)).toBe(Code.OK);
    expect(await f.call("d2", one)).toBe(Code.OVER_LIMIT);
  });

  it("applies a domain's failure_mode over the process-wide mode", async () => {
    const f = fixture("local", { failureThreshold: 1 });
    f.guard.setDomainModes(
      new Map<string, FailureMode>([
        ["strict", "deny"],
        ["open", "allow"],
        ["loud", "error"],
      ]),
    );
    f.backend.down = true;
    expect(await f.call("d")).toBe(Code.OK);
    expect(await f.call("strict")).toBe(Code.OVER_LIMIT);
    expect(await f.call("open")).toBe(Code.OK);
    await expect(f.call("loud")).rejects.toBeInstanceOf(BackendError);

    const g = fixture("error", { failureThreshold: 1 });
    g.guard.setDomainModes(new Map<string, FailureMode>([["open", "allow"]]));
    g.backend.down = true;
    await expect(g.call("d")).rejects.toBeInstanceOf(BackendError);
    expect(await g.call("open")).toBe(Code.OK);
  });

  it("lets other errors through without counting them", async () => {
    const f = fixture("allow", { failureThreshold: 1 });
    f.backend.down = true;
    f.backend.failWith = () => new CacheKeyError(0, "bad key");
    await expect(f.call()).rejects.toBeInstanceOf(CacheKeyError);
    expect(f.guard.degraded).toBe(false);
  });

  it("sends one probe at a time", async () => {
    const f = fixture("allow", { failureThreshold: 1 });
    f.backend.down = true;
    await f.call();
    f.clock.ms += 500;
    f.backend.down = false;
    const before = f.backend.calls;
    const codes = await Promise.all([f.call(), f.call(), f.call()]);
    expect(codes).toEqual([Code.OK, Code.OK, Code.OK]);
    expect(f.backend.calls - before).toBe(1);
    expect(f.guard.degraded).toBe(false);
  });

  it("checks its numbers", () => {
    expect(() => fixture("local", { localShare: 0 })).toThrow(/localShare/);
    expect(() => fixture("local", { localShare: 1.5 })).toThrow(/localShare/);
    expect(() => fixture("error", { failureThreshold: 0 })).toThrow(
      /failureThreshold/,
    );
    expect(() => fixture("error", { probeIntervalMs: 0 })).toThrow(
      /probeIntervalMs/,
    );
  });
});
