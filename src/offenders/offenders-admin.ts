// The TopOffenders method of the admin API (`ratelimit.admin.v1.AdminService`,
// docs/operations.md#top-offenders): the tracker's answer as proto messages.

import { create } from "@bufbuild/protobuf";
import { durationFromMs, timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { OffendersAdmin } from "../admin/admin-routes.js";
import {
  OffenderSchema,
  RuleOffendersSchema,
  TopOffendersResponseSchema,
  type TopOffendersResponse,
} from "../proto.js";
import type { OffendersTracker, RuleTop } from "./offenders-tracker.js";

/**
 * Converts the tracker's answer to a `TopOffendersResponse`: one `RuleOffenders` per rule with
 * traffic, rules sorted by stats key, offenders heaviest first.
 */
export function toTopOffendersResponse(
  rules: readonly RuleTop[],
  countersPerWindow: number,
): TopOffendersResponse {
  return create(TopOffendersResponseSchema, {
    rules: rules.map((rule) =>
      create(RuleOffendersSchema, {
        rule: rule.rule,
        domain: rule.domain,
        since: timestampFromMs(rule.sinceSeconds * 1000),
        hits: BigInt(rule.totalHits),
        window: durationFromMs(rule.windowSeconds * 1000),
        counters: countersPerWindow,
        offenders: rule.offenders.map((offender) =>
          create(OffenderSchema, {
            descriptor: offender.descriptor,
            hits: BigInt(offender.hits),
            overLimit: BigInt(offender.overLimit),
            error: BigInt(offender.error),
          }),
        ),
      }),
    ),
  });
}

/**
 * The top-offenders part of the admin API over a tracker: `TopOffenders {domain, k}` answers
 * the rules of `domain` ("" for every domain) with up to `k` offenders each (0, or more than
 * the tracker keeps, gives `TOP_OFFENDERS_K`). Never throws: an unknown domain answers no
 * rules. The process answers for its own traffic only.
 */
export function createOffendersAdmin(
  tracker: OffendersTracker,
): OffendersAdmin {
  return {
    topOffenders(request) {
      return toTopOffendersResponse(
        tracker.top(request.domain, request.k),
        tracker.countersPerWindow,
      );
    },
  };
}
