import type { Counter, StatsStore } from "../stats/stats-store.js";

/**
 * Counter of all-or-nothing requests whose check-then-increment lost a race (another request
 * took the budget between the read and the increment) and were compensated.
 */
export const allOrNothingCompensatedStat =
  "ratelimit.all_or_nothing.compensated";

/**
 * Returns the {@link allOrNothingCompensatedStat} counter, allocated in `statsStore` on its
 * first `add` only, so deployments without all-or-nothing domains keep exactly the reference's
 * set of statistics (nothing new appears at 0 in pull stats or `/stats`).
 */
export function lazyCompensatedCounter(
  statsStore: StatsStore | undefined,
): Pick<Counter, "add"> | undefined {
  if (statsStore === undefined) return undefined;
  let counter: Counter | undefined;
  return {
    add(n) {
      (counter ??= statsStore.counter(allOrNothingCompensatedStat)).add(n);
    },
  };
}
