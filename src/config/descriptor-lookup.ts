// The lookup on the ShouldRateLimit hot path: walks the compiled descriptor tree
// (descriptor-compile.ts) for one request descriptor (upstream `config_impl.go` `GetLimit`;
// docs/reference-parity.md#matching).

import type { RateLimitDescriptor_Entry } from "../proto.js";
import type { StatsManager } from "../stats/stats-manager.js";
import type {
  DescriptorLevel,
  DescriptorNode,
  RateLimit,
  WildcardPattern,
} from "./rate-limit-config.js";

/**
 * Returns whether `text` (a request's `key_value`) matches a compiled wildcard: it starts with
 * the prefix, ends with the suffix, and holds every middle literal in order, leftmost first and
 * non-overlapping, between the two. Allocation-free.
 */
export function matchesWildcard(
  wildcard: WildcardPattern,
  text: string,
): boolean {
  if (text.length < wildcard.minLength) return false;
  if (!text.startsWith(wildcard.prefix) || !text.endsWith(wildcard.suffix)) {
    return false;
  }
  const middles = wildcard.middles;
  let position = wildcard.prefix.length;
  const end = text.length - wildcard.suffix.length;
  for (const middle of middles) {
    const found = text.indexOf(middle, position);
    if (found < 0 || found + middle.length > end) return false;
    position = found + middle.length;
  }
  return true;
}

/** How a request entry reached its node at one level. */
const matchedExact = 0;
const matchedWildcard = 1;
const matchedKeyOnly = 2;

// Per-entry match record of the lookup in progress, reused across calls so the common path does
// not allocate. Safe because a lookup runs synchronously to completion and never re-enters.
const matchedNodes: DescriptorNode[] = [];
const matchedHow: number[] = [];

/**
 * Returns the limit for a request descriptor's entries in one domain tree, or undefined.
 *
 * Per entry: exact `key_value`, else the first wildcard rule (config order) matching
 * `key_value`, else the bare `key`. A limit applies only when found at the LAST entry; a node
 * matched earlier without nested rules ends the walk with no limit; a request shorter than the
 * config path takes the limit of the node its last entry reached.
 *
 * In the common case this does map lookups and one concatenation per entry and returns the
 * frozen limit built at load. A fresh object is returned when `detailed_metric`,
 * `value_to_metric` or a `share_threshold` wildcard changes the stats key or cache key values
 * (docs/reference-parity.md#stats-key and #share-threshold); like the reference, such a rebuilt
 * limit loses its metadata (docs/reference-parity.md#dynamic-metadata), except a detailed limit
 * whose node has nested rules.
 *
 * @param domain - the request domain (first part of derived stats keys)
 * @param statsManager - supplies stats handles for derived stats keys
 */
export function findRateLimit(
  root: DescriptorLevel,
  domain: string,
  entries: readonly RateLimitDescriptor_Entry[],
  statsManager: StatsManager,
): RateLimit | undefined {
  const count = entries.length;
  let level = root;
  let node: DescriptorNode | undefined;
  // Whether the stats key or the cache key values may differ from the prebuilt limit.
  let derived = false;
  let i = 0;
  for (const entry of entries) {
    const entryKey = entry.key;
    const value = entry.value;
    // The request side always joins with `_`, so an empty value looks up `key_`.
    const finalKey = entryKey + "_" + value;
    node = level.nodes.get(finalKey);
    let how = matchedExact;
    if (node === undefined) {
      const wildcards = level.wildcards;
      for (const wildcard of wildcards) {
        if (matchesWildcard(wildcard, finalKey)) {
          node = wildcard.node;
          how = matchedWildcard;
          break;
        }
      }
      if (node === undefined) {
        node = level.nodes.get(entryKey);
        if (node === undefined) return undefined;
        how = matchedKeyOnly;
      }
    }
    matchedNodes[i] = node;
    matchedHow[i] = how;
    if (how === matchedWildcard) {
      if (
        node.shareThreshold ||
        node.valueToMetric ||
        !startsWithEntryKey(node.compositeKey, entryKey)
      ) {
        derived = true;
      }
    } else if (how === matchedExact) {
      // Only a rule whose key itself ends in `_` is hit with an empty value; its metric path
      // then drops the `_` (see valueToMetricKey).
      if (value === "") derived = true;
    } else if (node.valueToMetric && value !== "") {
      derived = true;
    }
    if (i < count - 1) {
      if (node.children === undefined) return undefined;
      level = node.children;
    }
    i++;
  }
  const limit = node?.limit;
  if (node === undefined || limit === undefined) return undefined;
  if (!derived && !limit.detailedMetric) return limit;
  return derivedLimit(limit, node, domain, entries, statsManager);
}

/** Whether `pattern` starts with `<entryKey>_`, without building that string. */
function startsWithEntryKey(pattern: string, entryKey: string): boolean {
  return (
    pattern.length > entryKey.length &&
    pattern.charCodeAt(entryKey.length) === 95 /* "_" */ &&
    pattern.startsWith(entryKey)
  );
}

/** `strings.TrimPrefix(pattern, entryKey + "_")`: the value part of a wildcard rule. */
export function patternValue(pattern: string, entryKey: string): string {
  return startsWithEntryKey(pattern, entryKey)
    ? pattern.slice(entryKey.length + 1)
    : pattern;
}

/**
 * The slow path of {@link findRateLimit}: share_threshold values, and the stats key of
 * docs/reference-parity.md#stats-key (detailed_metric, else value_to_metric when it differs from
 * the config path). Reads the match record of the lookup that just completed. The limits of a
 * `rate_limits:` list are derived alike, each keeping its `statsKeySuffix` after the derived
 * key.
 */
function derivedLimit(
  limit: RateLimit,
  limitNode: DescriptorNode,
  domain: string,
  entries: readonly RateLimitDescriptor_Entry[],
  statsManager: StatsManager,
): RateLimit {
  const count = entries.length;
  let shareThresholdValues: (string | undefined)[] | undefined;
  let i = 0;
  for (const entry of entries) {
    const node = matchedNodes[i];
    if (
      node !== undefined &&
      matchedHow[i] === matchedWildcard &&
      node.shareThreshold
    ) {
      shareThresholdValues ??= new Array<string | undefined>(count).fill(
        undefined,
      );
      shareThresholdValues[i] = patternValue(node.compositeKey, entry.key);
    }
    i++;
  }
  let statsKey: string;
  let keepsMetadata: boolean;
  if (limit.detailedMetric) {
    statsKey = detailedKey(domain, entries, shareThresholdValues);
    // Upstream rebuilds the limit (dropping metadata) only when the walk ends on a node
    // without nested rules.
    keepsMetadata = limitNode.children !== undefined;
  } else {
    const enhanced = valueToMetricKey(domain, entries, shareThresholdValues);
    keepsMetadata = enhanced === limit.fullKey;
    statsKey = keepsMetadata ? limit.fullKey : enhanced;
  }
  if (
    keepsMetadata &&
    statsKey === limit.fullKey &&
    shareThresholdValues === undefined
  ) {
    return limit;
  }
  const derived = deriveLimit(
    limit,
    statsKey,
    domain,
    statsManager,
    keepsMetadata,
    shareThresholdValues,
  );
  const extra = limit.extraLimits;
  if (extra === undefined) return derived;
  const extraLimits: RateLimit[] = [];
  for (const other of extra) {
    extraLimits.push(
      deriveLimit(
        other,
        statsKey,
        domain,
        statsManager,
        keepsMetadata,
        shareThresholdValues,
      ),
    );
  }
  return { ...derived, extraLimits };
}

/**
 * One limit of {@link derivedLimit}: counted under `statsKey` plus the limit's own
 * `statsKeySuffix` (a limit of a `rate_limits:` list), or under its prebuilt stats when
 * `statsKey` is the config path.
 */
function deriveLimit(
  limit: RateLimit,
  statsKey: string,
  domain: string,
  statsManager: StatsManager,
  keepsMetadata: boolean,
  shareThresholdValues: (string | undefined)[] | undefined,
): RateLimit {
  return {
    ...limit,
    stats:
      statsKey === limit.fullKey
        ? limit.stats
        : statsManager.requestRateLimitStats(
            domain,
            statsKey + limit.statsKeySuffix,
          ),
    metadata: keepsMetadata ? limit.metadata : undefined,
    shareThresholdValues,
  };
}

/**
 * detailed_metric key: `<domain>` + `.key_value` per request entry (the `_` is written even for
 * an empty value). With share_threshold: `key_<pattern value>` for entries matched by a
 * share_threshold wildcard, else `key_value`, or `key` when the value is empty.
 */
function detailedKey(
  domain: string,
  entries: readonly RateLimitDescriptor_Entry[],
  shareThresholdValues: readonly (string | undefined)[] | undefined,
): string {
  let key = domain;
  let i = 0;
  for (const entry of entries) {
    const shared = shareThresholdValues?.[i];
    i++;
    if (shareThresholdValues === undefined) {
      key += "." + entry.key + "_" + entry.value;
    } else if (shared !== undefined) {
      key += "." + entry.key + "_" + shared;
    } else {
      key += "." + withValue(entry.key, entry.value);
    }
  }
  return key;
}

/**
 * value_to_metric key, one part per level: via a wildcard → the share_threshold pattern value,
 * else the request value when the rule has value_to_metric, else the configured pattern value;
 * via exact `key_value` → the request value; via the bare key → the request value only with
 * value_to_metric. A part is `key`, plus `_value` when the chosen value is not empty.
 */
function valueToMetricKey(
  domain: string,
  entries: readonly RateLimitDescriptor_Entry[],
  shareThresholdValues: readonly (string | undefined)[] | undefined,
): string {
  let key = domain;
  let i = 0;
  for (const entry of entries) {
    const node = matchedNodes[i];
    const how = matchedHow[i];
    const shared = shareThresholdValues?.[i];
    i++;
    let part: string;
    if (node === undefined) {
      part = entry.key;
    } else if (how === matchedWildcard) {
      if (shared !== undefined) part = entry.key + "_" + shared;
      else if (node.valueToMetric) part = withValue(entry.key, entry.value);
      else part = entry.key + "_" + patternValue(node.compositeKey, entry.key);
    } else if (how === matchedExact || node.valueToMetric) {
      part = withValue(entry.key, entry.value);
    } else {
      part = entry.key;
    }
    key += "." + part;
  }
  return key;
}

function withValue(entryKey: string, value: string): string {
  return value === "" ? entryKey : entryKey + "_" + value;
}
