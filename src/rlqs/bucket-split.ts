// One bucket's split, from its policy and its streams' demands to what each stream is told: the
// pure half of a split, shared by the service's pushes and by Explain's snapshot of a bucket, so
// that what Explain shows is computed by the very code that decides what is pushed.

import { splitQuota } from "./allocator.js";
import {
  shapeRate,
  tokenBucketFor,
  type Assignment,
  type TokenBucketShape,
} from "./assignment.js";
import type { BucketPolicy } from "./bucket-lookup.js";

/** One bucket's split among its streams. */
export interface BucketSplit {
  /** Each stream's share of L, requests per second; parallel to the demands. 0 for ALLOW_ALL. */
  readonly shares: readonly number[];
  /** What each stream is told; parallel to the demands. */
  readonly assignments: readonly Assignment[];
  /**
   * What each stream would be told were the rule enforced: equal to `assignments` except in
   * shadow mode, where the streams are told ALLOW_ALL; parallel to the demands.
   */
  readonly enforced: readonly Assignment[];
  /**
   * Sum of the rates the token buckets admit in the long run, requests per second (also in
   * shadow mode; 0 for a blanket policy): the `assigned_tokens_per_second` statistic.
   */
  readonly assignedPerSecond: number;
}

const allowAll: Assignment = { kind: "allow_all" };
const denyAll: Assignment = { kind: "deny_all" };

/**
 * Splits a bucket's rate among its streams (max-min fair by demand, {@link splitQuota}) and
 * turns each share into the assignment Envoy enforces: a whole-second token bucket
 * ({@link tokenBucketFor}), DENY_ALL for a rate of 0, ALLOW_ALL for a bucket without a limit
 * or in shadow mode.
 *
 * @param demands - each stream's smoothed demand in requests per second (undefined until
 *   measured), in the order the ledger returns them
 */
export function splitBucket(
  policy: BucketPolicy,
  demands: readonly (number | undefined)[],
): BucketSplit {
  if (policy.kind === "allow_all") {
    const assignments = demands.map(() => allowAll);
    return {
      shares: demands.map(() => 0),
      assignments,
      enforced: assignments,
      assignedPerSecond: 0,
    };
  }
  const shares = splitQuota(
    policy.ratePerSecond,
    demands.map((demand) => ({ demand })),
  );
  const shapes: TokenBucketShape[] = shares.map((share) =>
    tokenBucketFor(share),
  );
  let assigned = 0;
  if (policy.ratePerSecond > 0)
    for (const shape of shapes) assigned += shapeRate(shape);
  const enforced: Assignment[] = shapes.map((shape) =>
    policy.ratePerSecond <= 0 ? denyAll : { kind: "token_bucket", shape },
  );
  return {
    shares,
    assignments: policy.shadow ? enforced.map(() => allowAll) : enforced,
    enforced,
    assignedPerSecond: assigned,
  };
}
