import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import type { RateLimitDescriptor_Entry } from "../proto.js";
import { RateLimitResponse_RateLimit_Unit as Unit } from "../proto.js";
import type { StatsManager } from "../stats/stats-manager.js";
import { ConfigError } from "./config-error.js";
import type { RateLimit, RuleSource } from "./rate-limit-config.js";
import {
  maxWindowSeconds,
  unitByName,
  unitName,
  unitToSeconds,
  windowShape,
} from "./units.js";
import type { YamlDescriptor } from "./yaml-types.js";

/**
 * One compiled descriptor rule. Built once per config load and never changed after the load
 * completes; requests only read it.
 */
export interface DescriptorNode {
  /** Composite key: `key`, or `key_value` when the rule has a value (wildcards keep `*`). */
  readonly compositeKey: string;
  /** Config path `<domain>.<ck1>.<ck2>…`, unsanitized (dump and default stats key). */
  readonly fullKey: string;
  /** The frozen limit built at load, shared by every request; undefined for a pure path node. */
  readonly limit: RateLimit | undefined;
  /** Nested level; undefined when the rule has no nested descriptors. */
  readonly children: DescriptorLevel | undefined;
  /** `value_to_metric` of this rule. */
  readonly valueToMetric: boolean;
  /** `share_threshold` of this rule (only allowed when the composite key contains `*`). */
  readonly shareThreshold: boolean;
  /** Where the rule is defined (Explain and the debug console; never read by lookups). */
  readonly source: RuleSource;
}

/**
 * A compiled wildcard rule: its composite key pre-split on `*`. Kept on the level that holds the
 * rule, in load order (upstream `config_impl.go` `wildcardKeys`).
 */
export interface WildcardPattern {
  /** The composite key, e.g. `wild_foo*` or `a*b*c`. */
  readonly pattern: string;
  /** Literal text before the first `*`. */
  readonly prefix: string;
  /** Literal text after the last `*`. */
  readonly suffix: string;
  /** Literal texts between consecutive `*`, in order (empty strings dropped). */
  readonly middles: readonly string[];
  /** Sum of all literal lengths: the shortest string that can match. */
  readonly minLength: number;
}

/** One level of the tree: a map by composite key plus the ordered wildcard rules. */
export interface DescriptorLevel {
  /** Every rule of the level by composite key (wildcard rules included). */
  readonly nodes: ReadonlyMap<string, DescriptorNode>;
  /** Rules whose composite key contains `*`, in load order; the first match wins. */
  readonly wildcards: readonly (WildcardPattern & {
    readonly node: DescriptorNode;
  })[];
}

/** A level under construction; becomes read-only once the load returns. */
interface MutableLevel extends DescriptorLevel {
  readonly nodes: Map<string, DescriptorNode>;
  readonly wildcards: (WildcardPattern & { readonly node: DescriptorNode })[];
}

/** What {@link loadDescriptors} needs besides the rules themselves. */
export interface LoadContext {
  /** Config name prefixed to every error (`<name>: <problem>`). */
  readonly configName: string;
  /** Stats handles of every limit are created at load time. */
  readonly statsManager: StatsManager;
  /** xDS `version_info` of the resource being loaded; recorded in each rule's source. */
  readonly sourceVersion?: string | undefined;
  /** The domain's charge mode is `all_or_nothing`. @defaultValue false */
  readonly allOrNothing?: boolean;
}

/** Returns an empty level (a domain root before its first file is loaded). */
export function createDescriptorLevel(): DescriptorLevel {
  const level: MutableLevel = { nodes: new Map(), wildcards: [] };
  return level;
}

/**
 * Compiles a wildcard pattern. `*` may appear anywhere and several times; each matches zero or
 * more characters (behavior.md §3.3).
 */
export function compileWildcard(pattern: string): WildcardPattern {
  const parts = pattern.split("*");
  const prefix = parts[0] ?? "";
  const suffix = parts.length > 1 ? (parts[parts.length - 1] ?? "") : "";
  const middles = parts.slice(1, -1).filter((part) => part.length > 0);
  const minLength = parts.reduce((sum, part) => sum + part.length, 0);
  return Object.freeze({
    pattern,
    prefix,
    suffix,
    middles: Object.freeze(middles),
    minLength,
  });
}

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

/**
 * Validates and compiles `descriptors` into `level`, depth-first in YAML order. Per rule the
 * checks run in the reference's order: empty key, duplicate composite key, unit / unlimited,
 * replaces, share_threshold, metadata, then the nested rules (upstream `config_impl.go`
 * `loadDescriptors`, behavior.md §2.3). Rules added to an existing level (domain merge) go after
 * its current rules, wildcards included.
 *
 * @param level - a level from {@link createDescriptorLevel}, or a domain root being merged into
 * @param parentKey - the config path of the level followed by `.`, e.g. `domain.` at the root
 * @throws {@link ConfigError} `<name>: <problem>` for the first invalid rule; the level is then
 *   partly filled and must be discarded
 */
export function loadDescriptors(
  level: DescriptorLevel,
  descriptors: readonly YamlDescriptor[],
  parentKey: string,
  context: LoadContext,
): void {
  const target = level as MutableLevel;
  const fail = (problem: string): ConfigError =>
    new ConfigError(`${context.configName}: ${problem}`);
  for (const rule of descriptors) {
    if (rule.key === "") throw fail("descriptor has empty key");
    const compositeKey =
      rule.value === "" ? rule.key : `${rule.key}_${rule.value}`;
    const fullKey = parentKey + compositeKey;
    if (target.nodes.has(compositeKey)) {
      throw fail(`duplicate descriptor composite key '${fullKey}'`);
    }
    const isWildcard = compositeKey.includes("*");
    const limit = buildLimit(rule, fullKey, context, fail);
    if (rule.shareThreshold && !isWildcard) {
      throw fail(
        `share_threshold can only be used with wildcard values (containing '*'), but found key '${compositeKey}'`,
      );
    }
    const metadata =
      rule.metadata === undefined
        ? undefined
        : checkedMetadata(rule.metadata, fail);
    const children =
      rule.descriptors.length > 0 ? createDescriptorLevel() : undefined;
    if (children !== undefined) {
      loadDescriptors(children, rule.descriptors, `${fullKey}.`, context);
    }
    const node: DescriptorNode = Object.freeze({
      compositeKey,
      fullKey,
      limit: limit === undefined ? undefined : finishLimit(limit, metadata),
      children,
      valueToMetric: rule.valueToMetric,
      shareThreshold: rule.shareThreshold,
      source: Object.freeze({
        name: context.configName,
        line: rule.line ?? 0,
        version: context.sourceVersion ?? "",
      }),
    });
    target.nodes.set(compositeKey, node);
    if (isWildcard) {
      target.wildcards.push(
        Object.freeze({ ...compileWildcard(compositeKey), node }),
      );
    }
  }
}

/** The limit of a rule before its metadata is checked (metadata comes later in the order). */
type PendingLimit = Omit<RateLimit, "metadata">;

/** Validates the `rate_limit` block (unit, unlimited, replaces) and builds the limit. */
function buildLimit(
  rule: YamlDescriptor,
  fullKey: string,
  context: LoadContext,
  fail: (problem: string) => ConfigError,
): PendingLimit | undefined {
  const rateLimit = rule.rateLimit;
  if (rateLimit === undefined) return undefined;
  const unit = unitByName.get(rateLimit.unit.toUpperCase());
  if (rateLimit.unlimited) {
    if (unit !== undefined) {
      throw fail("should not specify rate limit unit when unlimited");
    }
  } else if (unit === undefined) {
    throw fail(`invalid rate limit unit '${rateLimit.unit}'`);
  }
  for (const replaced of rateLimit.replaces) {
    if (replaced.name === "") {
      throw fail("should not have an empty replaces entry");
    }
    if (replaced.name === rateLimit.name) {
      throw fail("replaces should not contain name of same descriptor");
    }
  }
  // Unlimited limits carry unit UNKNOWN whatever was written (upstream `config_impl.go`).
  const effectiveUnit =
    rateLimit.unlimited || unit === undefined ? Unit.UNKNOWN : unit;
  // Extensions: decided here, once, so requests never look at the algorithm.
  const unitMultiplier = rateLimit.unitMultiplier ?? 1;
  if (!Number.isInteger(unitMultiplier) || unitMultiplier < 1) {
    throw fail(
      `invalid unit_multiplier '${String(unitMultiplier)}' (expected an integer >= 1)`,
    );
  }
  const sliding =
    !rateLimit.unlimited && rateLimit.algorithm === "sliding_window";
  const shape = windowShape(effectiveUnit, unitMultiplier, sliding);
  if (shape.windowSeconds > maxWindowSeconds) {
    throw fail(
      `unit_multiplier ${String(unitMultiplier)} × ${unitName(effectiveUnit)} is longer than ${String(maxWindowSeconds)} seconds`,
    );
  }
  return {
    fullKey,
    stats: context.statsManager.rateLimitStats(fullKey),
    requestsPerUnit: rateLimit.requestsPerUnit,
    unit: effectiveUnit,
    unitSeconds: unitToSeconds(effectiveUnit),
    unitMultiplier,
    windowSeconds: shape.windowSeconds,
    sliding,
    cacheKeySuffix: shape.cacheKeySuffix,
    allOrNothing: context.allOrNothing ?? false,
    unlimited: rateLimit.unlimited,
    shadowMode: rule.shadowMode,
    quotaMode: rule.quotaMode,
    name: rateLimit.name,
    replaces: Object.freeze(
      rateLimit.replaces.map((replaced) => replaced.name),
    ),
    detailedMetric: rule.detailedMetric,
    shareThresholdValues: undefined,
  };
}

/** Whether a string holds a UTF-16 surrogate without its pair (not valid Unicode text). */
function hasLoneSurrogate(text: string): boolean {
  return /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(
    text,
  );
}

function finishLimit(
  limit: PendingLimit,
  metadata: JsonObject | undefined,
): RateLimit {
  return Object.freeze({ ...limit, metadata });
}

/**
 * Copies and deep-freezes metadata, refusing what a protobuf `Struct` cannot hold: strings that
 * are not valid Unicode (lone surrogates, Go's "invalid UTF-8") and non-JSON values.
 */
function checkedMetadata(
  metadata: JsonObject,
  fail: (problem: string) => ConfigError,
): JsonObject {
  const copy = (value: unknown): JsonValue => {
    switch (typeof value) {
      case "string":
        if (hasLoneSurrogate(value)) {
          throw fail(
            `error parsing metadata: invalid UTF-8 in string: ${JSON.stringify(value)}`,
          );
        }
        return value;
      case "number":
      case "boolean":
        return value;
      case "object": {
        if (value === null) return null;
        if (Array.isArray(value)) {
          return Object.freeze(value.map(copy)) as JsonValue[];
        }
        const out: JsonObject = {};
        for (const [key, inner] of Object.entries(value)) {
          if (hasLoneSurrogate(key)) {
            throw fail(
              `error parsing metadata: invalid UTF-8 in string: ${JSON.stringify(key)}`,
            );
          }
          out[key] = copy(inner);
        }
        return Object.freeze(out);
      }
      case "bigint":
      case "symbol":
      case "undefined":
      case "function":
        throw fail(`error parsing metadata: invalid type: ${typeof value}`);
    }
  };
  return copy(metadata) as JsonObject;
}

/**
 * Appends one dump line per rule with a limit (unlimited included), depth-first in load order:
 * `<fullKey>: unit=<UNIT> requests_per_unit=<n>, shadow_mode: <bool>, quota_mode: <bool>\n`
 * (upstream `config_impl.go` `rateLimitDescriptor.dump`, behavior.md §2.6).
 */
export function dumpDescriptors(level: DescriptorLevel, lines: string[]): void {
  for (const node of level.nodes.values()) {
    const limit = node.limit;
    if (limit !== undefined) {
      lines.push(
        `${node.fullKey}: unit=${unitName(limit.unit)} requests_per_unit=${limit.requestsPerUnit}, ` +
          `shadow_mode: ${String(limit.shadowMode)}, quota_mode: ${String(limit.quotaMode)}` +
          extensionDump(limit) +
          "\n",
      );
    }
    if (node.children !== undefined) dumpDescriptors(node.children, lines);
  }
}

/**
 * The dump of the extension fields, only those not at their default (so a config without
 * them dumps exactly as the reference): `, unit_multiplier: <n>`, `, algorithm:
 * sliding_window`, `, charge: all_or_nothing`.
 */
function extensionDump(limit: RateLimit): string {
  let out = "";
  if (limit.unitMultiplier !== 1)
    out += `, unit_multiplier: ${String(limit.unitMultiplier)}`;
  if (limit.sliding) out += ", algorithm: sliding_window";
  if (limit.allOrNothing) out += ", charge: all_or_nothing";
  return out;
}

// ---------------------------------------------------------------------------------------------
// Lookup (upstream `config_impl.go` `GetLimit`, behavior.md §3.2–3.7)

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
 * (behavior.md §3.6–3.7); like the reference, such a rebuilt limit loses its metadata
 * (behavior.md §5.5), except a detailed limit whose node has nested rules.
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
 * behavior.md §3.6 (detailed_metric, else value_to_metric when it differs from the config path).
 * Reads the match record of the lookup that just completed.
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
  return {
    ...limit,
    stats:
      statsKey === limit.fullKey
        ? limit.stats
        : statsManager.requestRateLimitStats(domain, statsKey),
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
