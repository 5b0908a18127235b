// What a canary found since it started: per rule, the requests whose overall code the candidate
// would change (OK → OVER_LIMIT, "would refuse"; OVER_LIMIT → OK, "would admit") and the
// descriptor values that changed most, in bounded memory; plus totals. Built into the admin
// API's `GetCanaryReportResponse` (proto/ratelimit/admin/v1/admin.proto).

import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import {
  CanaryRuleReportSchema,
  GetCanaryReportResponseSchema,
  OffenderSchema,
  type GetCanaryReportResponse,
  type RateLimitDescriptor,
} from "../proto.js";

/** Bounds of a {@link CanaryReport}. */
export interface CanaryReportOptions {
  /**
   * Rules reported apart; changes of further rules (request-supplied limits, whose stats keys
   * are built from request values) are added up under {@link otherRules}. @defaultValue 1000
   */
  readonly maxRules?: number;
  /** Descriptor values listed per rule, heaviest first. @defaultValue 10 */
  readonly topValues?: number;
  /**
   * Values tracked per rule (Space-Saving counters, ≥ `topValues`): an estimate is at most
   * `changes of the rule / trackedValues` above the truth. @defaultValue 64
   */
  readonly trackedValues?: number;
  /** Longest descriptor text kept, UTF-16 code units (longer ones are cut, ending in `…`). @defaultValue 256 */
  readonly maxDescriptorChars?: number;
}

/** The rule name of changes beyond {@link CanaryReportOptions.maxRules} rules. */
export const otherRules = "(other rules)";

/** One change the candidate would make to a request's overall code. */
export type CanaryChange = "refuse" | "admit";

/** Tallies of one rule; `top` counts changed requests per descriptor value. */
interface RuleTally {
  readonly rule: string;
  readonly domain: string;
  wouldRefuse: number;
  wouldAdmit: number;
  readonly top: ChangedValues;
}

/** The running report of one canary (see the file comment). */
export class CanaryReport {
  /** Requests the canary was told about (every ShouldRateLimit request decided). */
  requests = 0;
  /** Requests that could not be evaluated (see `unevaluated_requests` in admin.proto). */
  unevaluated = 0;
  private changed = 0;
  private readonly rules = new Map<string, RuleTally>();
  private readonly maxRules: number;
  private readonly topValues: number;
  private readonly trackedValues: number;
  private readonly maxDescriptorChars: number;

  /** @throws {@link RangeError} when a bound is not a positive integer, or `trackedValues` < `topValues` */
  constructor(options: CanaryReportOptions = {}) {
    this.maxRules = positive("maxRules", options.maxRules ?? 1000);
    this.topValues = positive("topValues", options.topValues ?? 10);
    this.trackedValues = positive("trackedValues", options.trackedValues ?? 64);
    this.maxDescriptorChars = positive(
      "maxDescriptorChars",
      options.maxDescriptorChars ?? 256,
    );
    if (this.trackedValues < this.topValues)
      throw new RangeError(
        `invalid trackedValues ${this.trackedValues}: expected ≥ topValues (${this.topValues})`,
      );
  }

  /**
   * Records one request whose overall code the candidate changes.
   *
   * @param rule - the stats key of the rule that decides the change
   * @param descriptor - the request's descriptor that decides it (its entries are the value)
   */
  record(
    change: CanaryChange,
    rule: string,
    domain: string,
    descriptor: RateLimitDescriptor | undefined,
  ): void {
    this.changed++;
    let tally = this.rules.get(rule);
    if (tally === undefined) {
      if (this.rules.size >= this.maxRules) {
        rule = otherRules;
        domain = "";
        tally = this.rules.get(rule);
      }
      if (tally === undefined) {
        tally = {
          rule,
          domain,
          wouldRefuse: 0,
          wouldAdmit: 0,
          top: new ChangedValues(this.trackedValues),
        };
        this.rules.set(rule, tally);
      }
    }
    if (change === "refuse") tally.wouldRefuse++;
    else tally.wouldAdmit++;
    tally.top.add(
      descriptor === undefined
        ? ""
        : descriptorText(descriptor, this.maxDescriptorChars),
      change === "refuse",
    );
  }

  /**
   * The report as the admin API answers it: rules with the most changes first (then by name),
   * each with its top values heaviest first.
   *
   * @param startMs - when the canary started, ms since the Unix epoch
   * @param source - the candidate's directory, or "inline"
   */
  toMessage(
    active: boolean,
    startMs: number,
    source: string,
  ): GetCanaryReportResponse {
    const rules = [...this.rules.values()].sort(
      (a, b) =>
        b.wouldRefuse + b.wouldAdmit - (a.wouldRefuse + a.wouldAdmit) ||
        (a.rule < b.rule ? -1 : a.rule > b.rule ? 1 : 0),
    );
    return create(GetCanaryReportResponseSchema, {
      active,
      startTime: timestampFromMs(startMs),
      requests: BigInt(this.requests),
      changedRequests: BigInt(this.changed),
      unevaluatedRequests: BigInt(this.unevaluated),
      source,
      rules: rules.map((tally) =>
        create(CanaryRuleReportSchema, {
          rule: tally.rule,
          domain: tally.domain,
          wouldRefuse: BigInt(tally.wouldRefuse),
          wouldAdmit: BigInt(tally.wouldAdmit),
          top: tally.top.heaviest(this.topValues).map((value) =>
            create(OffenderSchema, {
              descriptor: value.item,
              hits: BigInt(value.count),
              overLimit: BigInt(value.refused),
              error: BigInt(value.error),
            }),
          ),
        }),
      ),
    });
  }
}

/**
 * Returns a descriptor's entries as `k=v,k2=v2` (the form top offenders use), cut to
 * `maxChars` UTF-16 code units ending in `…`.
 */
export function descriptorText(
  descriptor: RateLimitDescriptor,
  maxChars: number,
): string {
  let text = "";
  for (const entry of descriptor.entries) {
    if (text !== "") text += ",";
    text += entry.key + "=" + entry.value;
    if (text.length > maxChars) break;
  }
  return text.length > maxChars ? text.slice(0, maxChars - 1) + "…" : text;
}

/** One tracked value of {@link ChangedValues}. */
export interface ChangedValue {
  readonly item: string;
  /** Changed requests (at most `error` above the truth). */
  readonly count: number;
  /** Of them, would-refuse changes (same bound). */
  readonly refused: number;
  /** Most `count` and `refused` may exceed the truth by (Space-Saving's bound). */
  readonly error: number;
}

/**
 * The most frequent values among a rule's changed requests in fixed memory: Space-Saving
 * (Metwally, Agrawal, El Abbadi, ICDT 2005) with `capacity` counters and a second counter for
 * would-refuse changes. A value not tracked takes the smallest counter's place and inherits its
 * count as its error, so an estimate is never below the truth and at most `total / capacity`
 * above it, and every value seen more than `total / capacity` times is tracked. Only changed
 * requests reach it (rare next to decisions), so the smallest counter is found by a scan.
 */
export class ChangedValues {
  private readonly capacity: number;
  private readonly values = new Map<
    string,
    { count: number; refused: number; error: number }
  >();

  constructor(capacity: number) {
    this.capacity = capacity;
  }

  /** Counts one changed request of `item`. */
  add(item: string, refused: boolean): void {
    const tracked = this.values.get(item);
    if (tracked !== undefined) {
      tracked.count++;
      if (refused) tracked.refused++;
      return;
    }
    if (this.values.size < this.capacity) {
      this.values.set(item, { count: 1, refused: refused ? 1 : 0, error: 0 });
      return;
    }
    let minItem = "";
    let min = Infinity;
    for (const [key, value] of this.values) {
      if (value.count < min) {
        min = value.count;
        minItem = key;
      }
    }
    this.values.delete(minItem);
    this.values.set(item, {
      count: min + 1,
      refused: min + (refused ? 1 : 0),
      error: min,
    });
  }

  /** The `k` heaviest values, heaviest first (ties by value). */
  heaviest(k: number): ChangedValue[] {
    return [...this.values]
      .map(([item, v]) => ({ item, ...v }))
      .sort(
        (a, b) =>
          b.count - a.count || (a.item < b.item ? -1 : a.item > b.item ? 1 : 0),
      )
      .slice(0, k);
  }
}

function positive(name: string, value: number): number {
  if (!Number.isInteger(value) || value < 1)
    throw new RangeError(`invalid ${name} ${value}: expected an integer ≥ 1`);
  return value;
}
