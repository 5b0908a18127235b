import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import {
  checkThenIncrement,
  type RequestCounters,
} from "../../../src/limiter/all-or-nothing.js";
import { createBaseLimiter } from "../../../src/limiter/base-limiter.js";
import {
  RateLimitDescriptorSchema,
  RateLimitResponse_Code as Code,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../../../src/proto.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { StatsStore } from "../../../src/stats/stats-store.js";
import { FakeClock } from "../../helpers/fake-clock.js";
import { windowedRateLimit } from "../../helpers/rate-limit.js";

// The check-then-increment shared by the kv cluster and mc backends, against a scripted store:
// what each step sees and returns is set by the test, so the race is exact.

const now = 1_700_000_040;

function setup() {
  const base = createBaseLimiter({ clock: new FakeClock(now) });
  const stats = createStatsManager();
  const limits = [
    windowedRateLimit(stats, "d.a", 5, Unit.MINUTE, { allOrNothing: true }),
    windowedRateLimit(stats, "d.b", 100, Unit.MINUTE, { allOrNothing: true }),
  ];
  const descriptors = ["a", "b"].map((value) =>
    create(RateLimitDescriptorSchema, { entries: [{ key: "k", value }] }),
  );
  const keys = base.generateCacheKeys("d", descriptors, limits, [1, 1], now);
  const compensated = new StatsStore().counter(
    "ratelimit.all_or_nothing.compensated",
  );
  return { base, limits, keys, compensated };
}

/** A scripted store: `read` returns `before`, `increment` returns `after`; calls are logged. */
function scripted(before: RequestCounters, after: readonly number[]) {
  const calls: string[] = [];
  return {
    calls,
    steps: {
      read: () => {
        calls.push("read");
        return Promise.resolve(before);
      },
      increment: () => {
        calls.push("increment");
        return Promise.resolve(after);
      },
      undo: () => {
        calls.push("undo");
        return Promise.resolve();
      },
    },
  };
}

describe("checkThenIncrement", () => {
  it("refuses without writing when a descriptor does not fit", async () => {
    const { base, limits, keys, compensated } = setup();
    const store = scripted({ current: [5, 10], previous: [0, 0] }, []);
    const statuses = await checkThenIncrement(
      base,
      keys,
      limits,
      [1, 1],
      undefined,
      now,
      store.steps,
      compensated,
    );
    expect(store.calls).toEqual(["read"]);
    expect(statuses.map((s) => s.code)).toEqual([Code.OVER_LIMIT, Code.OK]);
    // The untouched budget of the descriptor that fits.
    expect(statuses[1]!.limitRemaining).toBe(90);
    expect(compensated.value()).toBe(0);
  });

  it("admits when the values after the increment still fit", async () => {
    const { base, limits, keys, compensated } = setup();
    const store = scripted({ current: [3, 10], previous: [0, 0] }, [5, 11]);
    const statuses = await checkThenIncrement(
      base,
      keys,
      limits,
      [1, 1],
      undefined,
      now,
      store.steps,
      compensated,
    );
    expect(store.calls).toEqual(["read", "increment"]);
    expect(statuses.map((s) => s.code)).toEqual([Code.OK, Code.OK]);
    // Reported from the values after the increment (another request took one meanwhile).
    expect(statuses.map((s) => s.limitRemaining)).toEqual([0, 89]);
    expect(compensated.value()).toBe(0);
  });

  it("undoes the increments, refuses and counts the race when a value went over", async () => {
    const { base, limits, keys, compensated } = setup();
    // The read said 4 of 5: fits; two other requests took the budget before the increment.
    const store = scripted({ current: [4, 10], previous: [0, 0] }, [7, 12]);
    const statuses = await checkThenIncrement(
      base,
      keys,
      limits,
      [1, 1],
      undefined,
      now,
      store.steps,
      compensated,
    );
    expect(store.calls).toEqual(["read", "increment", "undo"]);
    expect(statuses.map((s) => s.code)).toEqual([Code.OVER_LIMIT, Code.OK]);
    // Answered from the counters without this request's hits: b keeps 100 − 11.
    expect(statuses[1]!.limitRemaining).toBe(89);
    expect(compensated.value()).toBe(1);
    expect(limits[0]!.stats.overLimit.value()).toBe(1);
  });

  it("lets a descriptor in shadow mode go over without compensating", async () => {
    const { base, keys, compensated } = setup();
    const stats = createStatsManager();
    const limits = [
      windowedRateLimit(stats, "d.a", 5, Unit.MINUTE, {
        allOrNothing: true,
        shadowMode: true,
      }),
      windowedRateLimit(stats, "d.b", 100, Unit.MINUTE, {
        allOrNothing: true,
      }),
    ];
    const store = scripted({ current: [4, 10], previous: [0, 0] }, [7, 11]);
    const statuses = await checkThenIncrement(
      base,
      keys,
      limits,
      [1, 1],
      undefined,
      now,
      store.steps,
      compensated,
    );
    expect(store.calls).toEqual(["read", "increment"]);
    expect(statuses.map((s) => s.code)).toEqual([Code.OK, Code.OK]);
    expect(compensated.value()).toBe(0);
  });
});
