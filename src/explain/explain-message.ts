import { create } from "@bufbuild/protobuf";
import {
  DescriptorExplanationSchema,
  DescriptorExplanation_Verdict as Verdict,
  LimitCheckSchema,
  MatchStepSchema,
  MatchStep_Outcome as Outcome,
  RuleSchema,
  SourceSchema,
  TokenBucketSchema,
  type DescriptorExplanation,
  type MatchStep,
  type RateLimitRequest,
  type Rule,
  type Source,
} from "../proto.js";
import { bucketOf, calendarOf } from "../config/algorithm.js";
import type { RateLimit, RuleSource } from "../config/rate-limit-config.js";
import { applyLimitRules } from "../limiter/decision-rules.js";
import type {
  LimitExplanation,
  MatchOutcome,
} from "./descriptor-explanation.js";
import { durationFromUs } from "./explain-time.js";
import {
  runtimeOverrideMessage,
  runtimeOverrideNote,
} from "./run-time-override.js";

const outcomes: Record<MatchOutcome, Outcome> = {
  exact: Outcome.EXACT,
  wildcard: Outcome.WILDCARD,
  "key-only": Outcome.KEY_ONLY,
  whitelisted: Outcome.WHITELISTED,
  "no-such-key": Outcome.NO_SUCH_KEY,
  "deeper-than-config": Outcome.DEEPER_THAN_CONFIG,
  "unknown-domain": Outcome.UNKNOWN_DOMAIN,
  override: Outcome.OVERRIDE,
};

/** The `Source` message of a rule source. */
export function sourceMessage(source: RuleSource): Source {
  return create(SourceSchema, {
    name: source.name,
    line: source.line,
    version: source.version,
  });
}

/** The match path of one descriptor as `MatchStep` messages. */
export function matchPathMessages(explanation: LimitExplanation): MatchStep[] {
  return explanation.path.map((step) => {
    const node = step.node;
    return create(MatchStepSchema, {
      entryIndex: step.entryIndex,
      key: step.key,
      value: step.value,
      outcome: outcomes[step.outcome],
      node: node?.fullKey ?? "",
      pattern: node?.compositeKey ?? "",
      hasLimit: node?.limit !== undefined,
      ...(node !== undefined ? { source: sourceMessage(node.source) } : {}),
      wildcardsTried: [...step.wildcardsTried],
    });
  });
}

/**
 * The `Rule` message of the limit that applies, or of one limit of its `rate_limits:` list.
 *
 * @param shareFrom - the limit whose `shareThresholdValues` the cache keys use: the list's
 *   first limit (the lookup sets them on it only), `limit` itself by default
 */
export function ruleMessage(
  limit: RateLimit,
  explanation: LimitExplanation,
  entries: RateLimitRequest["descriptors"][number]["entries"],
  shareFrom: RateLimit = limit,
): Rule {
  const shared: string[] = [];
  shareFrom.shareThresholdValues?.forEach((value, i) => {
    if (value !== undefined) shared.push(`${entries[i]?.key ?? ""}=${value}`);
  });
  const algorithm = limit.algorithm;
  const bucket = bucketOf(algorithm);
  const calendar = calendarOf(algorithm);
  return create(RuleSchema, {
    fullKey: limit.fullKey,
    name: limit.name,
    unit: limit.unit,
    requestsPerUnit: limit.requestsPerUnit,
    unlimited: limit.unlimited,
    shadowMode: limit.shadowMode,
    quotaMode: limit.quotaMode,
    detailedMetric: limit.detailedMetric,
    replaces: [...limit.replaces],
    ...(explanation.source !== undefined
      ? { source: sourceMessage(explanation.source) }
      : {}),
    fromOverride: explanation.fromOverride,
    shareThreshold: shared,
    unitMultiplier: limit.unitMultiplier,
    windowSeconds: limit.windowSeconds,
    slidingWindow: algorithm.kind === "sliding_window",
    allOrNothing: limit.allOrNothing,
    ...(bucket !== undefined
      ? {
          tokenBucket: create(TokenBucketSchema, {
            burst: bucket.burst,
            emissionInterval: durationFromUs(bucket.emissionIntervalUs),
          }),
        }
      : {}),
    timeZone: calendar?.timeZone ?? "",
    weekStart: calendar?.unit === "week" ? calendar.weekStart : "",
    statsKeySuffix: limit.statsKeySuffix,
    ...(explanation.runTimeOverride !== undefined
      ? { runtimeOverride: runtimeOverrideMessage(explanation.runTimeOverride) }
      : {}),
  });
}

/**
 * The limits a rule checks for every request it matches: its limit, then the other limits of
 * its `rate_limits:` list in list order (one entry for a rule with `rate_limit:`).
 */
export function limitsOfRule(limit: RateLimit): readonly RateLimit[] {
  const extra = limit.extraLimits;
  return extra === undefined ? [limit] : [limit, ...extra];
}

/** The config half of a request's explanation, parallel to its descriptors. */
export interface ConfigExplanation {
  /** Whether the request's domain is loaded. */
  readonly domainFound: boolean;
  /**
   * Path, rule (with one `limits` entry per limit of a `rate_limits:` list), replaces and (for
   * descriptors without a counter) the verdict.
   */
  readonly descriptors: DescriptorExplanation[];
  /**
   * The limits ShouldRateLimit would hand the backend: undefined where no limit applies, the
   * rule is unlimited, or it was replaced (docs/reference-parity.md#unlimited-replaced).
   */
  readonly limits: (RateLimit | undefined)[];
  /** Parallel: the rule is unlimited (answered OK with 4294967295 remaining, no counter). */
  readonly unlimited: boolean[];
}

/**
 * Explains how each descriptor of a request meets the config: match path, rule, `replaces`
 * and unlimited rules, decided by ShouldRateLimit's own rules ({@link applyLimitRules}); a
 * replaced descriptor names the first rule (in descriptor order) that replaces it. Counts
 * nothing.
 *
 * @param explain - explains one descriptor (`explainLimit` over the config's view)
 */
export function explainConfig(
  explain: (
    domain: string,
    descriptor: RateLimitRequest["descriptors"][number],
  ) => LimitExplanation,
  request: RateLimitRequest,
): ConfigExplanation {
  const n = request.descriptors.length;
  const found = new Array<RateLimit | undefined>(n).fill(undefined);
  const descriptors: DescriptorExplanation[] = [];
  let domainFound = true;
  request.descriptors.forEach((descriptor, i) => {
    const explanation = explain(request.domain, descriptor);
    if (!explanation.domainFound) domainFound = false;
    const limit = explanation.limit;
    found[i] = limit;
    const message = create(DescriptorExplanationSchema, {
      index: i,
      path: matchPathMessages(explanation),
      verdict: Verdict.NO_LIMIT,
    });
    if (limit !== undefined) {
      message.rule = ruleMessage(limit, explanation, descriptor.entries);
      if (explanation.runTimeOverride !== undefined)
        message.notes.push(runtimeOverrideNote(explanation.runTimeOverride));
      // A rate_limits: list: every limit of it, each checked on its own (the Explain service
      // fills in counters and verdicts; offline they stay unspecified).
      if (limit.extraLimits !== undefined)
        message.limits = limitsOfRule(limit).map((l, k) =>
          create(LimitCheckSchema, {
            index: k,
            rule: ruleMessage(l, explanation, descriptor.entries, limit),
          }),
        );
    }
    descriptors.push(message);
  });
  const limits = found.slice();
  const unlimited =
    applyLimitRules(limits) ?? new Array<boolean>(n).fill(false);
  for (let i = 0; i < n; i++) {
    const limit = found[i];
    if (limit === undefined) continue;
    const message = descriptors[i]!;
    if (unlimited[i] === true) {
      message.verdict = Verdict.UNLIMITED;
    } else if (limits[i] !== undefined) {
      message.verdict = Verdict.UNSPECIFIED;
    } else {
      message.verdict = Verdict.REPLACED;
      message.replacedBy =
        found.find((other) => other?.replaces.includes(limit.name) === true)
          ?.fullKey ?? "";
    }
  }
  // Which names each descriptor's rule actually removed.
  descriptors.forEach((message) => {
    const rule = message.rule;
    if (rule === undefined) return;
    message.replacedNames = rule.replaces.filter((name) =>
      descriptors.some(
        (other) =>
          other.rule?.name === name && other.replacedBy === rule.fullKey,
      ),
    );
  });
  return { domainFound, descriptors, limits, unlimited };
}
