// The top offenders on the pull-stats endpoint (`TOP_OFFENDERS_METRICS`, docs/statistics.md):
// two gauges computed at each scrape, at most K series per rule each.

import type { ScrapedGauge, ScrapedSample } from "../stats/scraped-gauge.js";
import type { OffendersTracker } from "./offenders-tracker.js";

/** Names of the top-offender gauges. */
export const offenderMetricNames = Object.freeze({
  hits: "ratelimit_top_offender_hits",
  overLimit: "ratelimit_top_offender_over_limit",
});

/** Label names of both gauges: the rule's domain and stats key, the rank (1 = heaviest), the descriptor. */
export const offenderLabelNames = Object.freeze([
  "domain",
  "rule",
  "rank",
  "descriptor",
] as const);

/**
 * The gauges `ratelimit_top_offender_hits` and `ratelimit_top_offender_over_limit`: per rule
 * with traffic, one series per top offender (at most `TOP_OFFENDERS_K`) labelled
 * `{domain, rule, rank, descriptor}`, valued with its estimated hits (or refused hits) over
 * the rule's current and previous window. Every scrape replaces the series, so as the top
 * changes old descriptors drop out and the series count stays at most K per rule (and the
 * tracker bounds the rules).
 */
export function createOffenderGauges(
  tracker: OffendersTracker,
): ScrapedGauge[] {
  const samples = (value: "hits" | "overLimit"): ScrapedSample[] => {
    const out: ScrapedSample[] = [];
    for (const rule of tracker.top("", tracker.k)) {
      let rank = 0;
      for (const offender of rule.offenders) {
        rank++;
        out.push({
          labels: {
            domain: rule.domain,
            rule: rule.rule,
            rank: String(rank),
            descriptor: offender.descriptor,
          },
          value: offender[value],
        });
      }
    }
    return out;
  };
  return [
    {
      name: offenderMetricNames.hits,
      help: "Estimated hits of a rule's top offender over the rule's current and previous window (at most the admin API's error above the truth).",
      labelNames: offenderLabelNames,
      samples: () => samples("hits"),
    },
    {
      name: offenderMetricNames.overLimit,
      help: "Estimated refused (OVER_LIMIT) hits of a rule's top offender over the rule's current and previous window.",
      labelNames: offenderLabelNames,
      samples: () => samples("overLimit"),
    },
  ];
}
