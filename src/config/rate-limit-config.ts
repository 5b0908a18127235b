// The config contract every caller reads: the limit a descriptor matches (RateLimit), the
// config itself (RateLimitConfig), and the read-only view of its compiled rule tree
// (ConfigView, DescriptorLevel, DescriptorNode) that Explain and the debug console walk.
// Declared in one file that imports no other config/ file but failure-mode.ts, so the files
// that compile, look up and explain the tree all import it and it imports none of them.

import type { Algorithm } from "./algorithm.js";
import type { FailureMode } from "./failure-mode.js";
import type { Lease } from "./lease.js";
import type { JsonObject } from "@bufbuild/protobuf";
import type {
  RateLimitDescriptor,
  RateLimitDescriptor_RateLimitOverride,
  RateLimitResponse_RateLimit_Unit,
} from "../proto.js";
import type { RateLimitStats } from "../stats/stats-manager.js";

/**
 * One configured (or request-supplied) rate limit, as matched for a request descriptor.
 * Objects built at config load are frozen and shared by every request; a match that changes
 * the stats key or cache key values (detailed_metric, value_to_metric, share_threshold, request
 * override) returns a fresh object.
 */
export interface RateLimit {
  /**
   * Config path of the node holding the limit, unsanitized: `<domain>.<ck1>.<ck2>` with config
   * composite keys (`key` or `key_value`, wildcards kept). Used by the `/rlconfig` dump.
   */
  readonly fullKey: string;
  /** Stats handles for this match (key per docs/reference-parity.md#stats-key). */
  readonly stats: RateLimitStats;
  /** Allowed hits per window; 0 blocks every hit. Ignored when `unlimited`. */
  readonly requestsPerUnit: number;
  /** Window unit; UNKNOWN when `unlimited`. */
  readonly unit: RateLimitResponse_RateLimit_Unit;
  /** Length of one unit in seconds (see `unitToSeconds`); 0 when `unlimited`. */
  readonly unitSeconds: number;
  /**
   * `unit_multiplier` (an extension): the window is this many units long; 1 (the reference's
   * one-unit window) unless configured.
   */
  readonly unitMultiplier: number;
  /**
   * Window length in seconds, `unitSeconds × unitMultiplier`, decided at load; equal to
   * `unitSeconds` for the reference's windows; 0 when `unlimited`. Windows start at multiples
   * of it since the Unix epoch.
   */
  readonly windowSeconds: number;
  /**
   * The algorithm (issue 32 item 2), decided and frozen at load: `fixed_window` (the
   * reference's, the default), `sliding_window` (the weighted sum of the previous and the
   * current window's counters) or `token_bucket` (GCRA parameters: emission interval from
   * `requests_per_unit` per `windowSeconds`, `burst`); a window's bounds are epoch-aligned
   * multiples of `windowSeconds`, or a calendar period (`time_zone:` with a DAY, WEEK, MONTH or
   * YEAR unit: the unit in that IANA zone; `windowSeconds` stays the unit's nominal length for
   * the dump and headers while a decision uses the period's real bounds). Each kind has its
   * module in `limiter/` (`fixed-window.ts`, `sliding-window.ts`, `token-bucket.ts`).
   */
  readonly algorithm: Algorithm;
  /**
   * Appended to the cache key after the window start, decided at load: "" for the reference's
   * fixed one-unit windows (keys stay byte-identical), `_w<windowSeconds>` for fixed windows
   * of several units (and for every fixed window in a `rate_limits:` list, whose windows could
   * otherwise start at the same second), `_s<windowSeconds>` for sliding windows; for token
   * buckets the whole tail after the stem (`tb<windowSeconds>_<requests_per_unit>_<burst>`, see
   * `gcraCacheKeyTail`), with no window start; calendar windows put the period's
   * `cacheKeyPart` (`2026-11@Europe/Berlin`) where the window start would be.
   */
  readonly cacheKeySuffix: string;
  /**
   * `rate_limits:` (an extension, a list instead of `rate_limit:`): the list's other limits,
   * in list order, checked with this one (the list's first entry) for every request that
   * matches the rule; each has its own counter and statistics. A request is over limit when
   * any of them is; the answer reports the tightest. Undefined for a rule with `rate_limit:`
   * (every reference config), and on the extra limits themselves.
   */
  readonly extraLimits: readonly RateLimit[] | undefined;
  /**
   * Appended to the stats key of a limit in a `rate_limits:` list, decided at load: `_<name>`
   * when the entry has a `name`, else `_per_<unit>` (`_per_second`, `_per_5_minute` with
   * `unit_multiplier: 5`), so that `<domain>.<key>_<value>_per_second.total_hits` and
   * `…_per_hour.total_hits` count apart; "" for `rate_limit:` (stats keys stay the
   * reference's). Derived stats keys (detailed_metric, value_to_metric) append it too.
   */
  readonly statsKeySuffix: string;
  /**
   * The domain's charge mode is `all_or_nothing` (YAML `charge:` or the global `CHARGE_MODE`):
   * when any limit of a request is over, no counter of the request is incremented.
   */
  readonly allOrNothing: boolean;
  /** When true the backend is never called and `limitRemaining` is 4294967295. */
  readonly unlimited: boolean;
  /** When true an over-limit result is reported as OK (and counted in `shadow_mode`). */
  readonly shadowMode: boolean;
  /**
   * Quota mode flag of the rule (accepted from config; see docs/reference-parity.md#overall-code).
   */
  readonly quotaMode: boolean;
  /** Optional name under which other limits may replace this one; "" when unnamed. */
  readonly name: string;
  /** Names of the limits this one replaces. */
  readonly replaces: readonly string[];
  /** Whether the node holding the limit has `detailed_metric`. */
  readonly detailedMetric: boolean;
  /** Config `metadata` of the node holding the limit, if any. */
  readonly metadata: JsonObject | undefined;
  /**
   * Parallel to the request descriptor's entries: for an entry matched through a wildcard
   * node with `share_threshold: true`, the configured pattern value (e.g. `files/*`) that
   * replaces the request value in the cache key; `undefined` elsewhere. `undefined` as a whole
   * when no entry was matched that way (the common case).
   */
  readonly shareThresholdValues: readonly (string | undefined)[] | undefined;
  /**
   * `lease: true` (an extension, issue 33 item 2): hot-key leases for a window limit, with
   * `lease_max` and the rule's lease statistics (docs/configuration.md#leases). Absent (not
   * even `undefined`) on every other limit, so their shape and behaviour stay the reference's.
   */
  readonly lease?: Lease;
}

/** Where a rule is defined: a config file and line, or an xDS resource and its version. */
export interface RuleSource {
  /** File name (runtime key, e.g. `config.basic.yaml`) or xDS resource name. */
  readonly name: string;
  /** 1-based line of the rule in the file; 0 when unknown (xDS). */
  readonly line: number;
  /** xDS `version_info` of the resource; "" for files. */
  readonly version: string;
}

/**
 * One compiled descriptor rule. Built once per config load and never changed after the load
 * completes; requests only read it.
 */
export interface DescriptorNode {
  /** Composite key: `key`, or `key_value` when the rule has a value (wildcards keep `*`). */
  readonly compositeKey: string;
  /** Config path `<domain>.<ck1>.<ck2>…`, unsanitized (dump and default stats key). */
  readonly fullKey: string;
  /** The frozen limit built at load, shared by every request; undefined for a pure path node. */
  readonly limit: RateLimit | undefined;
  /** Nested level; undefined when the rule has no nested descriptors. */
  readonly children: DescriptorLevel | undefined;
  /** `value_to_metric` of this rule. */
  readonly valueToMetric: boolean;
  /** `share_threshold` of this rule (only allowed when the composite key contains `*`). */
  readonly shareThreshold: boolean;
  /** Where the rule is defined (Explain and the debug console; never read by lookups). */
  readonly source: RuleSource;
}

/**
 * A compiled wildcard rule: its composite key pre-split on `*`. Kept on the level that holds the
 * rule, in load order (upstream `config_impl.go` `wildcardKeys`).
 */
export interface WildcardPattern {
  /** The composite key, e.g. `wild_foo*` or `a*b*c`. */
  readonly pattern: string;
  /** Literal text before the first `*`. */
  readonly prefix: string;
  /** Literal text after the last `*`. */
  readonly suffix: string;
  /** Literal texts between consecutive `*`, in order (empty strings dropped). */
  readonly middles: readonly string[];
  /** Sum of all literal lengths: the shortest string that can match. */
  readonly minLength: number;
}

/** One level of the tree: a map by composite key plus the ordered wildcard rules. */
export interface DescriptorLevel {
  /** Every rule of the level by composite key (wildcard rules included). */
  readonly nodes: ReadonlyMap<string, DescriptorNode>;
  /** Rules whose composite key contains `*`, in load order; the first match wins. */
  readonly wildcards: readonly (WildcardPattern & {
    readonly node: DescriptorNode;
  })[];
}

/**
 * The read-only view of a loaded config that Explain and the debug console read: the compiled
 * rule tree of each domain (the structures `getLimit` walks, not copies) and the override limit.
 * Reading it counts no statistic, except that {@link ConfigView.overrideLimit} creates the
 * stats handles of the override's stats key as `getLimit` does.
 */
export interface ConfigView {
  /** Returns the root level of a loaded domain's rules, or `undefined` for an unknown domain. */
  domainRules(domain: string): DescriptorLevel | undefined;
  /**
   * Returns the limit a request-supplied override yields in a loaded domain, exactly as
   * `getLimit` builds it (docs/reference-parity.md#limit-override).
   */
  overrideLimit(
    domain: string,
    descriptor: RateLimitDescriptor,
    override: RateLimitDescriptor_RateLimitOverride,
  ): RateLimit;
}

/** A loaded, immutable rate-limit configuration (all domains). */
export interface RateLimitConfig {
  /**
   * Returns the limit for one request descriptor, or `undefined` when nothing matches
   * (docs/reference-parity.md#matching). A request-supplied `limit` override replaces config
   * matching when the domain exists (its unit must already be validated as SECOND…YEAR). An unknown
   * domain counts `ratelimit.service.rate_limit.<domain>.domain_not_found` once per call.
   */
  getLimit(
    domain: string,
    descriptor: RateLimitDescriptor,
  ): RateLimit | undefined;
  /**
   * Returns the reference's dump format (docs/reference-parity.md#config-dump): one line per
   * descriptor with a rate limit,
   * `<fullKey>: unit=<UNIT> requests_per_unit=<n>, shadow_mode: <b>, quota_mode: <b>\n`; the
   * extensions are appended only when not at their default: `, unit_multiplier: <n>`,
   * `, algorithm: sliding_window` or `, algorithm: token_bucket, burst: <n>`,
   * `, time_zone: <zone>`, `, week_start: <day>`, `, charge: all_or_nothing`, `, lease: true, lease_max: <n>`. A `rate_limits:`
   * list dumps one line per limit, named `<fullKey><statsKeySuffix>`.
   */
  dump(): string;
  /** Number of loaded domains (a domain without descriptors counts). */
  readonly domainCount: number;
  /** Loaded domain names, sorted. */
  readonly domains: readonly string[];
  /**
   * The compiled rules, read-only, for Explain and the debug console: they walk the tree
   * themselves. Never read by ShouldRateLimit. Absent in test fakes.
   */
  readonly view?: ConfigView;
  /**
   * Domains whose config sets `failure_mode`, with that mode; absent or empty when none does
   * (the process-wide `BACKEND_FAILURE_MODE` applies). Read only when the backend fails.
   */
  readonly failureModes?: ReadonlyMap<string, FailureMode>;
}
