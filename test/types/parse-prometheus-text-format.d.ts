// Types for parse-prometheus-text-format 1.x (the package ships none). Values stay strings, as
// the parser returns them (prom2json-compatible output).
// `declare module` is the only way to type an untyped package.
// eslint-disable-next-line no-restricted-syntax
declare module "parse-prometheus-text-format" {
  /** One sample of a counter, gauge or untyped metric. */
  export interface PrometheusSample {
    readonly value: string;
    readonly labels?: Readonly<Record<string, string>>;
  }
  /** One histogram series: bucket upper bound → cumulative count. */
  export interface PrometheusHistogramSample {
    readonly buckets: Readonly<Record<string, string>>;
    readonly count: string;
    readonly sum: string;
    readonly labels?: Readonly<Record<string, string>>;
  }
  /** One summary series: quantile → value. */
  export interface PrometheusSummarySample {
    readonly quantiles?: Readonly<Record<string, string>>;
    readonly count: string;
    readonly sum: string;
    readonly labels?: Readonly<Record<string, string>>;
  }
  /** One metric family. */
  export interface PrometheusMetricFamily {
    readonly name: string;
    readonly help: string;
    readonly type: "COUNTER" | "GAUGE" | "HISTOGRAM" | "SUMMARY" | "UNTYPED";
    readonly metrics: readonly (
      PrometheusSample | PrometheusHistogramSample | PrometheusSummarySample
    )[];
  }
  /** Parses the Prometheus text exposition format. */
  export default function parsePrometheusTextFormat(
    text: string,
  ): PrometheusMetricFamily[];
}
