import { describe, expect, it } from "vitest";
import { builtInPullMapping } from "../../../src/stats/prometheus-builtin-mapping.js";
import {
  createPullMapper,
  escapeMetricName,
} from "../../../src/stats/prometheus-mapper.js";
import { parsePullMapping } from "../../../src/stats/prometheus-mapping-parser.js";
import {
  PullMappingError,
  type StatKind,
} from "../../../src/stats/prometheus-mapping.js";

describe("builtInPullMapping", () => {
  const map = createPullMapper(builtInPullMapping(false));
  const cases: [string, StatKind, string, Record<string, string>, string][] = [
    [
      "ratelimit.service.rate_limit.d.k_v.near_limit",
      "counter",
      "ratelimit_service_rate_limit_near_limit",
      { domain: "d", key1: "k_v" },
      "counter",
    ],
    [
      "ratelimit.service.rate_limit.d.k.total_hits",
      "counter",
      "ratelimit_service_rate_limit_total_hits",
      { domain: "d", key1: "k" },
      "counter",
    ],
    [
      "ratelimit.service.rate_limit.d.k.shadow_mode",
      "counter",
      "ratelimit_service_rate_limit_shadow_mode",
      { domain: "d", key1: "k" },
      "counter",
    ],
    [
      "ratelimit.service.rate_limit.d.a.b.over_limit",
      "counter",
      "ratelimit_service_rate_limit_over_limit",
      { domain: "d", key1: "a", key2: "b" },
      "counter",
    ],
    [
      "ratelimit.service.rate_limit.d.a.b.c.within_limit",
      "counter",
      "ratelimit_service_rate_limit_within_limit",
      { domain: "d", key1: "a", key2: "b" },
      "counter",
    ],
    [
      "ratelimit.service.call.should_rate_limit.kv_error",
      "counter",
      "ratelimit_service_should_rate_limit_error",
      { err_type: "kv_error" },
      "counter",
    ],
    [
      "ratelimit_server.ShouldRateLimit.total_requests",
      "counter",
      "ratelimit_service_total_requests",
      { grpc_method: "ShouldRateLimit" },
      "counter",
    ],
    [
      "ratelimit_server.ShouldRateLimit.response_time",
      "observer",
      "ratelimit_service_response_time_seconds",
      { grpc_method: "ShouldRateLimit" },
      "histogram",
    ],
    [
      "ratelimit.service.config_load_success",
      "counter",
      "ratelimit_service_config_load_success",
      {},
      "counter",
    ],
    [
      "ratelimit.service.config_load_error",
      "counter",
      "ratelimit_service_config_load_error",
      {},
      "counter",
    ],
    // Unmapped: the statsd name escaped.
    [
      "ratelimit.service.rate_limit.d.domain_not_found",
      "counter",
      "ratelimit_service_rate_limit_d_domain_not_found",
      {},
      "counter",
    ],
    [
      "ratelimit.localcache.hitCount",
      "gauge",
      "ratelimit_localcache_hitCount",
      {},
      "gauge",
    ],
  ];
  it.each(cases)("maps %s (%s)", (stat, kind, name, labels, type) => {
    const mapped = map(stat, kind);
    expect(mapped?.name).toBe(name);
    expect(mapped?.labels).toEqual(labels);
    expect(mapped?.type).toBe(type);
  });

  it("scales response_time to seconds unless asked to keep milliseconds", () => {
    const stat = "ratelimit_server.ShouldRateLimit.response_time";
    expect(map(stat, "observer")?.scale).toBe(0.001);
    expect(
      createPullMapper(builtInPullMapping(true))(stat, "observer")?.scale,
    ).toBe(1);
  });

  it("turns serialized tags into labels", () => {
    expect(
      map("ratelimit.service.rate_limit.d.k.total_hits.__env=prod", "counter")
        ?.labels,
    ).toEqual({ env: "prod", domain: "d", key1: "k" });
  });
});

describe("parsePullMapping", () => {
  const file = `
defaults:
  observer_type: histogram
  buckets: [1, 5, 10]
mappings:
  - match: "app.*.requests"
    name: "app_requests"
    labels:
      route: "$1"
  - match: "app.drop.*"
    action: drop
  - match: 'app\\.([a-z]+)_(\\w+)\\.latency'
    match_type: regex
    name: "app_\${1}_latency"
    labels:
      kind: "$2"
    observer_type: summary
    quantiles: [{quantile: 0.9, error: 0.01}]
  - match: "app.*.hits"
    match_metric_type: gauge
    name: "app_hit_gauge"
`;
  it("maps by glob, regex, action and metric type", () => {
    const mapping = parsePullMapping(file, "m.yaml");
    expect(mapping.rules.map((r) => r.line)).toEqual([6, 10, 12, 19]);
    const map = createPullMapper(mapping);
    expect(map("app.home.requests", "counter")).toMatchObject({
      name: "app_requests",
      labels: { route: "home" },
    });
    expect(map("app.drop.x", "counter")).toBeUndefined();
    expect(map("app.db_read.latency", "observer")).toMatchObject({
      name: "app_db_latency",
      labels: { kind: "read" },
      type: "summary",
      quantiles: [{ quantile: 0.9, error: 0.01 }],
    });
    expect(map("app.home.hits", "gauge")?.name).toBe("app_hit_gauge");
    expect(map("app.home.hits", "counter")?.name).toBe("app_home_hits");
    expect(map("other.timer", "observer")).toMatchObject({
      type: "histogram",
      buckets: [1, 5, 10],
    });
  });

  const bad: [string, string, RegExp][] = [
    [
      "unknown key",
      "mappings:\n  - match: a.b\n    name: x\n    nmae: y\n",
      /line 4: mappings\[0\]: unknown key "nmae"/,
    ],
    [
      "missing name",
      "mappings:\n  - match: a.b\n",
      /line 2: mappings\[0\]: name is required/,
    ],
    [
      "bad metric name",
      "mappings:\n  - match: a.b\n    name: 9x\n",
      /line 3: .*invalid metric name/,
    ],
    [
      "bad regex",
      "mappings:\n  - match: 'a(('\n    match_type: regex\n    name: x\n",
      /line 2: .*invalid regular expression/,
    ],
    [
      "bad observer",
      "mappings:\n  - match: a.b\n    name: x\n    observer_type: gauge\n",
      /line 4: .*expected one of histogram, summary/,
    ],
    ["bad yaml", "mappings:\n  - match: [a\n", /line \d+: invalid YAML/],
    [
      "bad label",
      "mappings:\n  - match: a.*\n    name: x\n    labels:\n      9bad: $1\n",
      /line 5: .*invalid label name/,
    ],
    [
      "unsorted buckets",
      "defaults:\n  buckets: [3, 1]\n",
      /line 2: .*increasing order/,
    ],
  ];
  it.each(bad)(
    "rejects a file with %s, naming the line",
    (_what, text, message) => {
      let error: unknown;
      try {
        parsePullMapping(text, "bad.yaml");
      } catch (err) {
        error = err;
      }
      expect(error).toBeInstanceOf(PullMappingError);
      expect((error as Error).message).toMatch(/^bad\.yaml: /);
      expect((error as Error).message).toMatch(message);
    },
  );

  it("accepts an empty file", () => {
    expect(parsePullMapping("", "e.yaml").rules).toEqual([]);
  });
});

describe("escapeMetricName", () => {
  it("follows statsd_exporter's escaping", () => {
    expect(escapeMetricName("a.b-c:d")).toBe("a_b_c_d");
    expect(escapeMetricName("1abc")).toBe("_1abc");
    expect(escapeMetricName("a--b")).toBe("a_b");
  });
});
