// Whether the candidate config of a canary decides like the live one, per limit and per domain.
// A domain whose compiled rules are the same in both configs gets the same answers from both
// (same cache keys, same thresholds), so the canary skips its requests; a request whose limits
// are all the same does not need the candidate's pipeline either. Only what changes a decision
// is compared: statistics handles, stats keys, `detailed_metric` and metadata are not.

import { bucketOf, calendarOf } from "../config/algorithm.js";
import type {
  DescriptorLevel,
  DescriptorNode,
  RateLimit,
  RateLimitConfig,
} from "../config/rate-limit-config.js";

/**
 * Whether two limits decide every request alike: the same counter (algorithm, window, cache
 * key suffix, share-threshold values), the same threshold and modes (shadow, quota, unlimited,
 * charge), the same `name` and `replaces` (the request-level rules), and, for a `rate_limits:`
 * list, the same other limits in the same order. Two undefined limits are the same.
 */
export function sameLimit(
  a: RateLimit | undefined,
  b: RateLimit | undefined,
): boolean {
  if (a === b) return true;
  if (a === undefined || b === undefined) return false;
  return (
    a.requestsPerUnit === b.requestsPerUnit &&
    a.unit === b.unit &&
    a.unitMultiplier === b.unitMultiplier &&
    a.windowSeconds === b.windowSeconds &&
    a.algorithm.kind === b.algorithm.kind &&
    a.cacheKeySuffix === b.cacheKeySuffix &&
    a.allOrNothing === b.allOrNothing &&
    a.unlimited === b.unlimited &&
    a.shadowMode === b.shadowMode &&
    a.quotaMode === b.quotaMode &&
    a.name === b.name &&
    sameStrings(a.replaces, b.replaces) &&
    sameOptionalStrings(a.shareThresholdValues, b.shareThresholdValues) &&
    sameBucket(a, b) &&
    sameCalendar(a, b) &&
    sameExtraLimits(a.extraLimits, b.extraLimits)
  );
}

/** The candidate's rule at a live rule's place ({@link ruleCorrespondence}). */
export interface CandidateRule {
  /** The candidate's limit there; undefined when its rule has none. */
  readonly limit: RateLimit | undefined;
}

/**
 * Adds to `into`, for every live rule of a domain, the candidate's rule at the same place,
 * when the domain's rules have the same shape in both configs (the same composite keys at every
 * level, the same wildcards in the same order, the same `share_threshold` and `value_to_metric`
 * flags): a descriptor then matches the same place in both, so the candidate's limit for a
 * request the live config counted with one of these (frozen, shared) limits needs no lookup.
 * Only the limits may differ.
 *
 * @returns false (adding nothing) when the shapes differ
 */
export function ruleCorrespondence(
  live: DescriptorLevel | undefined,
  candidate: DescriptorLevel | undefined,
  into: Map<RateLimit, CandidateRule>,
): boolean {
  const pairs: [RateLimit, CandidateRule][] = [];
  if (!sameShape(live, candidate, pairs)) return false;
  for (const [limit, rule] of pairs) into.set(limit, rule);
  return true;
}

function sameShape(
  a: DescriptorLevel | undefined,
  b: DescriptorLevel | undefined,
  pairs: [RateLimit, CandidateRule][],
): boolean {
  if (a === undefined || b === undefined) return a === b;
  if (a.nodes.size !== b.nodes.size) return false;
  if (a.wildcards.length !== b.wildcards.length) return false;
  for (let i = 0; i < a.wildcards.length; i++) {
    if (a.wildcards[i]?.pattern !== b.wildcards[i]?.pattern) return false;
  }
  for (const [compositeKey, node] of a.nodes) {
    const other = b.nodes.get(compositeKey);
    if (
      other?.shareThreshold !== node.shareThreshold ||
      node.valueToMetric !== other.valueToMetric ||
      !sameShape(node.children, other.children, pairs)
    )
      return false;
    if (node.limit !== undefined)
      pairs.push([node.limit, { limit: other.limit }]);
  }
  return true;
}

/**
 * Whether two limits count on the same counter for the same descriptor: the same cache key
 * (algorithm, window length, unit, suffix, calendar, share-threshold values), whatever their
 * thresholds and modes.
 */
export function sameCounter(a: RateLimit, b: RateLimit): boolean {
  return (
    a === b ||
    (a.windowSeconds === b.windowSeconds &&
      a.unit === b.unit &&
      a.algorithm.kind === b.algorithm.kind &&
      a.cacheKeySuffix === b.cacheKeySuffix &&
      sameOptionalStrings(a.shareThresholdValues, b.shareThresholdValues) &&
      sameBucket(a, b) &&
      sameCalendar(a, b))
  );
}

/** Whether any rule of a level (or below it) has `replaces`. */
export function hasReplaces(level: DescriptorLevel | undefined): boolean {
  return someLimit(level, (limit) => limit.replaces.length > 0);
}

/** Whether any rule of a level (or below it) is a token bucket. */
export function hasTokenBuckets(level: DescriptorLevel | undefined): boolean {
  return someLimit(level, (limit) => limit.algorithm.kind === "token_bucket");
}

/** Whether a limit of a level (or below it; `rate_limits:` lists included) passes `test`. */
function someLimit(
  level: DescriptorLevel | undefined,
  test: (limit: RateLimit) => boolean,
): boolean {
  if (level === undefined) return false;
  for (const node of level.nodes.values()) {
    const limit = node.limit;
    if (limit !== undefined) {
      if (test(limit)) return true;
      if (limit.extraLimits?.some(test) === true) return true;
    }
    if (someLimit(node.children, test)) return true;
  }
  return false;
}

/**
 * Whether two compiled rule levels match every descriptor to the same limit: the same composite
 * keys with the same limits, `share_threshold` flags and children, and the same wildcard rules
 * in the same order (the first wildcard that matches wins). Undefined levels (an unknown
 * domain) are the same only as each other.
 */
export function sameRules(
  a: DescriptorLevel | undefined,
  b: DescriptorLevel | undefined,
): boolean {
  if (a === b) return true;
  if (a === undefined || b === undefined) return false;
  if (a.nodes.size !== b.nodes.size) return false;
  if (a.wildcards.length !== b.wildcards.length) return false;
  for (const [compositeKey, node] of a.nodes) {
    const other = b.nodes.get(compositeKey);
    if (other === undefined || !sameNode(node, other)) return false;
  }
  for (let i = 0; i < a.wildcards.length; i++) {
    if (a.wildcards[i]?.pattern !== b.wildcards[i]?.pattern) return false;
  }
  return true;
}

/**
 * Returns the domains both configs define with the same rules ({@link sameRules}): requests of
 * these domains are answered alike by both. Empty when either config has no read-only view
 * (test fakes).
 */
export function unchangedDomains(
  live: RateLimitConfig,
  candidate: RateLimitConfig,
): Set<string> {
  const unchanged = new Set<string>();
  const liveView = live.view;
  const candidateView = candidate.view;
  if (liveView === undefined || candidateView === undefined) return unchanged;
  for (const domain of live.domains) {
    const candidateRules = candidateView.domainRules(domain);
    if (candidateRules === undefined) continue;
    if (sameRules(liveView.domainRules(domain), candidateRules))
      unchanged.add(domain);
  }
  return unchanged;
}

function sameNode(a: DescriptorNode, b: DescriptorNode): boolean {
  return (
    a.compositeKey === b.compositeKey &&
    a.shareThreshold === b.shareThreshold &&
    // value_to_metric only renames statistics, but it also makes the lookup return a fresh
    // limit object; compared so that "same" never depends on that detail.
    a.valueToMetric === b.valueToMetric &&
    sameLimit(a.limit, b.limit) &&
    sameRules(a.children, b.children)
  );
}

function sameBucket(a: RateLimit, b: RateLimit): boolean {
  const x = bucketOf(a.algorithm);
  const y = bucketOf(b.algorithm);
  if (x === undefined || y === undefined) return x === y;
  return x.emissionIntervalUs === y.emissionIntervalUs && x.burst === y.burst;
}

function sameCalendar(a: RateLimit, b: RateLimit): boolean {
  const x = calendarOf(a.algorithm);
  const y = calendarOf(b.algorithm);
  if (x === undefined || y === undefined) return x === y;
  return (
    x.unit === y.unit &&
    x.timeZone === y.timeZone &&
    x.weekStart === y.weekStart
  );
}

function sameExtraLimits(
  a: readonly RateLimit[] | undefined,
  b: readonly RateLimit[] | undefined,
): boolean {
  if (a === undefined || b === undefined) return a === b;
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) {
    if (!sameLimit(a[i], b[i])) return false;
  }
  return true;
}

function sameStrings(a: readonly string[], b: readonly string[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function sameOptionalStrings(
  a: readonly (string | undefined)[] | undefined,
  b: readonly (string | undefined)[] | undefined,
): boolean {
  if (a === undefined || b === undefined) return a === b;
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
