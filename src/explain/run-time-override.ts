// Run-time overrides (admin API, docs/operations.md#overrides) as Explain sees them: the
// override that replaced a descriptor's rule limit, probed after the config walk exactly where
// ShouldRateLimit probes it (limiter/limit-request.ts `resolveRequest`), so the explanation
// counts with the limit the decision counts with and says which override decided it.

import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { RateLimit } from "../config/rate-limit-config.js";
import {
  RuntimeOverrideSchema,
  type RateLimitDescriptor,
  type RuntimeOverride,
} from "../proto.js";

/** The override that decided a descriptor's limit. */
export interface AppliedOverride {
  /** The limit counted: the override's, laid over the rule's. */
  readonly limit: RateLimit;
  /** The override's descriptor as set, `k=v,k2=v2*`. */
  readonly descriptor: string;
  readonly reason: string;
  readonly actor: string;
  /** When it stops applying, ms since the epoch; `undefined`: never. */
  readonly expireMs: number | undefined;
  /** When it was set, ms since the epoch. */
  readonly updateMs: number;
}

/** The run-time overrides of the process, read by Explain (the override table). */
export interface ExplainOverrides {
  /**
   * The override that applies to a descriptor whose config walk found `limit`, or
   * `undefined` (none, expired, or the request carries its own limit). Reads only.
   */
  applied(
    domain: string,
    descriptor: RateLimitDescriptor,
    limit: RateLimit,
  ): AppliedOverride | undefined;
}

/** The `RuntimeOverride` message of an applied override. */
export function runtimeOverrideMessage(
  applied: AppliedOverride,
): RuntimeOverride {
  return create(RuntimeOverrideSchema, {
    descriptor: applied.descriptor,
    reason: applied.reason,
    actor: applied.actor,
    ...(applied.expireMs !== undefined
      ? { expireTime: timestampFromMs(applied.expireMs) }
      : {}),
    updateTime: timestampFromMs(applied.updateMs),
  });
}

/** The note an explained descriptor carries when a run-time override decided its limit. */
export function runtimeOverrideNote(applied: AppliedOverride): string {
  const expiry =
    applied.expireMs === undefined
      ? "no expiry"
      : `expires ${new Date(applied.expireMs).toISOString()}`;
  const reason = applied.reason === "" ? "" : `, reason: ${applied.reason}`;
  return `run-time override ${applied.descriptor} (set by ${applied.actor}, ${expiry}${reason}) replaces the rule's limit`;
}
