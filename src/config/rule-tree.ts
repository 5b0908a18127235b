// The rules of a loaded config as plain data, for the debug console's tree (served as JSON by
// `/console/state.json`); read through the config's view, never on the request path.

import type {
  DescriptorLevel,
  RateLimitConfig,
  RuleSource,
} from "./rate-limit-config.js";
import { unitName } from "./units.js";

/** One rule of the console tree. */
export interface RuleTreeNode {
  /** Composite key: `key`, or `key_value` (wildcards keep `*`). */
  readonly compositeKey: string;
  /** Config path `<domain>.<ck1>.<ck2>…`. */
  readonly fullKey: string;
  /** The rate limit, when the rule has one. */
  readonly limit:
    | {
        readonly name: string;
        /** Unit name (`SECOND` … `YEAR`, `UNKNOWN` when unlimited). */
        readonly unit: string;
        readonly requestsPerUnit: number;
        readonly unlimited: boolean;
        readonly replaces: readonly string[];
      }
    | undefined;
  /** Flags set on the rule, by their YAML names (`shadow_mode`, `share_threshold`, …). */
  readonly flags: readonly string[];
  readonly source: RuleSource;
  readonly children: readonly RuleTreeNode[];
}

/** The rules of one domain, in load order. */
export interface DomainTree {
  readonly domain: string;
  readonly rules: readonly RuleTreeNode[];
}

/**
 * Returns the rules of every loaded domain, domains sorted, rules depth-first in load order;
 * empty for a config without a {@link RateLimitConfig.view} (test fakes).
 */
export function ruleTrees(config: RateLimitConfig): DomainTree[] {
  const view = config.view;
  if (view === undefined) return [];
  return config.domains.map((domain) => {
    const level = view.domainRules(domain);
    return { domain, rules: level === undefined ? [] : ruleTree(level) };
  });
}

/** Returns the rules of one level as plain data, depth-first in load order. */
function ruleTree(level: DescriptorLevel): RuleTreeNode[] {
  const out: RuleTreeNode[] = [];
  for (const node of level.nodes.values()) {
    const limit = node.limit;
    const flags: string[] = [];
    if (limit?.shadowMode === true) flags.push("shadow_mode");
    if (limit?.quotaMode === true) flags.push("quota_mode");
    if (limit?.detailedMetric === true) flags.push("detailed_metric");
    if (node.valueToMetric) flags.push("value_to_metric");
    if (node.shareThreshold) flags.push("share_threshold");
    out.push({
      compositeKey: node.compositeKey,
      fullKey: node.fullKey,
      limit:
        limit === undefined
          ? undefined
          : {
              name: limit.name,
              unit: unitName(limit.unit),
              requestsPerUnit: limit.requestsPerUnit,
              unlimited: limit.unlimited,
              replaces: limit.replaces,
            },
      flags,
      source: node.source,
      children: node.children === undefined ? [] : ruleTree(node.children),
    });
  }
  return out;
}
