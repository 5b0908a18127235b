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
// The heavy-hitters sketch of top offenders (Space-Saving with a refused counter per value).
import { SpaceSaving, type SketchEntry } from "../offenders/space-saving.js";

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
   * Values tracked per rule (Space-Saving counters, `src/offenders/space-saving.ts`; ≥
   * `topValues`): an estimate is at most `changes of the rule / trackedValues` above the
   * truth. @defaultValue 64
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
  /** Changed requests per descriptor value, would-refuse ones as its refused part. */
  readonly top: SpaceSaving;
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
          top: new SpaceSaving(this.trackedValues),
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
      1,
      change === "refuse" ? 1 : 0,
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
          top: heaviest(tally.top, this.topValues).map((value) =>
            create(OffenderSchema, {
              descriptor: value.item,
              hits: BigInt(value.count),
              overLimit: BigInt(value.overLimit),
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

/** The `k` heaviest values of a sketch, heaviest first (ties by value). */
function heaviest(sketch: SpaceSaving, k: number): SketchEntry[] {
  const entries: SketchEntry[] = [];
  sketch.forEach((entry) => entries.push(entry));
  return entries
    .sort(
      (a, b) =>
        b.count - a.count || (a.item < b.item ? -1 : a.item > b.item ? 1 : 0),
    )
    .slice(0, k);
}

function positive(name: string, value: number): number {
  if (!Number.isInteger(value) || value < 1)
    throw new RangeError(`invalid ${name} ${value}: expected an integer ≥ 1`);
  return value;
}
