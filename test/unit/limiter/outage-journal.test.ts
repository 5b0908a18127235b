import { afterEach, describe, expect, it } from "vitest";
import { MemoryCounterBackend } from "../../../src/backends/memory/memory-counter-backend.js";
import type { CounterSlot } from "../../../src/limiter/counter-backend.js";
import {
  OutageJournal,
  recordingBackend,
  type ReplayOutcome,
} from "../../../src/limiter/outage-journal.js";
import { FakeClock } from "../../helpers/fake-clock.js";

const backends: MemoryCounterBackend[] = [];

afterEach(async () => {
  for (const backend of backends.splice(0)) await backend.close();
});

/** A fixed-window (or sliding) counter slot of a 60 s window ending at 60 060. */
function slot(
  cacheKey: string,
  increment: number,
  sliding = false,
): CounterSlot {
  return {
    cacheKey,
    previousCacheKey: sliding ? `${cacheKey}-previous` : undefined,
    perSecond: false,
    expirationSeconds: 0,
    windowSeconds: 60,
    windowEndSeconds: 60_060,
    sliding,
    requestsPerUnit: 10,
    shadowMode: false,
    increment,
    current: 0,
    previous: 0,
  };
}

/** What a write received: cache key → hits. */
type Written = Record<string, number>[];

function writer(written: Written, fail = false) {
  return (slots: readonly CounterSlot[]): void => {
    if (fail) throw new Error("store down again");
    written.push(
      Object.fromEntries(slots.map((s) => [s.cacheKey, s.increment])),
    );
  };
}

describe("OutageJournal", () => {
  it("takes back a charge the store counted after all, never below 0", () => {
    const journal = new OutageJournal();
    journal.record([slot("a", 3), slot("b", 1)]);
    journal.takeBack([slot("a", 1), slot("b", 2), slot("c", 1)]);
    const taken = journal.take(60_000);
    expect(
      Object.fromEntries(taken.map((s) => [s.cacheKey, s.increment])),
    ).toEqual({ a: 2 });
  });

  it("records the local charges during an outage and replays them once after recovery", async () => {
    const clock = new FakeClock(60_000);
    const journal = new OutageJournal();
    const memory = new MemoryCounterBackend({ clock });
    backends.push(memory);
    const recorded = recordingBackend(memory, journal);
    // The outage: three charges on one counter, one on another.
    for (let i = 0; i < 3; i++)
      await recorded.increment([slot("a", 1)], clock.nowSeconds());
    await recorded.increment([slot("b", 2)], clock.nowSeconds());
    // Reads are not recorded.
    await recorded.peek([slot("a", 0)]);
    expect(journal.size).toBe(2);
    const written: Written = [];
    clock.seconds += 5;
    const outcome = await journal.replay(writer(written), clock.nowSeconds());
    expect(outcome).toEqual<ReplayOutcome>({ ok: true, counters: 2, hits: 5 });
    expect(written).toEqual([{ a: 3, b: 2 }]);
    // Once: nothing is left for the next recovery.
    expect(journal.size).toBe(0);
    expect(journal.replay(writer(written), clock.nowSeconds())).toBeUndefined();
    expect(written).toHaveLength(1);
  });

  it("records the copy of a slot without its previous key, with the store's lifetime", () => {
    const journal = new OutageJournal();
    journal.record([slot("s", 4, true)]);
    const [taken] = journal.take(60_000);
    expect(taken).toMatchObject({
      cacheKey: "s",
      previousCacheKey: undefined,
      expirationSeconds: 120,
      increment: 4,
    });
  });

  it("takes back refunds, never below 0", () => {
    const journal = new OutageJournal();
    journal.record([slot("a", 3)]);
    journal.record([slot("a", -1)]);
    journal.record([slot("b", -2)]);
    expect(journal.take(60_000).map((s) => [s.cacheKey, s.increment])).toEqual([
      ["a", 2],
    ]);
    journal.record([slot("a", 1)]);
    journal.record([slot("a", -5)]);
    expect(journal.take(60_000)).toEqual([]);
  });

  it("replays only windows still open (a sliding window's one window longer)", async () => {
    const journal = new OutageJournal();
    journal.record([slot("fixed", 1), slot("sliding", 1, true)]);
    const written: Written = [];
    await journal.replay(writer(written), 60_060);
    expect(written).toEqual([{ sliding: 1 }]);
    journal.record([slot("fixed", 1)]);
    expect(journal.replay(writer(written), 60_060)).toBeUndefined();
    expect(journal.size).toBe(0);
  });

  it("keeps a failed replay for the next recovery, merged with newer hits", async () => {
    const journal = new OutageJournal();
    journal.record([slot("a", 3)]);
    const failed = await journal.replay(writer([], true), 60_000);
    expect(failed).toMatchObject({ ok: false, counters: 1, hits: 3 });
    expect(failed?.ok === false && String(failed.error)).toBe(
      "Error: store down again",
    );
    journal.record([slot("a", 1)]);
    const written: Written = [];
    await journal.replay(writer(written), 60_000);
    expect(written).toEqual([{ a: 4 }]);
  });

  it("runs one replay at a time; hits recorded meanwhile wait for the next", async () => {
    const journal = new OutageJournal();
    journal.record([slot("a", 1)]);
    let finish: () => void = () => undefined;
    const running = journal.replay(
      () =>
        new Promise<void>((resolve) => {
          finish = resolve;
        }),
      60_000,
    );
    expect(running).toBeDefined();
    // Let the write start (it runs in the background).
    await Promise.resolve();
    journal.record([slot("a", 2)]);
    expect(journal.replay(writer([]), 60_000)).toBeUndefined();
    finish();
    expect(await running).toEqual({ ok: true, counters: 1, hits: 1 });
    const written: Written = [];
    await journal.replay(writer(written), 60_000);
    expect(written).toEqual([{ a: 2 }]);
  });
});
