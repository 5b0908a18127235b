// Short builders for scenario tables: descriptors from `key=value` text, rules as YAML-shaped
// data, and the usual expectations.
import type {
  DescriptorConfig,
  DescriptorRequest,
  Expectation,
  StatusExpectation,
  Step,
  UnitName,
} from "../model.js";

/** A descriptor from `key=value` pairs (the first `=` splits; `key=` is an empty value). */
export function d(...pairs: string[]): DescriptorRequest {
  return {
    entries: pairs.map((p) => {
      const i = p.indexOf("=");
      return i < 0 ? [p, ""] : [p.slice(0, i), p.slice(i + 1)];
    }),
  };
}

/** A `rate_limit` block. */
export function per(
  requestsPerUnit: number,
  unit: Lowercase<Exclude<UnitName, "UNKNOWN">>,
  extra: Readonly<Record<string, unknown>> = {},
): Record<string, unknown> {
  return { unit, requests_per_unit: requestsPerUnit, ...extra };
}

/** A rule: `key`, optional `value`, a limit, and fields. */
export function rule(
  key: string,
  value: string | undefined,
  limit?: Record<string, unknown>,
  extra: Readonly<Record<string, unknown>> = {},
): DescriptorConfig {
  return {
    key,
    ...(value !== undefined ? { value } : {}),
    ...(limit !== undefined ? { rate_limit: limit } : {}),
    ...extra,
  };
}

/** A rule with nested rules (and optionally its own limit). */
export function nest(
  key: string,
  value: string | undefined,
  children: readonly DescriptorConfig[],
  limit?: Record<string, unknown>,
): DescriptorConfig {
  return rule(key, value, limit, { descriptors: children });
}

type Lim = readonly [requestsPerUnit: number, unit: UnitName];

/** An OK status; with `remaining` and the applied limit when given. */
export function ok(remaining?: number, limit?: Lim): StatusExpectation {
  return {
    code: "OK",
    ...(remaining !== undefined ? { remaining } : {}),
    ...(limit !== undefined
      ? { limit: { requestsPerUnit: limit[0], unit: limit[1] } }
      : {}),
  };
}

/** An OVER_LIMIT status (limitRemaining 0), with the applied limit when given. */
export function over(limit?: Lim): StatusExpectation {
  return {
    code: "OVER_LIMIT",
    remaining: 0,
    ...(limit !== undefined
      ? { limit: { requestsPerUnit: limit[0], unit: limit[1] } }
      : {}),
  };
}

/** An OK status with no limit applied (no match, whitelisted, placeholder, replaced). */
export const none: StatusExpectation = { code: "OK", limit: null };

/** The overall code of some statuses: OVER_LIMIT when any is. */
function overallOf(
  statuses: readonly StatusExpectation[],
): Expectation["overall"] {
  if (statuses.some((s) => s.code === undefined)) return undefined;
  return statuses.some((s) => s.code === "OVER_LIMIT") ? "OVER_LIMIT" : "OK";
}

/** Expect these statuses, and the overall code they imply. */
export function expectAll(...statuses: StatusExpectation[]): Expectation {
  const overall = overallOf(statuses);
  return { ...(overall !== undefined ? { overall } : {}), statuses };
}

/** One call of one descriptor. */
export function hit(
  descriptor: DescriptorRequest,
  status: StatusExpectation,
  extra: Partial<Omit<Step, "descriptors" | "expect">> = {},
): Step {
  return { descriptors: [descriptor], expect: expectAll(status), ...extra };
}

/** One call of several descriptors. */
export function hits(
  descriptors: readonly DescriptorRequest[],
  statuses: readonly StatusExpectation[],
  extra: Partial<Omit<Step, "descriptors" | "expect">> = {},
): Step {
  return { descriptors, expect: expectAll(...statuses), ...extra };
}

/** `limit` calls that count down to 0, then `overBy` over-limit calls. */
export function countdown(
  descriptor: DescriptorRequest,
  limit: Lim,
  overBy = 1,
): Step[] {
  const steps: Step[] = [];
  for (let i = 1; i <= limit[0]; i++)
    steps.push(hit(descriptor, ok(limit[0] - i, limit)));
  for (let i = 0; i < overBy; i++) steps.push(hit(descriptor, over(limit)));
  return steps;
}

/** The same descriptor `n` times, each with no limit applied. */
export function noneTimes(descriptor: DescriptorRequest, n: number): Step[] {
  return Array.from({ length: n }, () => hit(descriptor, none));
}
