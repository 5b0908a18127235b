import type { JsonObject } from "@bufbuild/protobuf";

/**
 * One `replaces` entry of a `rate_limit` block: the `name` of another rate limit that this one
 * replaces when both match a request.
 */
export interface YamlReplaces {
  /** Name of the replaced rate limit; "" when missing (rejected at load). */
  readonly name: string;
}

/**
 * The `rate_limit` block of a descriptor, as written (before unit validation).
 * Same fields as upstream `config_impl.go` `YamlRateLimit`.
 */
export interface YamlRateLimit {
  /** `requests_per_unit`: allowed hits per window, 0 … 4294967295; 0 when missing. */
  readonly requestsPerUnit: number;
  /**
   * `unit` exactly as written (`minute`, `MINUTE`, `foo`, ""); matched case-insensitively
   * against SECOND…YEAR at load time.
   */
  readonly unit: string;
  /** `unlimited`: the rule never contacts the backend; false when missing. */
  readonly unlimited: boolean;
  /** `name` under which other rules may replace this one; "" when missing. */
  readonly name: string;
  /** `replaces`, in YAML order; empty when missing. */
  readonly replaces: readonly YamlReplaces[];
  /**
   * `algorithm` (an extension the reference does not have): how hits are counted. Validated
   * when decoded; `fixed_window` when missing (the reference's behaviour).
   */
  readonly algorithm?: YamlAlgorithm | undefined;
  /**
   * `unit_multiplier` (an extension): the window is this many units long, an integer ≥ 1.
   * Validated when decoded; 1 when missing (the reference's one-unit window).
   */
  readonly unitMultiplier?: number | undefined;
  /**
   * `burst` (an extension, only with `algorithm: token_bucket`): hits a full bucket admits at
   * one instant, an integer ≥ 1. Validated when decoded; `requests_per_unit` when missing.
   */
  readonly burst?: number | undefined;
  /**
   * `time_zone` (an extension, only with unit DAY, WEEK, MONTH or YEAR): the IANA zone whose
   * local days, weeks, months or years are the windows, as written (checked at load time).
   * Absent when missing or null: windows aligned to the Unix epoch (the reference's).
   */
  readonly timeZone?: string | undefined;
  /**
   * `week_start` (an extension, only with `time_zone` and unit WEEK): the day weeks start on,
   * as written (checked at load time). Absent when missing or null: `monday`.
   */
  readonly weekStart?: string | undefined;
  /**
   * `lease` (an extension, window algorithms only): hot-key leases, false when missing or
   * null (every hit counted in the store, the reference's behaviour).
   */
  readonly lease?: boolean | undefined;
  /**
   * `lease_max` (an extension, only with `lease: true`): most hits one lease takes, an integer
   * ≥ 1. Validated when decoded; 1 % of `requests_per_unit` (at least 1) when missing.
   */
  readonly leaseMax?: number | undefined;
}

/** Counting algorithms of a rate limit (`algorithm:`). */
export type YamlAlgorithm = "fixed_window" | "sliding_window" | "token_bucket";

/** Every accepted `algorithm:` value. */
export const yamlAlgorithms: readonly YamlAlgorithm[] = [
  "fixed_window",
  "sliding_window",
  "token_bucket",
];

/**
 * How a request's counters are charged (domain-level `charge:`, global `CHARGE_MODE`):
 * `each` (the reference's behaviour: every descriptor's counter is incremented) or
 * `all_or_nothing` (a request rejected by any limit increments none of them).
 */
export type ChargeMode = "each" | "all_or_nothing";

/** Every accepted `charge:` value. */
export const chargeModes: readonly ChargeMode[] = ["each", "all_or_nothing"];

/**
 * One descriptor rule of the config tree. Field defaults are Go zero values ("" / false / empty
 * list), as upstream `config_impl.go` `YamlDescriptor` decodes them.
 */
export interface YamlDescriptor {
  /** `key`: required; "" when missing (rejected at load). */
  readonly key: string;
  /** `value`: optional; "" when missing or null. May contain `*` wildcards. */
  readonly value: string;
  /** `rate_limit`: absent when missing or null (a node without its own limit). */
  readonly rateLimit?: YamlRateLimit | undefined;
  /**
   * `rate_limits` (an extension, instead of `rate_limit`): several limits checked together
   * for every request the rule matches, in YAML order (the first is the rule's `limit`, the
   * others its `extraLimits`). Absent when missing or null; an empty list is kept (and refused
   * at load time).
   */
  readonly rateLimits?: readonly YamlRateLimit[] | undefined;
  /** Nested `descriptors`, in YAML order; empty when missing. */
  readonly descriptors: readonly YamlDescriptor[];
  /** `shadow_mode`. */
  readonly shadowMode: boolean;
  /** `quota_mode`. */
  readonly quotaMode: boolean;
  /** `detailed_metric`. */
  readonly detailedMetric: boolean;
  /** `value_to_metric` (YAML only; the xDS proto has no such field). */
  readonly valueToMetric: boolean;
  /** `share_threshold` (YAML only; the xDS proto has no such field). */
  readonly shareThreshold: boolean;
  /**
   * `metadata`: arbitrary map, with YAML numbers as JSON numbers and non-string nested keys
   * stringified (the shape of a protobuf `Struct`). Absent when missing or null.
   */
  readonly metadata?: JsonObject | undefined;
  /** 1-based line of the rule in its file, when parsed from YAML (Explain and console). */
  readonly line?: number | undefined;
}

/**
 * The checked content of one config source: a YAML file (`parseConfigFile`) or, later,
 * one xDS `RateLimitConfig` resource. Plain data; per-domain validation happens at load time.
 * Same shape as upstream `config_impl.go` `YamlRoot`.
 */
export interface YamlRoot {
  /** `domain`: "" when missing (rejected at load). */
  readonly domain: string;
  /** Top-level `descriptors`, in YAML order; empty when missing. */
  readonly descriptors: readonly YamlDescriptor[];
  /**
   * `charge` (an extension): the domain's charge mode. Absent when missing: the global
   * `CHARGE_MODE` (default `each`) applies.
   */
  readonly charge?: ChargeMode | undefined;
  /**
   * `failure_mode` as written (checked at load time against `FailureMode`); absent when
   * missing or null. Not a reference key (docs/failure-modes.md).
   */
  readonly failureMode?: string | undefined;
}

/**
 * Every key allowed in a config file. One flat list, checked at every depth (a known key in the
 * wrong place is accepted and ignored); content under `metadata` is not checked. Same list as
 * upstream `config_impl.go` `validKeys`.
 */
export const allowedYamlKeys: ReadonlySet<string> = new Set([
  "domain",
  "key",
  "value",
  "descriptors",
  "rate_limit",
  "unit",
  "requests_per_unit",
  "unlimited",
  "shadow_mode",
  "quota_mode",
  "name",
  "replaces",
  "detailed_metric",
  "value_to_metric",
  "share_threshold",
  "metadata",
  // Extensions of this service (not in the reference; opt-in): see docs/configuration.md.
  "algorithm",
  "unit_multiplier",
  "charge",
  "failure_mode",
  "rate_limits",
  "burst",
  "time_zone",
  "week_start",
  "lease",
  "lease_max",
]);
