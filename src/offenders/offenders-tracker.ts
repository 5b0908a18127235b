/* eslint-disable @typescript-eslint/no-non-null-assertion -- the decision path's parallel
   arrays (descriptors, limits, hits addends, statuses) are indexed in plain loops within their
   known length, as in limiter/ and service/ (eslint.config.js exempts those folders). */
// Top offenders per rule (docs/operations.md#top-offenders): a decision subscriber that counts
// every decided descriptor under its rule, in a heavy-hitters sketch per rule and window, and
// answers the heaviest descriptor values of each rule. Each process counts its own traffic.

import type { RateLimit } from "../config/rate-limit-config.js";
import type { Decision } from "../limiter/decision.js";
import {
  RateLimitResponse_Code as Code,
  type RateLimitDescriptor_Entry,
} from "../proto.js";
import { sanitizeStatName } from "../stats/names.js";
import type { Clock } from "../util/clock.js";
import {
  RuleTracker,
  descriptorText,
  otherKeyMark,
  type OffenderEstimate,
} from "./rule-tracker.js";

/** Options of {@link OffendersTracker}. */
export interface OffendersTrackerOptions {
  /** Offenders kept per rule (`TOP_OFFENDERS_K`), an integer 1–1000. */
  readonly k: number;
  /** The service clock: windows rotate by it. */
  readonly clock: Clock;
  /**
   * Space-Saving counters per window, per offender kept: each rule keeps
   * `countersPerOffender × k` counters per window (`m`), so each estimate is at most `N / m`
   * above the truth (`N` the rule's hits in that window). An integer 1–100.
   * @defaultValue 10
   */
  readonly countersPerOffender?: number;
  /**
   * Most rules tracked at once. A config has a fixed number of rules, but request-supplied
   * limits (Envoy's `limit` override) make a rule per descriptor value; once full, a new rule
   * is tracked only when an idle one (no traffic in its current and previous window) makes
   * room, else it is not tracked and counted in {@link OffendersTracker.droppedHits}. An
   * integer ≥ 1.
   * @defaultValue 1000
   */
  readonly maxRules?: number;
}

/** Defaults of {@link OffendersTrackerOptions}. */
export const offendersTrackerDefaults = Object.freeze({
  countersPerOffender: 10,
  maxRules: 1000,
});

/** The top offenders of one rule, as {@link OffendersTracker.top} reports them. */
export interface RuleTop {
  readonly domain: string;
  /** The rule's stats key as `/rlconfig` names it, e.g. `rl.foo_bar`. */
  readonly rule: string;
  /** Start of the previous window, Unix seconds: the counts run from it to now. */
  readonly sinceSeconds: number;
  /** Window length in seconds. */
  readonly windowSeconds: number;
  /** Hits of the rule over both windows, every descriptor value (exact). */
  readonly totalHits: number;
  /** Heaviest first. */
  readonly offenders: readonly OffenderEstimate[];
}

/**
 * Counts each decided descriptor under its rule and answers the heaviest descriptor values of
 * every rule over its current and previous window.
 *
 * A rule is its domain and its stats key as the config names it (`fullKey` plus the
 * `statsKeySuffix` of a `rate_limits:` list), so a `detailed_metric` or `value_to_metric`
 * rule's values are counted together under the rule rather than each under its own stats key.
 * A descriptor is counted under the limit the decision counted (after run-time overrides,
 * `unlimited` and `replaces`); for a `rate_limits:` list that is its first limit. Hits are the
 * descriptor's hits addend (0 and refunds are not counted); refused hits are those of a
 * descriptor answered OVER_LIMIT (a shadow-mode rule answers OK, so its hits are not refused).
 *
 * Cost per decision: one clock read, then per descriptor with a limit two Map probes, a heap
 * sift and, for a descriptor of two entries or more, its text (a one-entry descriptor is
 * counted under its value, which the request already holds); bench/offenders.ts measures it.
 */
export class OffendersTracker {
  /** Offenders kept per rule. */
  readonly k: number;
  /** Space-Saving counters per rule and window (`m`). */
  readonly countersPerWindow: number;
  /** Most rules tracked at once. */
  readonly maxRules: number;
  private readonly clock: Clock;
  /** Trackers by domain, then by rule id (`fullKey` + `statsKeySuffix`). */
  private readonly domains = new Map<string, Map<string, RuleTracker>>();
  private ruleCount = 0;
  private dropped = 0;
  private failed = 0;
  /** No sweep for idle rules before this time (one sweep per second at most). */
  private nextSweepSeconds = 0;
  private lastConfig: Decision["config"] | undefined;
  private generation = 0;

  /**
   * @throws RangeError naming the option when `k`, `countersPerOffender` or `maxRules` is out
   *   of its range
   */
  constructor(options: OffendersTrackerOptions) {
    const countersPerOffender =
      options.countersPerOffender ??
      offendersTrackerDefaults.countersPerOffender;
    const maxRules = options.maxRules ?? offendersTrackerDefaults.maxRules;
    checkInteger("k", options.k, 1, 1000);
    checkInteger("countersPerOffender", countersPerOffender, 1, 100);
    checkInteger("maxRules", maxRules, 1, Number.MAX_SAFE_INTEGER);
    this.k = options.k;
    this.countersPerWindow = countersPerOffender * options.k;
    this.maxRules = maxRules;
    this.clock = options.clock;
  }

  /** Rules tracked now. */
  get rules(): number {
    return this.ruleCount;
  }

  /** Hits of descriptors whose rule could not be tracked (the rule cap was reached). */
  get droppedHits(): number {
    return this.dropped;
  }

  /** Requests whose counting failed (a bug: nothing here is expected to throw). */
  get failures(): number {
    return this.failed;
  }

  /** Counts one decided request (a subscriber of the published decisions; never throws). */
  observe(decision: Decision): void {
    try {
      this.count(decision);
    } catch {
      // Top offenders are diagnostics: a bug in them must not fail the decision, which the
      // service would otherwise answer with an error. Counted, so tests and the bench see it.
      this.failed++;
    }
  }

  private count(decision: Decision): void {
    const request = decision.request;
    const { descriptors, limits, hitsAddends } = request;
    const statuses = decision.statuses;
    const n = descriptors.length;
    let nowSeconds = -1;
    let rules: Map<string, RuleTracker> | undefined;
    for (let i = 0; i < n; i++) {
      const limit = limits[i];
      if (limit === undefined) continue;
      const hits = hitsAddends[i]!;
      if (!(hits > 0)) continue;
      if (nowSeconds < 0) {
        // Once per request, and only for a request that counts anything.
        nowSeconds = this.clock.nowSeconds();
        if (decision.config !== this.lastConfig) {
          this.lastConfig = decision.config;
          this.generation++;
        }
        rules = this.domains.get(request.domain);
      }
      const id =
        limit.statsKeySuffix === ""
          ? limit.fullKey
          : limit.fullKey + limit.statsKeySuffix;
      let tracker = rules?.get(id);
      if (tracker === undefined) {
        tracker = this.admit(
          request.domain,
          id,
          limit,
          descriptors[i]!.entries,
          nowSeconds,
        );
        if (tracker === undefined) {
          this.dropped += hits;
          continue;
        }
        rules = this.domains.get(request.domain);
      } else if (tracker.generation !== this.generation) {
        // A new config: keep the counts unless the rule's window changed.
        tracker.generation = this.generation;
        if (!tracker.hasWindow(limit)) {
          if (!(limit.windowSeconds >= 1)) continue;
          tracker.reset(limit);
        }
      }
      // A one-entry descriptor (most rules) is counted under its value: no string is built.
      const entries = descriptors[i]!.entries;
      let item: string;
      if (entries.length === 1) {
        const entry = entries[0]!;
        item =
          entry.key === tracker.entryKey
            ? entry.value
            : otherKeyMark + entry.key + "=" + entry.value;
      } else {
        item = descriptorText(entries);
      }
      tracker.add(
        item,
        hits,
        statuses[i]!.code === Code.OVER_LIMIT ? hits : 0,
        nowSeconds,
      );
    }
  }

  /**
   * The top offenders of each rule with traffic in its current or previous window, rules
   * sorted by stats key (then domain), offenders heaviest first. Forgets rules that had none.
   *
   * @param domain - only this domain's rules; "" for every domain
   * @param k - offenders per rule; 0, or more than {@link OffendersTracker.k}, gives `k`
   */
  top(domain: string, k: number): RuleTop[] {
    const limit = k > 0 && k < this.k ? k : this.k;
    const nowSeconds = this.clock.nowSeconds();
    const out: RuleTop[] = [];
    for (const [name, rules] of this.domains) {
      if (domain !== "" && name !== domain) continue;
      for (const [id, tracker] of rules) {
        if (tracker.isIdle(nowSeconds)) {
          this.forget(name, rules, id);
          continue;
        }
        out.push({
          domain: name,
          rule: tracker.rule,
          sinceSeconds: tracker.sinceSeconds(nowSeconds),
          windowSeconds: tracker.windowSeconds,
          totalHits: tracker.totalHits,
          offenders: tracker.top(limit, nowSeconds),
        });
      }
    }
    out.sort((a, b) =>
      a.rule !== b.rule
        ? a.rule < b.rule
          ? -1
          : 1
        : a.domain < b.domain
          ? -1
          : a.domain > b.domain
            ? 1
            : 0,
    );
    return out;
  }

  /** A tracker for a rule seen for the first time, or `undefined` when the cap is reached. */
  private admit(
    domain: string,
    id: string,
    limit: RateLimit,
    entries: readonly RateLimitDescriptor_Entry[],
    nowSeconds: number,
  ): RuleTracker | undefined {
    if (!(limit.windowSeconds >= 1)) return undefined;
    if (this.ruleCount >= this.maxRules) {
      if (nowSeconds < this.nextSweepSeconds) return undefined;
      this.nextSweepSeconds = nowSeconds + 1;
      this.sweep(nowSeconds);
      if (this.ruleCount >= this.maxRules) return undefined;
    }
    let rules = this.domains.get(domain);
    if (rules === undefined) {
      rules = new Map();
      this.domains.set(domain, rules);
    }
    const tracker = new RuleTracker(
      domain,
      sanitizeStatName(id),
      entries.length === 1 ? entries[0]!.key : undefined,
      limit,
      this.countersPerWindow,
      this.generation,
    );
    rules.set(id, tracker);
    this.ruleCount++;
    return tracker;
  }

  /** Forgets every rule without traffic in its current and previous window. */
  private sweep(nowSeconds: number): void {
    for (const [domain, rules] of this.domains) {
      for (const [id, tracker] of rules) {
        if (tracker.isIdle(nowSeconds)) this.forget(domain, rules, id);
      }
    }
  }

  private forget(
    domain: string,
    rules: Map<string, RuleTracker>,
    id: string,
  ): void {
    rules.delete(id);
    this.ruleCount--;
    if (rules.size === 0) this.domains.delete(domain);
  }
}

function checkInteger(
  name: string,
  value: number,
  min: number,
  max: number,
): void {
  if (!Number.isInteger(value) || value < min || value > max)
    throw new RangeError(
      `invalid ${name} ${value}: expected an integer ${min}–${max}`,
    );
}
