// The pull-stats mapping model (statsd_exporter's mapping format): rules, the checked mapping,
// what a statistic becomes, and the mapping error. Read by prometheus-mapping-parser.ts, built
// by prometheus-builtin-mapping.ts, applied by prometheus-mapper.ts.

/** Kind of a statistic as the mapping sees it (statsd_exporter's metric types). */
export type StatKind = "counter" | "gauge" | "observer";

/** How a timer is exported. */
export type ObserverType = "histogram" | "summary";

/** One summary objective: a quantile and its allowed error. */
export interface Quantile {
  /** 0 < quantile < 1. */
  readonly quantile: number;
  /** Allowed absolute error of the quantile. */
  readonly error: number;
}

/** One rule of a pull mapping (statsd_exporter mapping format). */
export interface MappingRule {
  /** Glob (`*` = any text without a dot; each `*` is a capture) or regular expression. */
  readonly match: string;
  readonly matchType: "glob" | "regex";
  /** Only statistics of this kind match; undefined = any. */
  readonly matchMetricType: StatKind | undefined;
  /** `map` exports, `drop` discards. */
  readonly action: "map" | "drop";
  /** Exported name template: `$N` / `${N}` = capture N. */
  readonly name: string;
  /** Label name → value template, in the order written. */
  readonly labels: readonly (readonly [string, string])[];
  /** How timers matching this rule are exported. */
  readonly observerType: ObserverType;
  /** Histogram upper bounds, ascending. */
  readonly buckets: readonly number[];
  /** Summary objectives. */
  readonly quantiles: readonly Quantile[];
  /** Summary sliding window in seconds; undefined = cumulative. */
  readonly maxAgeSeconds: number | undefined;
  /** Summary window buckets; undefined = prom-client's default. */
  readonly ageBuckets: number | undefined;
  /** Factor applied to timer durations (milliseconds) before observing. */
  readonly scale: number | undefined;
  /** HELP text; undefined = generated. */
  readonly help: string | undefined;
  /** 1-based line of the rule in its file (0 for built-in rules). */
  readonly line: number;
}

/** A checked pull mapping: rules plus the defaults applied to unmapped timers. */
export interface PullMapping {
  /** Where it came from: a file path or `built-in`. */
  readonly source: string;
  readonly rules: readonly MappingRule[];
  /** Observer settings for timers no rule matches. */
  readonly defaults: Pick<
    MappingRule,
    "observerType" | "buckets" | "quantiles" | "maxAgeSeconds" | "ageBuckets"
  >;
}

/** What a statistic becomes in the pull exporter. */
export interface MappedStat {
  /** Valid Prometheus metric name. */
  readonly name: string;
  readonly type: "counter" | "gauge" | ObserverType;
  /** Labels: the statistic's tags, then the rule's (a rule label wins). */
  readonly labels: Readonly<Record<string, string>>;
  readonly help: string;
  readonly buckets: readonly number[];
  readonly quantiles: readonly Quantile[];
  readonly maxAgeSeconds: number | undefined;
  readonly ageBuckets: number | undefined;
  /** Factor applied to observed durations (1 when none). */
  readonly scale: number;
}

/**
 * A mapping file is invalid. Raised at start-up, so a typo never silently empties the exporter
 * (the reference ignores a bad file); the message names the file and the line. Surfaced as a
 * settings error about `PULLSTATS_MAPPER_YAML`.
 */
export class PullMappingError extends Error {
  override readonly name = "PullMappingError";
  readonly code = "RLS_SETTINGS";
  /** The file (or `built-in`). */
  readonly source: string;
  /** 1-based line of the problem; 0 when unknown. */
  readonly line: number;
  /** The problem, without file and line. */
  readonly problem: string;
  constructor(
    source: string,
    line: number,
    problem: string,
    options?: ErrorOptions,
  ) {
    super(
      line > 0
        ? `${source}: line ${line}: ${problem}`
        : `${source}: ${problem}`,
      options,
    );
    this.source = source;
    this.line = line;
    this.problem = problem;
  }
}

/** statsd_exporter's (and Prometheus') default histogram buckets, in seconds. */
export const defaultBuckets: readonly number[] = [
  0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
];

/** statsd_exporter's default summary objectives. */
export const defaultQuantiles: readonly Quantile[] = [
  { quantile: 0.5, error: 0.05 },
  { quantile: 0.9, error: 0.01 },
  { quantile: 0.99, error: 0.001 },
];

/** statsd_exporter's defaults: timers become summaries with the default objectives. */
export const defaultObserverSettings: PullMapping["defaults"] = {
  observerType: "summary",
  buckets: defaultBuckets,
  quantiles: defaultQuantiles,
  maxAgeSeconds: undefined,
  ageBuckets: undefined,
};
