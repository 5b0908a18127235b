import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { createDecider } from "../../../src/limiter/decide.js";
import type {
  CounterBackend,
  CounterSlot,
} from "../../../src/limiter/counter-backend.js";
import { RateLimitPipeline } from "../../../src/limiter/pipeline.js";
import {
  RateLimitDescriptorSchema,
  RateLimitResponse_Code as Code,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../../../src/proto.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { StatsStore } from "../../../src/stats/stats-store.js";
import { FakeClock } from "../../helpers/fake-clock.js";
import { windowedRateLimit } from "../../helpers/rate-limit.js";
import { limitRequest } from "../../helpers/limit-request.js";

// The pipeline's check-then-increment (all-or-nothing charging on stores without an atomic
// operation: kv cluster or two instances, mc), against a scripted CounterBackend: what each
// step sees and returns is set by the test, so the race is exact.

const now = 1_700_000_040;

function setup() {
  const base = createDecider({ clock: new FakeClock(now) });
  const stats = createStatsManager();
  const limits = [
    windowedRateLimit(stats, "d.a", 5, Unit.MINUTE, { allOrNothing: true }),
    windowedRateLimit(stats, "d.b", 100, Unit.MINUTE, { allOrNothing: true }),
  ];
  const descriptors = ["a", "b"].map((value) =>
    create(RateLimitDescriptorSchema, { entries: [{ key: "k", value }] }),
  );
  const statsStore = new StatsStore();
  const compensated = {
    value: () =>
      statsStore.counter("ratelimit.all_or_nothing.compensated").value(),
  };
  return { base, limits, descriptors, statsStore, compensated };
}

/** The counters of one request as a scripted store reads them. */
interface RequestCounters {
  readonly current: readonly number[];
  readonly previous: readonly number[];
}

/**
 * A scripted store without an atomic all-or-nothing operation: `peek` ("read") reads
 * `before`, the first `add` ("increment") answers `after`, a second `add` is the "undo";
 * calls are logged.
 */
function scripted(before: RequestCounters, after: readonly number[]) {
  const calls: string[] = [];
  const backend: CounterBackend = {
    increment: () => {
      calls.push("charge");
    },
    takeTokens: () => {
      calls.push("tokens");
    },
    peek: (slots: readonly CounterSlot[]) => {
      calls.push("read");
      slots.forEach((slot, i) => {
        slot.current = before.current[i]!;
        slot.previous = before.previous[i]!;
      });
      return Promise.resolve();
    },
    add: (slots: readonly CounterSlot[]) => {
      if (calls.includes("increment")) {
        calls.push("undo");
      } else {
        calls.push("increment");
        slots.forEach((slot, i) => {
          slot.current = after[i]!;
        });
      }
      return Promise.resolve();
    },
    flush: () => Promise.resolve(),
    close: () => Promise.resolve(),
  };
  return { calls, backend };
}

describe("RateLimitPipeline all-or-nothing check-then-increment", () => {
  it("refuses without writing when a descriptor does not fit", async () => {
    const { base, limits, descriptors, statsStore, compensated } = setup();
    const store = scripted({ current: [5, 10], previous: [0, 0] }, []);
    const statuses = await new RateLimitPipeline({
      backend: store.backend,
      decider: base,
      statsStore,
    }).doLimit(limitRequest("d", descriptors, limits, [1, 1]));
    expect(store.calls).toEqual(["read"]);
    expect(statuses.map((s) => s.code)).toEqual([Code.OVER_LIMIT, Code.OK]);
    // The untouched budget of the descriptor that fits.
    expect(statuses[1]!.limitRemaining).toBe(90);
    expect(compensated.value()).toBe(0);
  });

  it("admits when the values after the increment still fit", async () => {
    const { base, limits, descriptors, statsStore, compensated } = setup();
    const store = scripted({ current: [3, 10], previous: [0, 0] }, [5, 11]);
    const statuses = await new RateLimitPipeline({
      backend: store.backend,
      decider: base,
      statsStore,
    }).doLimit(limitRequest("d", descriptors, limits, [1, 1]));
    expect(store.calls).toEqual(["read", "increment"]);
    expect(statuses.map((s) => s.code)).toEqual([Code.OK, Code.OK]);
    // Reported from the values after the increment (another request took one meanwhile).
    expect(statuses.map((s) => s.limitRemaining)).toEqual([0, 89]);
    expect(compensated.value()).toBe(0);
  });

  it("undoes the increments, refuses and counts the race when a value went over", async () => {
    const { base, limits, descriptors, statsStore, compensated } = setup();
    // The read said 4 of 5: fits; two other requests took the budget before the increment.
    const store = scripted({ current: [4, 10], previous: [0, 0] }, [7, 12]);
    const statuses = await new RateLimitPipeline({
      backend: store.backend,
      decider: base,
      statsStore,
    }).doLimit(limitRequest("d", descriptors, limits, [1, 1]));
    expect(store.calls).toEqual(["read", "increment", "undo"]);
    expect(statuses.map((s) => s.code)).toEqual([Code.OVER_LIMIT, Code.OK]);
    // Answered from the counters without this request's hits: b keeps 100 − 11.
    expect(statuses[1]!.limitRemaining).toBe(89);
    expect(compensated.value()).toBe(1);
    expect(limits[0]!.stats.overLimit.value()).toBe(1);
  });

  it("lets a descriptor in shadow mode go over without compensating", async () => {
    const { base, descriptors, statsStore, compensated } = setup();
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
    const statuses = await new RateLimitPipeline({
      backend: store.backend,
      decider: base,
      statsStore,
    }).doLimit(limitRequest("d", descriptors, limits, [1, 1]));
    expect(store.calls).toEqual(["read", "increment"]);
    expect(statuses.map((s) => s.code)).toEqual([Code.OK, Code.OK]);
    expect(compensated.value()).toBe(0);
  });
});
