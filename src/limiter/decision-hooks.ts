// Where run-time overrides meet the hot path (docs/operations.md): they replace a rule's limit
// right after the descriptor's tree lookup, inside `resolveRequest` (limit-request.ts). What
// listens to decisions (top offenders, the config canary) subscribes to the decision channel
// (decision-channel.ts) instead. Optional: without overrides the decision runs as before.

import type { RateLimit } from "../config/rate-limit-config.js";
import type { RateLimitDescriptor } from "../proto.js";

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
