// From an RLQS `BucketId` (an unordered map) to a rule of the domain's descriptor tree (an
// ordered nesting), and from the rule to the bucket's policy: its global rate L, or a blanket
// rule.
//
// How the map meets the tree: the entries are put in the order the tree itself asks for them.
// At each level, each remaining entry is looked up as ShouldRateLimit would look up that entry
// at that level (exact `key_value`, else the first matching wildcard rule, else the bare
// `key`); of the entries that reach a rule, the one whose rule comes first in the level's load
// order is taken, and the walk descends into that rule's nested level. The walk stops when
// every entry is placed (a match) or no remaining entry reaches a rule of the level (no rule).
// The ordered descriptor is then handed to `RateLimitConfig.getLimit`, the lookup
// ShouldRateLimit uses, so a bucket gets exactly the limit (stats key, replaces, shadow mode)
// a request descriptor with those entries in that order would get.

import { create } from "@bufbuild/protobuf";
import { matchesWildcard } from "../config/descriptor-lookup.js";
import type {
  DescriptorLevel,
  DescriptorNode,
  RateLimit,
  RateLimitConfig,
} from "../config/rate-limit-config.js";
import {
  RateLimitDescriptorSchema,
  RateLimitDescriptor_EntrySchema,
  type RateLimitDescriptor,
} from "../proto.js";

/**
 * The run-time override of a rule's limit for one descriptor (the override table's `find`,
 * docs/operations.md "Overrides"): the limit to use instead of `limit`, or `undefined`.
 */
export type LimitOverride = (
  domain: string,
  descriptor: RateLimitDescriptor,
  limit: RateLimit,
) => RateLimit | undefined;

/** What the service tells every stream about a bucket, and why. */
export type BucketPolicy =
  | {
      /** ALLOW_ALL: no rule (as ShouldRateLimit answers OK), an unknown domain, or `unlimited`. */
      readonly kind: "allow_all";
      readonly reason: "no_rule" | "unknown_domain" | "unlimited";
      /** Config path of the rule (`unlimited`); "" otherwise. */
      readonly rule: string;
    }
  | {
      /** The rule's rate is shared among the streams (token buckets). */
      readonly kind: "limited";
      /** L: the rule's requests per second (see {@link ratePerSecond}); 0 → DENY_ALL. */
      readonly ratePerSecond: number;
      /**
       * `shadow_mode` on the rule (or `SHADOW_MODE`): the streams are told ALLOW_ALL while
       * the split is computed and counted as if it were enforced.
       */
      readonly shadow: boolean;
      /** Config path of the rule (`<domain>.<ck1>.<ck2>…`). */
      readonly rule: string;
    };

/**
 * Returns the bucket's entries in the order the domain's tree asks for them (see the file
 * header), or `undefined` when some entry reaches no rule.
 */
export function orderBucketEntries(
  root: DescriptorLevel,
  bucket: Readonly<Record<string, string>>,
): [string, string][] | undefined {
  // Sorted first so that ties (two entries reaching the same rule) break the same way always.
  const remaining = Object.entries(bucket).sort(([a], [b]) =>
    a < b ? -1 : a > b ? 1 : 0,
  );
  const ordered: [string, string][] = [];
  let level: DescriptorLevel | undefined = root;
  while (remaining.length > 0) {
    if (level === undefined) return undefined;
    const current: DescriptorLevel = level;
    const rank = new Map<DescriptorNode, number>();
    let i = 0;
    for (const node of current.nodes.values()) rank.set(node, i++);
    let best: { at: number; rank: number; node: DescriptorNode } | undefined;
    remaining.forEach(([key, value], at) => {
      const node = reachedNode(current, key, value);
      if (node === undefined) return;
      const r = rank.get(node) ?? Number.MAX_SAFE_INTEGER;
      if (best === undefined || r < best.rank) best = { at, rank: r, node };
    });
    if (best === undefined) return undefined;
    const found: { at: number; node: DescriptorNode } = best;
    const [entry] = remaining.splice(found.at, 1);
    if (entry !== undefined) ordered.push(entry);
    level = found.node.children;
  }
  return ordered;
}

/** The node ShouldRateLimit's lookup reaches for one entry at one level, if any. */
function reachedNode(
  level: DescriptorLevel,
  key: string,
  value: string,
): DescriptorNode | undefined {
  const finalKey = key + "_" + value;
  const exact = level.nodes.get(finalKey);
  if (exact !== undefined) return exact;
  for (const wildcard of level.wildcards) {
    if (matchesWildcard(wildcard, finalKey)) return wildcard.node;
  }
  return level.nodes.get(key);
}

/**
 * The sustained rate of a limit, requests per second: `requests_per_unit / window` for fixed
 * and sliding windows (with `unit_multiplier`) and token buckets alike; calendar windows
 * (`time_zone:`) count at their nominal length (a month is its unit's nominal seconds, as the
 * dump and headers show it); in a `rate_limits:` list, the tightest of the list.
 */
export function ratePerSecond(limit: RateLimit): number {
  let rate =
    limit.windowSeconds > 0 ? limit.requestsPerUnit / limit.windowSeconds : 0;
  for (const extra of limit.extraLimits ?? []) {
    if (extra.unlimited || extra.windowSeconds <= 0) continue;
    rate = Math.min(rate, extra.requestsPerUnit / extra.windowSeconds);
  }
  return rate;
}

/**
 * Looks a bucket up in a domain's rules and returns its policy: no rule or unknown domain →
 * ALLOW_ALL; `unlimited` → ALLOW_ALL; else the rule's rate (0 → DENY_ALL at assignment) and
 * shadow mode.
 *
 * @param globalShadowMode - `SHADOW_MODE`: every limited bucket is in shadow mode
 */
export function bucketPolicy(
  config: RateLimitConfig,
  domain: string,
  bucket: Readonly<Record<string, string>>,
  globalShadowMode = false,
  limitOverride?: LimitOverride,
): BucketPolicy {
  const root = config.view?.domainRules(domain);
  if (root === undefined) {
    return { kind: "allow_all", reason: "unknown_domain", rule: "" };
  }
  const entries = orderBucketEntries(root, bucket);
  if (entries === undefined) {
    return { kind: "allow_all", reason: "no_rule", rule: "" };
  }
  const descriptor = create(RateLimitDescriptorSchema, {
    entries: entries.map(([key, value]) =>
      create(RateLimitDescriptor_EntrySchema, { key, value }),
    ),
  });
  const ruleLimit = config.getLimit(domain, descriptor);
  if (ruleLimit === undefined) {
    return { kind: "allow_all", reason: "no_rule", rule: "" };
  }
  const limit = limitOverride?.(domain, descriptor, ruleLimit) ?? ruleLimit;
  if (limit.unlimited) {
    return { kind: "allow_all", reason: "unlimited", rule: limit.fullKey };
  }
  return {
    kind: "limited",
    ratePerSecond: ratePerSecond(limit),
    shadow: limit.shadowMode || globalShadowMode,
    rule: limit.fullKey,
  };
}

/**
 * A bucket's canonical key: its entries sorted by key, `key=value` joined by `&` with `%`, `&`
 * and `=` escaped, so `{a: 'A', b: 'B'}` and `{b: 'B', a: 'A'}` are one bucket.
 */
export function bucketKey(bucket: Readonly<Record<string, string>>): string {
  return Object.entries(bucket)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([key, value]) => `${escapePart(key)}=${escapePart(value)}`)
    .join("&");
}

/**
 * The entries of a canonical bucket key ({@link bucketKey}); `undefined` for a string that is
 * not one.
 */
export function parseBucketKey(
  key: string,
): Record<string, string> | undefined {
  if (key === "") return undefined;
  const entries: Record<string, string> = {};
  for (const part of key.split("&")) {
    const eq = part.indexOf("=");
    if (eq < 0) return undefined;
    entries[unescapePart(part.slice(0, eq))] = unescapePart(part.slice(eq + 1));
  }
  return entries;
}

function unescapePart(text: string): string {
  return text.replace(/%(25|26|3d)/g, (_, hex: string) =>
    String.fromCharCode(parseInt(hex, 16)),
  );
}

function escapePart(text: string): string {
  return text.replace(/[%&=]/g, (c) => "%" + c.charCodeAt(0).toString(16));
}
