import { create } from "@bufbuild/protobuf";
import { afterEach, describe, expect, it } from "vitest";
import { MemoryCounterBackend } from "../../../src/backends/memory/memory-counter-backend.js";
import type { RateLimit } from "../../../src/config/rate-limit-config.js";
import { createDecider } from "../../../src/limiter/decide.js";
import type { LimitRequest } from "../../../src/limiter/limit-request.js";
import { LocalMode } from "../../../src/limiter/local-mode.js";
import { OutageJournal } from "../../../src/limiter/outage-journal.js";
import { RateLimitPipeline } from "../../../src/limiter/pipeline.js";
import {
  RateLimitDescriptorSchema,
  RateLimitResponse_Code as Code,
  RateLimitResponse_DescriptorStatusSchema,
  RateLimitResponse_RateLimit_Unit as Unit,
  type RateLimitResponse_DescriptorStatus,
} from "../../../src/proto.js";
import {
  createStatsManager,
  type StatsManager,
} from "../../../src/stats/stats-manager.js";
import { FakeClock } from "../../helpers/fake-clock.js";
import { slidingWindow, testRateLimit } from "../../helpers/rate-limit.js";
import { limitRequest } from "../../helpers/limit-request.js";

const open: LocalMode[] = [];

afterEach(async () => {
  for (const mode of open.splice(0)) await mode.close();
});

interface Fixture {
  readonly clock: FakeClock;
  readonly stats: StatsManager;
  readonly journal: OutageJournal;
  readonly local: LocalMode;
  request(limit: RateLimit, value?: string): LimitRequest;
}

function fixture(localShare = 1, shadowed = true): Fixture {
  const clock = new FakeClock(60_000);
  const stats = createStatsManager();
  const journal = new OutageJournal();
  const local = new LocalMode({
    localShare,
    createLocalBackend: () => new MemoryCounterBackend({ clock }),
    createLocalLimiter: (counters) =>
      new RateLimitPipeline({
        backend: counters,
        decider: createDecider({ clock }),
      }),
    journal,
    shadowed,
    clock,
  });
  open.push(local);
  return {
    clock,
    stats,
    journal,
    local,
    request: (limit, value = "v") =>
      limitRequest(
        "d",
        [create(RateLimitDescriptorSchema, { entries: [{ key: "k", value }] })],
        [limit],
        [1],
      ),
  };
}

/** The store's answer to one descriptor: OK. */
function storeOk(): RateLimitResponse_DescriptorStatus[] {
  return [create(RateLimitResponse_DescriptorStatusSchema, { code: Code.OK })];
}

async function codes(
  f: Fixture,
  request: LimitRequest,
  n: number,
): Promise<Code[]> {
  const out: Code[] = [];
  for (let i = 0; i < n; i++)
    out.push((await f.local.answer(request, true))[0]!.code);
  return out;
}

describe("LocalMode", () => {
  it("scales each limit by the local share, at least 1", async () => {
    const f = fixture(0.25);
    const ten = testRateLimit(f.stats, "d.k", 10);
    const answered = await codes(f, f.request(ten), 4);
    expect(answered).toEqual([
      Code.OK,
      Code.OK,
      Code.OVER_LIMIT,
      Code.OVER_LIMIT,
    ]);
    const [status] = await f.local.answer(f.request(ten), true);
    expect(status!.currentLimit?.requestsPerUnit).toBe(2);
    const one = testRateLimit(f.stats, "d.one", 1);
    expect(await codes(f, f.request(one, "one"), 2)).toEqual([
      Code.OK,
      Code.OVER_LIMIT,
    ]);
    // The rate limit itself is untouched.
    expect(ten.requestsPerUnit).toBe(10);
  });

  it("scales every limit of a rate_limits list, not only the first", async () => {
    const f = fixture(0.25);
    const hour = testRateLimit(f.stats, "d.k.hour", 8, Unit.HOUR, {
      cacheKeySuffix: "_h",
    });
    const minute = testRateLimit(f.stats, "d.k", 100, Unit.MINUTE, {
      extraLimits: [hour],
    });
    // The hour limit of 8 is 2 here: the third call is refused by it.
    expect(await codes(f, f.request(minute), 3)).toEqual([
      Code.OK,
      Code.OK,
      Code.OVER_LIMIT,
    ]);
    expect(hour.requestsPerUnit).toBe(8);
  });

  it("counts the rule statistics of answers the store did not count, mutes the others", async () => {
    const f = fixture();
    const limit = testRateLimit(f.stats, "d.k", 10);
    await f.local.answer(f.request(limit), true);
    expect(limit.stats.totalHits.value()).toBe(1);
    expect(limit.stats.withinLimit.value()).toBe(1);
    // A failed store call may have counted them: muted.
    await f.local.answer(f.request(limit), false);
    expect(limit.stats.totalHits.value()).toBe(1);
    // The shadow limiter counts what the store decided: muted too.
    await f.local.countAlongside(f.request(limit), storeOk());
    expect(limit.stats.totalHits.value()).toBe(1);
    expect(limit.stats.withinLimit.value()).toBe(1);
  });

  it("continues from the counts of the shadow limiter, which the journal does not record", async () => {
    const f = fixture();
    const limit = testRateLimit(f.stats, "d.k", 5);
    for (let i = 0; i < 3; i++)
      await f.local.countAlongside(f.request(limit), storeOk());
    expect(f.journal.size).toBe(0);
    expect(await codes(f, f.request(limit), 3)).toEqual([
      Code.OK,
      Code.OK,
      Code.OVER_LIMIT,
    ]);
    expect(
      f.journal.take(f.clock.nowSeconds()).map((s) => s.increment),
    ).toEqual([3]);
  });

  it("keeps the local over-limit verdict after recovery until the outage's windows end", async () => {
    const f = fixture();
    const limit = testRateLimit(f.stats, "d.k", 2);
    expect(await codes(f, f.request(limit), 3)).toEqual([
      Code.OK,
      Code.OK,
      Code.OVER_LIMIT,
    ]);
    // The store answers again and says OK: it never saw the local hits.
    const [during] = await f.local.countAlongside(f.request(limit), storeOk());
    expect(during!.code).toBe(Code.OVER_LIMIT);
    // A descriptor the local limiter finds OK keeps the store's answer.
    const other = testRateLimit(f.stats, "d.o", 100);
    const store = storeOk();
    const [kept] = await f.local.countAlongside(f.request(other, "o"), store);
    expect(kept).toBe(store[0]);
    // The minute of the outage has ended: the store decides alone.
    f.clock.seconds += 60;
    const later = storeOk();
    await f.local.countAlongside(f.request(limit), later);
    await f.local.countAlongside(f.request(limit), later);
    const [after] = await f.local.countAlongside(f.request(limit), later);
    expect(after!.code).toBe(Code.OK);
  });

  it("keeps a sliding window's verdict one window longer", async () => {
    const f = fixture();
    const limit = testRateLimit(f.stats, "d.s", 1, undefined, {
      algorithm: slidingWindow(60),
    });
    await codes(f, f.request(limit), 2);
    f.clock.seconds += 60;
    // The previous window still weighs: the local limiter is over limit, and wins.
    const [status] = await f.local.countAlongside(f.request(limit), storeOk());
    expect(status!.code).toBe(Code.OVER_LIMIT);
  });

  it("does not outlive the outage when local is only a domain's mode", async () => {
    const f = fixture(1, false);
    const limit = testRateLimit(f.stats, "d.k", 1);
    await codes(f, f.request(limit), 2);
    const [status] = await f.local.countAlongside(f.request(limit), storeOk());
    expect(status!.code).toBe(Code.OK);
  });

  it("checks its share", () => {
    expect(() => fixture(0)).toThrow(
      "invalid localShare 0: expected 0 < share ≤ 1",
    );
    expect(() => fixture(1.5)).toThrow(/localShare/);
  });
});
