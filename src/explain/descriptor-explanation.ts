import { matchesWildcard, patternValue } from "../config/descriptor-lookup.js";
import type {
  ConfigView,
  DescriptorLevel,
  DescriptorNode,
  RateLimit,
  RuleSource,
} from "../config/rate-limit-config.js";
import type {
  RateLimitDescriptor,
  RateLimitDescriptor_Entry,
} from "../proto.js";
import type { AppliedOverride, ExplainOverrides } from "./run-time-override.js";

// The recording variant of `findRateLimit` (config/descriptor-lookup.ts) for the Explain API,
// walking the config's read-only view. ShouldRateLimit never calls it, so the lookup on the hot
// path stays as it is; the unit and property tests check that both walks agree.

/**
 * How one request entry met the config tree at one level (docs/reference-parity.md#matching):
 * - `exact`: `key_value` equals a rule's composite key;
 * - `wildcard`: the first wildcard rule (config order) matching `key_value`;
 * - `key-only`: the bare-key default rule;
 * - `whitelisted`: the last entry matched (exactly or by wildcard) a rule without a rate
 *   limit while the key-only default of the same level has one: the value is exempt;
 * - `no-such-key`: nothing matched at this level (the walk stops, no limit);
 * - `deeper-than-config`: the previous rule has no nested rules (the walk stops, no limit);
 * - `unknown-domain`: the domain is not loaded;
 * - `override`: the descriptor carries its own limit; config matching is skipped.
 */
export type MatchOutcome =
  | "exact"
  | "wildcard"
  | "key-only"
  | "whitelisted"
  | "no-such-key"
  | "deeper-than-config"
  | "unknown-domain"
  | "override";

/** One step of a match path. */
export interface MatchRecord {
  /** Index of the request entry (0-based). */
  readonly entryIndex: number;
  /** The request entry's key and value ("" for the `unknown-domain` / `override` steps). */
  readonly key: string;
  readonly value: string;
  readonly outcome: MatchOutcome;
  /** The rule matched, when one was. */
  readonly node: DescriptorNode | undefined;
  /** Wildcard patterns tried in vain, in order, after the exact lookup missed. */
  readonly wildcardsTried: readonly string[];
}

/** What {@link explainLimit} found for one request descriptor. */
export interface LimitExplanation {
  /** Whether the domain is loaded. */
  readonly domainFound: boolean;
  /** The walk, one step per entry reached (plus the step where it stopped). */
  readonly path: readonly MatchRecord[];
  /**
   * The limit that applies, with `shareThresholdValues` as the lookup sets them (so cache keys
   * are the ones ShouldRateLimit uses). Its stats handles are those of the rule, not of a
   * derived stats key: do not count with them.
   */
  readonly limit: RateLimit | undefined;
  /** Where the applying rule is defined; undefined for an override or no limit. */
  readonly source: RuleSource | undefined;
  /** The limit is the request's own override. */
  readonly fromOverride: boolean;
  /**
   * The run-time override (admin API) that replaced the rule's limit; `limit` is then the
   * override's. Absent when none applies.
   */
  readonly runTimeOverride?: AppliedOverride | undefined;
}

/**
 * Explains how one request descriptor meets the config: the match path entry by entry and the
 * limit that applies, with the same order of checks as `RateLimitConfig.getLimit` (unknown
 * domain, then override, then the walk), then the run-time override probed where
 * ShouldRateLimit probes it (after a walk that found a limit). Reads only: counts no
 * statistic (not even `domain_not_found`).
 *
 * @param overrides - the process's run-time overrides; none when undefined
 */
export function explainLimit(
  view: ConfigView,
  domain: string,
  descriptor: RateLimitDescriptor,
  overrides?: ExplainOverrides,
): LimitExplanation {
  const root = view.domainRules(domain);
  if (root === undefined) {
    return {
      domainFound: false,
      path: [
        {
          entryIndex: 0,
          key: "",
          value: "",
          outcome: "unknown-domain",
          node: undefined,
          wildcardsTried: [],
        },
      ],
      limit: undefined,
      source: undefined,
      fromOverride: false,
    };
  }
  const override = descriptor.limit;
  if (override !== undefined) {
    return {
      domainFound: true,
      path: [
        {
          entryIndex: 0,
          key: "",
          value: "",
          outcome: "override",
          node: undefined,
          wildcardsTried: [],
        },
      ],
      limit: view.overrideLimit(domain, descriptor, override),
      source: undefined,
      fromOverride: true,
    };
  }
  const walked = explainRateLimit(root, descriptor.entries);
  const applied =
    walked.limit === undefined
      ? undefined
      : overrides?.applied(domain, descriptor, walked.limit);
  return applied === undefined
    ? walked
    : { ...walked, limit: applied.limit, runTimeOverride: applied };
}

/**
 * Walks one domain tree like `findRateLimit` and records every step. Allocates freely; counts
 * no statistic.
 */
export function explainRateLimit(
  root: DescriptorLevel,
  entries: readonly RateLimitDescriptor_Entry[],
): LimitExplanation {
  const path: MatchRecord[] = [];
  const count = entries.length;
  const matched: { node: DescriptorNode; wildcard: boolean }[] = [];
  let level = root;
  let node: DescriptorNode | undefined;
  const none = (): LimitExplanation => ({
    domainFound: true,
    path,
    limit: undefined,
    source: undefined,
    fromOverride: false,
  });
  for (let i = 0; i < count; i++) {
    const entry = entries[i]!;
    const finalKey = entry.key + "_" + entry.value;
    const tried: string[] = [];
    let outcome: MatchOutcome = "exact";
    node = level.nodes.get(finalKey);
    if (node === undefined) {
      for (const wildcard of level.wildcards) {
        if (matchesWildcard(wildcard, finalKey)) {
          node = wildcard.node;
          outcome = "wildcard";
          break;
        }
        tried.push(wildcard.pattern);
      }
    }
    if (node === undefined) {
      node = level.nodes.get(entry.key);
      outcome = "key-only";
    }
    if (node === undefined) {
      path.push({
        entryIndex: i,
        key: entry.key,
        value: entry.value,
        outcome: "no-such-key",
        node: undefined,
        wildcardsTried: tried,
      });
      return none();
    }
    if (
      i === count - 1 &&
      outcome !== "key-only" &&
      node.limit === undefined &&
      level.nodes.get(entry.key)?.limit !== undefined
    ) {
      outcome = "whitelisted";
    }
    path.push({
      entryIndex: i,
      key: entry.key,
      value: entry.value,
      outcome,
      node,
      wildcardsTried: tried,
    });
    matched.push({ node, wildcard: outcome === "wildcard" });
    if (i < count - 1) {
      if (node.children === undefined) {
        const next = entries[i + 1]!;
        path.push({
          entryIndex: i + 1,
          key: next.key,
          value: next.value,
          outcome: "deeper-than-config",
          node: undefined,
          wildcardsTried: [],
        });
        return none();
      }
      level = node.children;
    }
  }
  const limit = node?.limit;
  if (node === undefined || limit === undefined) return none();
  let shareThresholdValues: (string | undefined)[] | undefined;
  matched.forEach((step, i) => {
    if (step.wildcard && step.node.shareThreshold) {
      shareThresholdValues ??= new Array<string | undefined>(count).fill(
        undefined,
      );
      shareThresholdValues[i] = patternValue(
        step.node.compositeKey,
        entries[i]!.key,
      );
    }
  });
  return {
    domainFound: true,
    path,
    limit:
      shareThresholdValues === undefined
        ? limit
        : { ...limit, shareThresholdValues },
    source: node.source,
    fromOverride: false,
  };
}
