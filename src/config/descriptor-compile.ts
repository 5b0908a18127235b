// Compiles the YAML rules of one domain into the descriptor tree that lookups walk
// (descriptor-lookup.ts), once per config load, and dumps it in the reference's format.

import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import type { StatsManager } from "../stats/stats-manager.js";
import { ConfigError } from "./config-error.js";
import { calendarOf } from "./algorithm.js";
import { compileRuleLimits, finishLimits, type Fail } from "./limit-compile.js";
import type {
  DescriptorLevel,
  DescriptorNode,
  RateLimit,
  WildcardPattern,
} from "./rate-limit-config.js";
import { unitName } from "./units.js";
import { sourceLine } from "./source-lines.js";
import type { YamlDescriptor } from "./yaml-types.js";

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
 * more characters (docs/reference-parity.md#wildcards).
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
 * Validates and compiles `descriptors` into `level`, depth-first in YAML order. Per rule the
 * checks run in the reference's order: empty key, duplicate composite key, unit / unlimited,
 * replaces (then the extensions of the limit, limit-compile.ts), share_threshold, metadata,
 * then the nested rules (upstream `config_impl.go` `loadDescriptors`,
 * docs/reference-parity.md#config-errors). Rules added to an existing level (domain merge) go
 * after its current rules, wildcards included.
 *
 * @param level - a level from {@link createDescriptorLevel}, or a domain root being merged into
 * @param parentKey - the config path of the level followed by `.`, e.g. `domain.` at the root
 * @param fieldPath - the YAML field path of `descriptors`, for error locations
 * @throws {@link ConfigError} `<name>: <problem>` for the first invalid rule, with the line
 *   (for YAML sources), the field path and a hint (valid units, where a duplicate was first
 *   defined); the level is then partly filled and must be discarded
 */
export function loadDescriptors(
  level: DescriptorLevel,
  descriptors: readonly YamlDescriptor[],
  parentKey: string,
  context: LoadContext,
  fieldPath = "descriptors",
): void {
  const target = level as MutableLevel;
  for (const [index, rule] of descriptors.entries()) {
    const rulePath = `${fieldPath}[${index}]`;
    const fail: Fail = (problem, where = {}) =>
      new ConfigError(`${context.configName}: ${problem}`, {
        file: context.configName,
        line: where.line ?? rule.line,
        fieldPath: where.fieldPath ?? rulePath,
        hint: where.hint,
      });
    if (rule.key === "") {
      throw fail("descriptor has empty key", {
        fieldPath: `${rulePath}.key`,
        hint: "every descriptor needs a key",
      });
    }
    const compositeKey =
      rule.value === "" ? rule.key : `${rule.key}_${rule.value}`;
    const fullKey = parentKey + compositeKey;
    const earlier = target.nodes.get(compositeKey);
    if (earlier !== undefined) {
      throw fail(`duplicate descriptor composite key '${fullKey}'`, {
        hint: `first defined in ${earlier.source.name}${earlier.source.line > 0 ? `:${earlier.source.line}` : ""}`,
      });
    }
    const isWildcard = compositeKey.includes("*");
    const limits = compileRuleLimits(
      rule,
      rulePath,
      fullKey,
      {
        statsManager: context.statsManager,
        allOrNothing: context.allOrNothing ?? false,
      },
      fail,
    );
    if (rule.shareThreshold && !isWildcard) {
      throw fail(
        `share_threshold can only be used with wildcard values (containing '*'), but found key '${compositeKey}'`,
        {
          line: sourceLine(rule, "share_threshold"),
          fieldPath: `${rulePath}.share_threshold`,
        },
      );
    }
    const metadata =
      rule.metadata === undefined
        ? undefined
        : checkedMetadata(rule.metadata, (problem) =>
            fail(problem, {
              line: sourceLine(rule, "metadata"),
              fieldPath: `${rulePath}.metadata`,
            }),
          );
    const children =
      rule.descriptors.length > 0 ? createDescriptorLevel() : undefined;
    if (children !== undefined) {
      loadDescriptors(
        children,
        rule.descriptors,
        `${fullKey}.`,
        context,
        `${rulePath}.descriptors`,
      );
    }
    const node: DescriptorNode = Object.freeze({
      compositeKey,
      fullKey,
      limit: limits === undefined ? undefined : finishLimits(limits, metadata),
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

/** Whether a string holds a UTF-16 surrogate without its pair (not valid Unicode text). */
function hasLoneSurrogate(text: string): boolean {
  return /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(
    text,
  );
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
 * (upstream `config_impl.go` `rateLimitDescriptor.dump`, docs/reference-parity.md#config-dump).
 * A rule with a `rate_limits:` list (an extension) has one line per limit, in list order, each
 * named by its stats key (`<fullKey><statsKeySuffix>`, e.g. `api.user_per_second`).
 */
export function dumpDescriptors(level: DescriptorLevel, lines: string[]): void {
  for (const node of level.nodes.values()) {
    const limit = node.limit;
    if (limit !== undefined) {
      lines.push(dumpLine(node.fullKey, limit));
      const extra = limit.extraLimits;
      if (extra !== undefined) {
        for (const other of extra) lines.push(dumpLine(node.fullKey, other));
      }
    }
    if (node.children !== undefined) dumpDescriptors(node.children, lines);
  }
}

function dumpLine(fullKey: string, limit: RateLimit): string {
  return (
    `${fullKey}${limit.statsKeySuffix}: unit=${unitName(limit.unit)} requests_per_unit=${limit.requestsPerUnit}, ` +
    `shadow_mode: ${String(limit.shadowMode)}, quota_mode: ${String(limit.quotaMode)}` +
    extensionDump(limit) +
    "\n"
  );
}

/**
 * The dump of the extension fields, only those not at their default (so a config without
 * them dumps exactly as the reference), in this order: `, unit_multiplier: <n>`,
 * `, algorithm: sliding_window` or `, algorithm: token_bucket, burst: <n>`,
 * `, time_zone: <zone>`, `, week_start: <day>` (weeks not starting on Monday),
 * `, charge: all_or_nothing`, `, lease: true, lease_max: <n>`.
 */
function extensionDump(limit: RateLimit): string {
  let out = "";
  if (limit.unitMultiplier !== 1)
    out += `, unit_multiplier: ${String(limit.unitMultiplier)}`;
  const algorithm = limit.algorithm;
  if (algorithm.kind === "sliding_window") out += ", algorithm: sliding_window";
  else if (algorithm.kind === "token_bucket")
    out += `, algorithm: token_bucket, burst: ${String(algorithm.bucket.burst)}`;
  const calendar = calendarOf(algorithm);
  if (calendar !== undefined) {
    out += `, time_zone: ${calendar.timeZone}`;
    if (calendar.unit === "week" && calendar.weekStart !== "monday")
      out += `, week_start: ${calendar.weekStart}`;
  }
  if (limit.allOrNothing) out += ", charge: all_or_nothing";
  if (limit.lease !== undefined)
    out += `, lease: true, lease_max: ${String(limit.lease.max)}`;
  return out;
}
