// Merging the canary reports of several processes that each evaluated a share of the traffic
// against the same candidate (the workers of WORKERS > 1).

import { create } from "@bufbuild/protobuf";
import {
  earlier,
  groupByRule,
  mergeOffenderLists,
} from "../offenders/merge-offenders.js";
import {
  CanaryRuleReportSchema,
  GetCanaryReportResponseSchema,
  type GetCanaryReportResponse,
} from "../proto.js";

/**
 * Merges canary reports: the counts add up (`requests`, `changedRequests`,
 * `unevaluatedRequests`, and per rule `wouldRefuse` and `wouldAdmit`), `active` when any is,
 * `startTime` the earliest, `source` the first non-empty; each rule's top values merge as
 * {@link mergeOffenderLists} says (their bound adds up). Rules ordered as one process orders
 * them: most changed requests first, then by stats key.
 *
 * @param topValues - top values kept per rule (the canary's, 10)
 */
export function mergeCanaryReports(
  reports: readonly GetCanaryReportResponse[],
  topValues = 10,
): GetCanaryReportResponse {
  let active = false;
  let startTime: GetCanaryReportResponse["startTime"];
  let source = "";
  let requests = 0n;
  let changedRequests = 0n;
  let unevaluatedRequests = 0n;
  for (const report of reports) {
    active ||= report.active;
    startTime = earlier(startTime, report.startTime);
    if (source === "") source = report.source;
    requests += report.requests;
    changedRequests += report.changedRequests;
    unevaluatedRequests += report.unevaluatedRequests;
  }
  const rules = groupByRule(reports.flatMap((r) => r.rules)).map((parts) => {
    const first = parts[0];
    let wouldRefuse = 0n;
    let wouldAdmit = 0n;
    for (const part of parts) {
      wouldRefuse += part.wouldRefuse;
      wouldAdmit += part.wouldAdmit;
    }
    return create(CanaryRuleReportSchema, {
      rule: first.rule,
      domain: first.domain,
      wouldRefuse,
      wouldAdmit,
      top: mergeOffenderLists(
        parts.map((p) => p.top),
        topValues,
      ),
    });
  });
  rules.sort((a, b) => {
    const changed =
      b.wouldRefuse + b.wouldAdmit - (a.wouldRefuse + a.wouldAdmit);
    if (changed !== 0n) return changed > 0n ? 1 : -1;
    return a.rule < b.rule ? -1 : a.rule > b.rule ? 1 : 0;
  });
  return create(GetCanaryReportResponseSchema, {
    active,
    ...(startTime !== undefined ? { startTime } : {}),
    requests,
    changedRequests,
    unevaluatedRequests,
    source,
    rules,
  });
}
