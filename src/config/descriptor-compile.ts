// Compiles the YAML rules of one domain into the descriptor tree that lookups walk
// (descriptor-lookup.ts), once per config load, and dumps it in the reference's format.

import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { RateLimitResponse_RateLimit_Unit as Unit } from "../proto.js";
import type { StatsManager } from "../stats/stats-manager.js";
import { ConfigError, type ConfigErrorOptions } from "./config-error.js";
import type {
  DescriptorLevel,
  DescriptorNode,
  RateLimit,
  WildcardPattern,
} from "./rate-limit-config.js";
import {
  maxWindowSeconds,
  unitByName,
  unitName,
  unitToSeconds,
  windowShape,
} from "./units.js";
import { sourceLine } from "./source-lines.js";
import type { YamlDescriptor } from "./yaml-types.js";

/** Builds the {@link ConfigError} of a rule problem: `<name>: <problem>`, located. */
type Fail = (
  problem: string,
  where?: Omit<ConfigErrorOptions, "file" | "cause" | "detail">,
) => ConfigError;

/** `valid units: …`, the hint of an invalid unit. */
const validUnitsHint = `valid units: ${[...unitByName.keys()].join(", ")} (any case)`;

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
 * replaces, share_threshold, metadata, then the nested rules (upstream `config_impl.go`
 * `loadDescriptors`, docs/reference-parity.md#config-errors). Rules added to an existing level
 * (domain merge) go after its current rules, wildcards included.
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
    const limit = buildLimit(rule, rulePath, fullKey, context, fail);
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
  rulePath: string,
  fullKey: string,
  context: LoadContext,
  fail: Fail,
): PendingLimit | undefined {
  const rateLimit = rule.rateLimit;
  if (rateLimit === undefined) return undefined;
  const limitPath = `${rulePath}.rate_limit`;
  // The unit's own line, else the rate_limit block's (a missing unit), else the rule's.
  const unitWhere = {
    line:
      sourceLine(rateLimit, "unit") ??
      sourceLine(rule, "rate_limit") ??
      rule.line,
    fieldPath: `${limitPath}.unit`,
  };
  const unit = unitByName.get(rateLimit.unit.toUpperCase());
  if (rateLimit.unlimited) {
    if (unit !== undefined) {
      throw fail("should not specify rate limit unit when unlimited", {
        ...unitWhere,
        hint: "remove the unit, or unlimited: true",
      });
    }
  } else if (unit === undefined) {
    throw fail(`invalid rate limit unit '${rateLimit.unit}'`, {
      ...unitWhere,
      hint: validUnitsHint,
    });
  }
  for (const [index, replaced] of rateLimit.replaces.entries()) {
    const replacesWhere = {
      line: sourceLine(replaced, "name") ?? sourceLine(replaced, ""),
      fieldPath: `${limitPath}.replaces[${index}].name`,
    };
    if (replaced.name === "") {
      throw fail("should not have an empty replaces entry", replacesWhere);
    }
    if (replaced.name === rateLimit.name) {
      throw fail("replaces should not contain name of same descriptor", {
        ...replacesWhere,
        hint: `'${replaced.name}' is this rate limit's own name`,
      });
    }
  }
  // Unlimited limits carry unit UNKNOWN whatever was written (upstream `config_impl.go`).
  const effectiveUnit =
    rateLimit.unlimited || unit === undefined ? Unit.UNKNOWN : unit;
  // Extensions: decided here, once, so requests never look at the algorithm.
  const unitMultiplier = rateLimit.unitMultiplier ?? 1;
  const multiplierWhere = {
    line: sourceLine(rateLimit, "unit_multiplier"),
    fieldPath: `${limitPath}.unit_multiplier`,
  };
  if (!Number.isInteger(unitMultiplier) || unitMultiplier < 1) {
    throw fail(
      `invalid unit_multiplier '${String(unitMultiplier)}' (expected an integer >= 1)`,
      multiplierWhere,
    );
  }
  const sliding =
    !rateLimit.unlimited && rateLimit.algorithm === "sliding_window";
  const shape = windowShape(effectiveUnit, unitMultiplier, sliding);
  if (shape.windowSeconds > maxWindowSeconds) {
    throw fail(
      `unit_multiplier ${String(unitMultiplier)} × ${unitName(effectiveUnit)} is longer than ${String(maxWindowSeconds)} seconds`,
      multiplierWhere,
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
    tokenBucket: undefined,
    calendar: undefined,
    extraLimits: undefined,
    statsKeySuffix: "",
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
 * (upstream `config_impl.go` `rateLimitDescriptor.dump`, docs/reference-parity.md#config-dump).
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
