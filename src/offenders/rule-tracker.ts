// The traffic of one rule over its current and previous window: two Space-Saving sketches
// that swap at each window boundary, and the merge that answers "who are the heaviest over
// both windows". Windows are the rule's own (unit × unit_multiplier), aligned as its counters
// are: at multiples of the window since the Unix epoch, or at the calendar period's bounds
// for a rule with `time_zone` (docs/configuration.md).

import { calendarOf, type Algorithm } from "../config/algorithm.js";
import type { RateLimitDescriptor_Entry } from "../proto.js";
import { SpaceSaving, type SketchEntry } from "./space-saving.js";

/** The window a rule counts in, as its limit says it. */
export interface TrackedWindow {
  /** Window length in seconds (`unitSeconds × unitMultiplier`), ≥ 1. */
  readonly windowSeconds: number;
  /**
   * The rule's algorithm: a window whose bounds are a calendar period (`time_zone`) counts by
   * that period; any other (epoch-aligned windows, token buckets) by `windowSeconds` since
   * the Unix epoch.
   */
  readonly algorithm: Algorithm;
}

/** One offender of a rule, as {@link RuleTracker.top} reports it. */
export interface OffenderEstimate {
  /** The request's entries as `k=v,k2=v2`. */
  readonly descriptor: string;
  /** Hits over the current and previous window: true ≤ `hits` ≤ true + `error`. */
  readonly hits: number;
  /** Refused (OVER_LIMIT) hits over both windows, same bound. */
  readonly overLimit: number;
  /**
   * Most `hits` and `overLimit` may exceed the true counts by; at most
   * `(hits of both windows) / countersPerWindow`.
   */
  readonly error: number;
}

/**
 * The heavy hitters of one rule over its current and previous window, in fixed memory: two
 * sketches of `countersPerWindow` counters each. Rotation is lazy: the first add or read at or
 * after the current window's end moves the windows on (by the caller's clock), so an idle rule
 * costs nothing.
 */
export class RuleTracker {
  /** The rule's domain. */
  readonly domain: string;
  /** The rule's stats key as `/rlconfig` names it, e.g. `rl.foo_bar`. */
  readonly rule: string;
  /**
   * The entry key of the rule's descriptors when they have one entry (a rule's descriptors
   * all have as many entries as the rule is deep), else `undefined`. Such a descriptor is
   * counted under its value alone when its key is this one (no string is built per decision),
   * and under {@link otherKeyMark} + `key=value` otherwise; see {@link RuleTracker.add}.
   */
  readonly entryKey: string | undefined;
  /** Config generation this tracker last checked its window against (the tracker's owner sets it). */
  generation: number;
  private window: TrackedWindow;
  private current: SpaceSaving;
  private previous: SpaceSaving;
  /** End of the current window, Unix seconds (exclusive); 0 before the first add or read. */
  private endSeconds = 0;
  /** Start of the previous window. */
  private previousStartSeconds = 0;

  /**
   * @param entryKey - see {@link RuleTracker.entryKey}
   * @param countersPerWindow - Space-Saving counters per window (`m`), an integer ≥ 1
   * @throws RangeError when `countersPerWindow` is not an integer ≥ 1 or the window is shorter
   *   than a second
   */
  constructor(
    domain: string,
    rule: string,
    entryKey: string | undefined,
    window: TrackedWindow,
    countersPerWindow: number,
    generation: number,
  ) {
    checkWindow(window);
    this.domain = domain;
    this.rule = rule;
    this.entryKey = entryKey;
    this.window = window;
    this.generation = generation;
    this.current = new SpaceSaving(countersPerWindow);
    this.previous = new SpaceSaving(countersPerWindow);
  }

  /** Window length in seconds. */
  get windowSeconds(): number {
    return this.window.windowSeconds;
  }

  /**
   * Whether `window` counts like this tracker's window: same length and the same calendar
   * (unit, time zone, week start), so a config reload that keeps the rule's window keeps its
   * counts.
   */
  hasWindow(window: TrackedWindow): boolean {
    const mine = this.window;
    if (mine.windowSeconds !== window.windowSeconds) return false;
    const a = calendarOf(mine.algorithm);
    const b = calendarOf(window.algorithm);
    if (a === b) return true;
    if (a === undefined || b === undefined) return false;
    return (
      a.unit === b.unit &&
      a.timeZone === b.timeZone &&
      a.weekStart === b.weekStart
    );
  }

  /**
   * Forgets the counts and counts in `window` from now on (the rule's window changed with a
   * config reload).
   *
   * @throws RangeError when the window is shorter than a second
   */
  reset(window: TrackedWindow): void {
    checkWindow(window);
    this.window = window;
    this.current.clear();
    this.previous.clear();
    this.endSeconds = 0;
    this.previousStartSeconds = 0;
  }

  /**
   * Counts `hits` for a descriptor at `nowSeconds`, `overLimit` of them refused.
   *
   * @param item - the descriptor as counted: for a one-entry rule its value when the key is
   *   {@link RuleTracker.entryKey}, else {@link otherKeyMark} + `key=value`; for a deeper rule
   *   `k=v,k2=v2` ({@link descriptorText})
   * @param hits - > 0
   * @param overLimit - 0 or `hits`
   * @param nowSeconds - Unix seconds from the service clock
   */
  add(item: string, hits: number, overLimit: number, nowSeconds: number): void {
    if (nowSeconds >= this.endSeconds) this.advance(nowSeconds);
    this.current.add(item, hits, overLimit);
  }

  /**
   * Whether the rule had no traffic in the current and the previous window at `nowSeconds`
   * (moves the windows on first).
   */
  isIdle(nowSeconds: number): boolean {
    if (nowSeconds >= this.endSeconds) this.advance(nowSeconds);
    return this.current.total === 0 && this.previous.total === 0;
  }

  /** Hits counted in the current and the previous window (as of the last add or read). */
  get totalHits(): number {
    return this.current.total + this.previous.total;
  }

  /** Start of the previous window, Unix seconds, at `nowSeconds` (moves the windows on first). */
  sinceSeconds(nowSeconds: number): number {
    if (nowSeconds >= this.endSeconds) this.advance(nowSeconds);
    return this.previousStartSeconds;
  }

  /**
   * The `k` heaviest descriptors over the current and the previous window at `nowSeconds`,
   * heaviest first (ties by descriptor text). Merges the two sketches: a descriptor missing
   * from a full sketch is counted with that sketch's smallest counter (the most it can have
   * had there) and the same added to its error, so each estimate stays within
   * `[true, true + error]`.
   *
   * @param k - most offenders returned, ≥ 0
   */
  top(k: number, nowSeconds: number): OffenderEstimate[] {
    if (nowSeconds >= this.endSeconds) this.advance(nowSeconds);
    const { current, previous } = this;
    const currentMin = current.minCount;
    const previousMin = previous.minCount;
    const merged: OffenderEstimate[] = [];
    const both = (
      item: string,
      c: SketchEntry | undefined,
      p: SketchEntry | undefined,
    ): void => {
      merged.push({
        descriptor: this.textOf(item),
        hits: (c?.count ?? currentMin) + (p?.count ?? previousMin),
        overLimit: (c?.overLimit ?? currentMin) + (p?.overLimit ?? previousMin),
        error: (c?.error ?? currentMin) + (p?.error ?? previousMin),
      });
    };
    current.forEach((c) => {
      both(c.item, c, previous.get(c.item));
    });
    previous.forEach((p) => {
      if (current.get(p.item) === undefined) both(p.item, undefined, p);
    });
    merged.sort((a, b) =>
      a.hits !== b.hits
        ? b.hits - a.hits
        : a.descriptor < b.descriptor
          ? -1
          : a.descriptor > b.descriptor
            ? 1
            : 0,
    );
    if (merged.length > k) merged.length = k;
    return merged;
  }

  /** The descriptor text (`k=v,k2=v2`) of a counted item. */
  private textOf(item: string): string {
    if (item.charCodeAt(0) === 0) return item.slice(1);
    return this.entryKey === undefined ? item : this.entryKey + "=" + item;
  }

  /** Moves the windows on to the one containing `nowSeconds` (≥ the current end). */
  private advance(nowSeconds: number): void {
    const { windowSeconds, algorithm } = this.window;
    const calendar = calendarOf(algorithm);
    let start: number;
    let end: number;
    let previousStart: number;
    if (calendar === undefined) {
      start = nowSeconds - (nowSeconds % windowSeconds);
      end = start + windowSeconds;
      previousStart = start - windowSeconds;
    } else {
      const period = calendar.period(Math.floor(nowSeconds));
      start = period.startSeconds;
      end = period.endSeconds;
      previousStart = calendar.period(start - 1).startSeconds;
      // Leaves the window's cached period on the current one, which the decision path asks
      // for next (a period outside the cache costs a dozen `Intl` offset look-ups).
      calendar.period(Math.floor(nowSeconds));
    }
    if (this.endSeconds !== 0 && start === this.endSeconds) {
      // The next window: the current one becomes the previous one.
      const emptied = this.previous;
      this.previous = this.current;
      this.current = emptied;
      emptied.clear();
    } else {
      // The first window, or a gap of a whole window or more: nothing recent is left.
      this.current.clear();
      this.previous.clear();
    }
    this.endSeconds = end;
    this.previousStartSeconds = previousStart;
  }
}

function checkWindow(window: TrackedWindow): void {
  if (!(window.windowSeconds >= 1))
    throw new RangeError(
      `invalid window of ${window.windowSeconds} s: expected ≥ 1 s`,
    );
}

/**
 * Starts the counted item of a one-entry descriptor whose key is not its rule's
 * {@link RuleTracker.entryKey} (possible only through a wildcard rule matching several keys):
 * the item is then the mark and `key=value`. A NUL, which HTTP header values cannot hold.
 */
export const otherKeyMark = "\u0000";

/**
 * A descriptor's entries as `k=v,k2=v2` (keys and values as sent; a `,` or `=` inside one is
 * not escaped).
 */
export function descriptorText(
  entries: readonly RateLimitDescriptor_Entry[],
): string {
  let text = "";
  const n = entries.length;
  for (let i = 0; i < n; i++) {
    const entry = entries[i];
    if (entry === undefined) break;
    if (i > 0) text += ",";
    text += entry.key + "=" + entry.value;
  }
  return text;
}
