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
}

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
  "failure_mode",
]);
