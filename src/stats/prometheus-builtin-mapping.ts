import { pullStatNames, statNames } from "./names.js";
import {
  defaultBuckets,
  defaultObserverSettings,
  defaultQuantiles,
  type MappingRule,
  type PullMapping,
} from "./prometheus-mapping.js";

/**
 * The built-in mapping: the rules of upstream `src/stats/prom/default_mapper.yaml`
 * (docs/reference-parity.md#pull-mapping), numbered as there. `responseTimeAsMilliseconds`
 * (`PULLSTATS_RESPONSE_TIME_AS_MILLISECONDS`) drops the 0.001 scale of rule 13, keeping the
 * `_seconds` name as the reference does.
 */
export function builtInPullMapping(
  responseTimeAsMilliseconds: boolean,
): PullMapping {
  const rule = (
    fields: Pick<MappingRule, "match" | "name" | "labels"> &
      Partial<MappingRule>,
  ): MappingRule => ({
    matchType: "glob",
    matchMetricType: undefined,
    action: "map",
    observerType: "histogram",
    buckets: defaultBuckets,
    quantiles: defaultQuantiles,
    maxAgeSeconds: undefined,
    ageBuckets: undefined,
    scale: undefined,
    help: undefined,
    line: 0,
    ...fields,
  });
  const p = pullStatNames;
  const scope = statNames.rateLimitScope;
  const perRule: readonly (readonly [string, string])[] = [
    [
      statNames.nearLimit,
      "Hits over the near-limit ratio but within the limit, per rule.",
    ],
    [statNames.overLimit, "Hits over the limit, per rule."],
    [statNames.totalHits, "Hits evaluated, per rule."],
    [statNames.withinLimit, "Hits within the limit, per rule."],
    [
      statNames.shadowMode,
      "Over-limit hits let through by shadow mode, per rule.",
    ],
  ];
  const escapedScope = scope.replace(/\./g, "\\.");
  return {
    source: "built-in",
    defaults: defaultObserverSettings,
    rules: [
      // 1–5: two-level keys.
      ...perRule.map(([stat, help]) =>
        rule({
          match: `${scope}.*.*.${stat}`,
          name: p.rateLimitPrefix + stat,
          help,
          labels: [
            [p.domainLabel, "$1"],
            [p.key1Label, "$2"],
          ],
        }),
      ),
      // 6–10: three or more levels; deeper levels collapse into key2.
      ...perRule.map(([stat, help]) =>
        rule({
          help,
          match: `${escapedScope}\\.([^\\.]*)\\.([^\\.]*)\\.([^\\.]*)(\\..*)?\\.${stat}`,
          matchType: "regex",
          name: p.rateLimitPrefix + stat,
          labels: [
            [p.domainLabel, "$1"],
            [p.key1Label, "$2"],
            [p.key2Label, "$3"],
          ],
        }),
      ),
      // 11–15.
      rule({
        match: `${statNames.shouldRateLimitErrorScope}.*`,
        matchMetricType: "counter",
        name: p.shouldRateLimitError,
        help: "Failed ShouldRateLimit calls, by error type.",
        labels: [[p.errTypeLabel, "$1"]],
      }),
      rule({
        match: `${statNames.serverScope}.*.${statNames.totalRequests}`,
        matchMetricType: "counter",
        name: p.totalRequests,
        help: "gRPC calls, by method.",
        labels: [[p.grpcMethodLabel, "$1"]],
      }),
      rule({
        match: `${statNames.serverScope}.*.${statNames.responseTime}`,
        name: p.responseTime,
        help: responseTimeAsMilliseconds
          ? "Duration of gRPC calls in milliseconds (PULLSTATS_RESPONSE_TIME_AS_MILLISECONDS), by method."
          : "Duration of gRPC calls in seconds, by method.",
        labels: [[p.grpcMethodLabel, "$1"]],
        scale: responseTimeAsMilliseconds ? undefined : 0.001,
      }),
      rule({
        match: statNames.configLoadSuccess,
        matchMetricType: "counter",
        name: p.configLoadSuccess,
        help: "Successful rate-limit config loads.",
        labels: [],
      }),
      rule({
        match: statNames.configLoadError,
        matchMetricType: "counter",
        name: p.configLoadError,
        help: "Failed rate-limit config loads.",
        labels: [],
      }),
    ],
  };
}
