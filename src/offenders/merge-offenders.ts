// Merging the top-offender answers of several processes that each counted a share of the
// traffic (the workers of WORKERS > 1): the counts of a descriptor value add up, and so do the
// Space-Saving error bounds.

import { create } from "@bufbuild/protobuf";
import { timestampMs, type Timestamp } from "@bufbuild/protobuf/wkt";
import {
  OffenderSchema,
  RuleOffendersSchema,
  TopOffendersResponseSchema,
  type Offender,
  type TopOffendersResponse,
} from "../proto.js";

/**
 * Merges the offender lists of one rule from several processes into the `k` heaviest.
 *
 * A value's `hits`, `overLimit` and `error` are the sums of the lists that hold it. A list of
 * `k` entries that lacks the value may still have counted it, at most as much as that list's
 * lightest entry (Space-Saving's bound on an untracked or lower-ranked value): that much is
 * added to the value's `hits` and `error`, so that, as in one process, `hits` is never below
 * the true count and at most `error` above it. `overLimit` adds only what the lists hold.
 *
 * @param lists - each process's offenders, heaviest first (at most `k` each)
 * @param k - offenders to keep, ≥ 1
 * @returns heaviest first (ties by descriptor text)
 */
export function mergeOffenderLists(
  lists: readonly (readonly Offender[])[],
  k: number,
): Offender[] {
  const merged = new Map<
    string,
    { hits: bigint; overLimit: bigint; error: bigint; seen: Set<number> }
  >();
  lists.forEach((list, i) => {
    for (const offender of list) {
      let m = merged.get(offender.descriptor);
      if (m === undefined) {
        m = { hits: 0n, overLimit: 0n, error: 0n, seen: new Set() };
        merged.set(offender.descriptor, m);
      }
      m.hits += offender.hits;
      m.overLimit += offender.overLimit;
      m.error += offender.error;
      m.seen.add(i);
    }
  });
  lists.forEach((list, i) => {
    const lightest = list.length >= k ? list[list.length - 1]?.hits : undefined;
    if (lightest === undefined || lightest === 0n) return;
    for (const m of merged.values()) {
      if (m.seen.has(i)) continue;
      m.hits += lightest;
      m.error += lightest;
    }
  });
  return [...merged]
    .sort(([a, x], [b, y]) =>
      x.hits !== y.hits
        ? x.hits > y.hits
          ? -1
          : 1
        : a < b
          ? -1
          : a > b
            ? 1
            : 0,
    )
    .slice(0, k)
    .map(([descriptor, m]) =>
      create(OffenderSchema, {
        descriptor,
        hits: m.hits,
        overLimit: m.overLimit,
        error: m.error,
      }),
    );
}

/**
 * Groups the per-rule parts of several processes' answers by rule (domain and stats key), in
 * the order the rules first appear.
 */
export function groupByRule<
  T extends { readonly domain: string; readonly rule: string },
>(parts: Iterable<T>): [T, ...T[]][] {
  const byRule = new Map<string, [T, ...T[]]>();
  for (const part of parts) {
    const key = `${part.domain}\u0000${part.rule}`;
    const list = byRule.get(key);
    if (list === undefined) byRule.set(key, [part]);
    else list.push(part);
  }
  return [...byRule.values()];
}

/** The earlier of two optional timestamps (either when the other is unset). */
export function earlier(
  a: Timestamp | undefined,
  b: Timestamp | undefined,
): Timestamp | undefined {
  if (a === undefined) return b;
  if (b === undefined) return a;
  return timestampMs(b) < timestampMs(a) ? b : a;
}

/**
 * Merges `TopOffenders` answers of several processes: per rule (by domain and stats key), the
 * exact `hits` add up, `since` is the earliest, `window` and `counters` are the first
 * answer's (every process runs the same config and settings), and the offenders merge as
 * {@link mergeOffenderLists} says. Rules sorted by stats key, as one process answers.
 *
 * @param k - offenders per rule, ≥ 1 (the request's k, or `TOP_OFFENDERS_K`)
 */
export function mergeTopOffenders(
  answers: readonly TopOffendersResponse[],
  k: number,
): TopOffendersResponse {
  const rules = groupByRule(answers.flatMap((a) => a.rules)).map((parts) => {
    const first = parts[0];
    let since = first.since;
    let hits = 0n;
    for (const part of parts) {
      hits += part.hits;
      since = earlier(since, part.since);
    }
    return create(RuleOffendersSchema, {
      rule: first.rule,
      domain: first.domain,
      ...(since !== undefined ? { since } : {}),
      hits,
      ...(first.window !== undefined ? { window: first.window } : {}),
      counters: first.counters,
      offenders: mergeOffenderLists(
        parts.map((p) => p.offenders),
        k,
      ),
    });
  });
  rules.sort((a, b) =>
    a.rule < b.rule
      ? -1
      : a.rule > b.rule
        ? 1
        : a.domain < b.domain
          ? -1
          : a.domain > b.domain
            ? 1
            : 0,
  );
  return create(TopOffendersResponseSchema, { rules });
}
