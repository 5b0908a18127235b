// Gauges whose series are computed when the pull-stats endpoint is scraped, for values that
// live outside the statistics store (the top offenders per rule, docs/statistics.md): each
// scrape replaces every series, so a series that is no longer produced disappears and the
// count of series stays what the producer bounds it to.

/** One series of a {@link ScrapedGauge}. */
export interface ScrapedSample {
  /** A value for every label name of the gauge. */
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

/** A gauge computed at each scrape of the pull-stats endpoint (`USE_PULLSTATS`). */
export interface ScrapedGauge {
  /** Metric name, e.g. `ratelimit_top_offender_hits`. */
  readonly name: string;
  /** The metric's HELP text. */
  readonly help: string;
  /** Label names of every series. */
  readonly labelNames: readonly string[];
  /** The series at this scrape; must not throw. */
  samples(): Iterable<ScrapedSample>;
}
