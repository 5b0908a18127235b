// The two places where day-2 features meet the hot path (docs/operations.md): run-time
// overrides replace a rule's limit right after the descriptor's tree lookup, and observers
// (top offenders, the config canary) are told each decided request after its statuses are
// known. Both are optional: without them the decision runs exactly as before.

import type {
  RateLimit,
  RateLimitConfig,
} from "../config/rate-limit-config.js";
import type {
  RateLimitDescriptor,
  RateLimitResponse_Code,
  RateLimitResponse_DescriptorStatus,
} from "../proto.js";

/** Run-time overrides of rule limits, probed after each descriptor's tree lookup. */
export interface OverrideLookup {
  /**
   * The limit to use instead of `limit` for this descriptor, or `undefined` to keep it.
   * Called only for descriptors whose lookup found a limit. Must be cheap (one map probe when
   * the domain has overrides, nothing more when it has none) and never throw.
   *
   * @param limit - the rule's limit the tree lookup found
   */
  find(
    domain: string,
    descriptor: RateLimitDescriptor,
    limit: RateLimit,
  ): RateLimit | undefined;
}

/** One request as ShouldRateLimit decided it (arrays are the service's; read, never keep). */
export interface DecidedRequest {
  readonly domain: string;
  readonly descriptors: readonly RateLimitDescriptor[];
  /**
   * Parallel to `descriptors`: the limit counted (after overrides, `unlimited` and
   * `replaces`), `undefined` where none was.
   */
  readonly limits: readonly (RateLimit | undefined)[];
  /** Parallel to `descriptors`: hits added (negative: a refund). */
  readonly hitsAddends: readonly number[];
  /** Parallel to `descriptors`: the statuses answered (before global shadow mode). */
  readonly statuses: readonly RateLimitResponse_DescriptorStatus[];
  /** The overall code before global shadow mode. */
  readonly overallCode: RateLimitResponse_Code;
  /** The config the request was decided with. */
  readonly config: RateLimitConfig;
}

/** Told every decided request (top offenders, canary). */
export interface DecisionObserver {
  /**
   * Called synchronously after the decision, before the answer leaves. Must be cheap, never
   * throw and never keep the arrays; work that needs the backend must be scheduled, not awaited.
   */
  observe(request: DecidedRequest): void;
}
