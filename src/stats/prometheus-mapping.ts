import {
  isMap,
  isScalar,
  isSeq,
  LineCounter,
  parseDocument,
  type Node as YamlNode,
} from "yaml";
import { pullStatNames, splitTags, statNames } from "./names.js";

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

const metricNameTemplate =
  /^(?:[a-zA-Z_]|\$\{?\d+\}?)(?:[a-zA-Z0-9_]|\$\{?\d+\}?)*$/;
const labelName = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

/**
 * Returns `name` as a valid Prometheus name: every character but `a-z A-Z 0-9 _` becomes `_`
 * (a run of `-` after the first keeps one `_`), and a leading digit gets a `_` prefix. Same rule
 * as statsd_exporter `pkg/mapper/escape.go`, which the reference uses for unmapped statistics.
 */
export function escapeMetricName(name: string): string {
  let out = /^[0-9]/.test(name) ? "_" : "";
  let previous = "";
  for (const char of name) {
    if (/[a-zA-Z0-9_]/.test(char)) out += char;
    else if (!(char === "-" && previous === "-")) out += "_";
    previous = char;
  }
  return out;
}

// --- parsing -----------------------------------------------------------------------------------

/** statsd_exporter's defaults: timers become summaries with the default objectives. */
const fallback: PullMapping["defaults"] = {
  observerType: "summary",
  buckets: defaultBuckets,
  quantiles: defaultQuantiles,
  maxAgeSeconds: undefined,
  ageBuckets: undefined,
};

const topKeys = new Set(["defaults", "mappings"]);
const defaultsKeys = new Set([
  "observer_type",
  "timer_type",
  "match_type",
  "glob_disable_ordering",
  "buckets",
  "quantiles",
  "histogram_options",
  "summary_options",
  "ttl",
]);
const ruleKeys = new Set([
  "match",
  "name",
  "labels",
  "help",
  "match_type",
  "match_metric_type",
  "action",
  "observer_type",
  "timer_type",
  "buckets",
  "quantiles",
  "histogram_options",
  "summary_options",
  "scale",
  "ttl",
  "honor_labels",
]);
const histogramOptionKeys = new Set([
  "buckets",
  "native_histogram_bucket_factor",
  "native_histogram_max_buckets",
]);
const summaryOptionKeys = new Set([
  "quantiles",
  "max_age",
  "age_buckets",
  "buf_cap",
]);

/** Reads one YAML mapping node into plain values, keeping each key's line. */
class Reader {
  readonly source: string;
  private readonly lines: LineCounter;
  constructor(source: string, lines: LineCounter) {
    this.source = source;
    this.lines = lines;
  }
  lineOf(node: YamlNode | null | undefined): number {
    const offset = node?.range?.[0];
    if (offset === undefined) return 0;
    return Math.max(1, this.lines.linePos(offset).line);
  }
  fail(node: YamlNode | null | undefined, problem: string): never {
    throw new PullMappingError(this.source, this.lineOf(node), problem);
  }
  /** The entries of a YAML map, checking keys against `allowed`. */
  entries(
    node: unknown,
    what: string,
    allowed: ReadonlySet<string> | undefined,
  ): Map<string, { key: YamlNode; value: YamlNode | null }> {
    if (!isMap(node)) this.fail(node as YamlNode, `${what} must be a mapping`);
    const out = new Map<string, { key: YamlNode; value: YamlNode | null }>();
    for (const pair of node.items) {
      const key = pair.key as YamlNode;
      if (!isScalar(key) || typeof key.value !== "string")
        this.fail(key, `${what}: keys must be strings`);
      const name = key.value;
      if (allowed !== undefined && !allowed.has(name)) {
        this.fail(
          key,
          `${what}: unknown key "${name}" (expected one of ${[...allowed].join(", ")})`,
        );
      }
      if (out.has(name)) this.fail(key, `${what}: duplicate key "${name}"`);
      out.set(name, { key, value: pair.value as YamlNode | null });
    }
    return out;
  }
  string(node: YamlNode | null, what: string): string {
    if (!isScalar(node) || typeof node.value !== "string")
      this.fail(node, `${what} must be a string`);
    return node.value;
  }
  number(node: YamlNode | null, what: string): number {
    if (
      !isScalar(node) ||
      typeof node.value !== "number" ||
      !isFinite(node.value)
    )
      this.fail(node, `${what} must be a number`);
    return node.value;
  }
  boolean(node: YamlNode | null, what: string): boolean {
    if (!isScalar(node) || typeof node.value !== "boolean")
      this.fail(node, `${what} must be true or false`);
    return node.value;
  }
  oneOf<T extends string>(
    node: YamlNode | null,
    what: string,
    values: readonly T[],
  ): T {
    const text = this.string(node, what);
    if (!(values as readonly string[]).includes(text))
      this.fail(
        node,
        `${what} "${text}": expected one of ${values.join(", ")}`,
      );
    return text as T;
  }
  buckets(node: YamlNode | null, what: string): number[] {
    if (!isSeq(node)) this.fail(node, `${what} must be a list of numbers`);
    const out = node.items.map((item) =>
      this.number(item as YamlNode, `${what} entries`),
    );
    if (out.length === 0) this.fail(node, `${what} must not be empty`);
    for (let i = 1; i < out.length; i++) {
      if (!((out[i] ?? 0) > (out[i - 1] ?? 0)))
        this.fail(node, `${what} must be in increasing order`);
    }
    return out;
  }
  quantiles(node: YamlNode | null, what: string): Quantile[] {
    if (!isSeq(node))
      this.fail(node, `${what} must be a list of {quantile, error}`);
    const out = node.items.map((item) => {
      const fields = this.entries(
        item,
        `${what} entries`,
        new Set(["quantile", "error"]),
      );
      const q = fields.get("quantile");
      if (q === undefined)
        this.fail(item as YamlNode, `${what} entries need a quantile`);
      const quantile = this.number(q.value, "quantile");
      if (!(quantile > 0 && quantile < 1))
        this.fail(q.value, `quantile ${quantile}: expected 0 < quantile < 1`);
      const e = fields.get("error");
      const error = e === undefined ? 0.01 : this.number(e.value, "error");
      return { quantile, error };
    });
    if (out.length === 0) this.fail(node, `${what} must not be empty`);
    return out;
  }
}

/** Go duration (`90s`, `10m`, `1h30m`) in seconds; undefined when malformed. */
function goDurationSeconds(text: string): number | undefined {
  const part = /(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/y;
  const unitSeconds: Record<string, number> = {
    ns: 1e-9,
    us: 1e-6,
    µs: 1e-6,
    ms: 1e-3,
    s: 1,
    m: 60,
    h: 3600,
  };
  let total = 0;
  let at = 0;
  if (text === "0") return 0;
  while (at < text.length) {
    part.lastIndex = at;
    const m = part.exec(text);
    if (m === null) return undefined;
    total += Number(m[1]) * (unitSeconds[m[2] ?? ""] ?? 0);
    at = part.lastIndex;
  }
  return at > 0 ? total : undefined;
}

interface ObserverOptions {
  observerType: ObserverType | undefined;
  buckets: number[] | undefined;
  quantiles: Quantile[] | undefined;
  maxAgeSeconds: number | undefined;
  ageBuckets: number | undefined;
}

/** Reads the observer keys shared by `defaults` and rules; checks the combinations. */
function readObserverOptions(
  r: Reader,
  fields: Map<string, { key: YamlNode; value: YamlNode | null }>,
  what: string,
): ObserverOptions {
  const types = ["histogram", "summary"] as const;
  let observerType: ObserverType | undefined;
  for (const key of ["observer_type", "timer_type"]) {
    const field = fields.get(key);
    if (field === undefined) continue;
    // statsd_exporter also accepts "" and "default" for "use the default".
    const text = r.string(field.value, `${what}: ${key}`);
    if (text === "" || text === "default") continue;
    if (observerType !== undefined)
      r.fail(
        field.key,
        `${what}: set only one of observer_type and timer_type`,
      );
    observerType = r.oneOf(field.value, `${what}: ${key}`, types);
  }
  let buckets: number[] | undefined;
  let quantiles: Quantile[] | undefined;
  let maxAgeSeconds: number | undefined;
  let ageBuckets: number | undefined;
  const legacyBuckets = fields.get("buckets");
  const legacyQuantiles = fields.get("quantiles");
  const histogram = fields.get("histogram_options");
  const summary = fields.get("summary_options");
  if (legacyBuckets !== undefined)
    buckets = r.buckets(legacyBuckets.value, `${what}: buckets`);
  if (legacyQuantiles !== undefined)
    quantiles = r.quantiles(legacyQuantiles.value, `${what}: quantiles`);
  if (histogram !== undefined) {
    const h = r.entries(
      histogram.value,
      `${what}: histogram_options`,
      histogramOptionKeys,
    );
    const b = h.get("buckets");
    if (b !== undefined) {
      if (buckets !== undefined)
        r.fail(
          b.key,
          `${what}: buckets set both at top level and in histogram_options`,
        );
      buckets = r.buckets(b.value, `${what}: histogram_options.buckets`);
    }
  }
  if (summary !== undefined) {
    const s = r.entries(
      summary.value,
      `${what}: summary_options`,
      summaryOptionKeys,
    );
    const q = s.get("quantiles");
    if (q !== undefined) {
      if (quantiles !== undefined)
        r.fail(
          q.key,
          `${what}: quantiles set both at top level and in summary_options`,
        );
      quantiles = r.quantiles(q.value, `${what}: summary_options.quantiles`);
    }
    const age = s.get("max_age");
    if (age !== undefined) {
      const text = r.string(age.value, `${what}: summary_options.max_age`);
      maxAgeSeconds = goDurationSeconds(text);
      if (maxAgeSeconds === undefined || maxAgeSeconds <= 0)
        r.fail(
          age.value,
          `${what}: summary_options.max_age "${text}": expected a duration such as 10m`,
        );
    }
    const ageBucketsField = s.get("age_buckets");
    if (ageBucketsField !== undefined) {
      ageBuckets = r.number(
        ageBucketsField.value,
        `${what}: summary_options.age_buckets`,
      );
      if (!Number.isInteger(ageBuckets) || ageBuckets < 1)
        r.fail(
          ageBucketsField.value,
          `${what}: summary_options.age_buckets must be a positive integer`,
        );
    }
  }
  if (observerType === "histogram" && summary !== undefined)
    r.fail(
      summary.key,
      `${what}: summary_options with observer_type histogram`,
    );
  if (observerType === "summary" && histogram !== undefined)
    r.fail(
      histogram.key,
      `${what}: histogram_options with observer_type summary`,
    );
  return { observerType, buckets, quantiles, maxAgeSeconds, ageBuckets };
}

/** Checks a glob: dot-separated non-empty parts, no spaces. */
function checkGlob(r: Reader, node: YamlNode | null, match: string): void {
  if (match.split(".").some((part) => part === "" || /\s/.test(part)))
    r.fail(
      node,
      `invalid glob match "${match}": expected dot-separated parts, * for any part`,
    );
}

/**
 * Parses a mapping file in the statsd_exporter format (the format of upstream
 * `src/stats/prom/default_mapper.yaml`): `mappings` with `match` (glob by default, or
 * `match_type: regex`), `name`, `labels` (values may use `$1`…), `match_metric_type`,
 * `action: drop`, `observer_type`/`timer_type` (`histogram` or `summary`), `buckets`,
 * `quantiles`, `histogram_options`, `summary_options` and `scale`; `defaults` for the
 * observer settings. `ttl`, `honor_labels`, `help`-less rules, `glob_disable_ordering` and the
 * native-histogram options are accepted; `ttl`, `honor_labels`, ordering and native histograms
 * have no effect.
 *
 * @param source - the file name, used in messages
 * @throws {@link PullMappingError} naming the file and line for malformed YAML, an unknown key,
 * a missing `match` or `name`, an invalid metric or label name, a bad glob or regular
 * expression, or conflicting options
 */
export function parsePullMapping(text: string, source: string): PullMapping {
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, uniqueKeys: false });
  const first = doc.errors[0];
  if (first !== undefined) {
    const line = first.linePos?.[0].line ?? 0;
    throw new PullMappingError(
      source,
      line,
      `invalid YAML: ${first.message.split("\n")[0] ?? ""}`,
      { cause: first },
    );
  }
  const r: Reader = new Reader(source, lines);
  if (doc.contents === null) return { source, rules: [], defaults: fallback };
  const top = r.entries(doc.contents, "mapping file", topKeys);

  let defaults: PullMapping["defaults"] = fallback;
  let defaultMatchType: "glob" | "regex" = "glob";
  const defaultsField = top.get("defaults");
  if (defaultsField !== undefined && defaultsField.value !== null) {
    const d = r.entries(defaultsField.value, "defaults", defaultsKeys);
    const o = readObserverOptions(r, d, "defaults");
    defaults = {
      observerType: o.observerType ?? fallback.observerType,
      buckets: o.buckets ?? fallback.buckets,
      quantiles: o.quantiles ?? fallback.quantiles,
      maxAgeSeconds: o.maxAgeSeconds,
      ageBuckets: o.ageBuckets,
    };
    const mt = d.get("match_type");
    if (mt !== undefined)
      defaultMatchType = r.oneOf(mt.value, "defaults: match_type", [
        "glob",
        "regex",
      ]);
    const ordering = d.get("glob_disable_ordering");
    if (ordering !== undefined)
      r.boolean(ordering.value, "defaults: glob_disable_ordering");
  }

  const rules: MappingRule[] = [];
  const mappingsField = top.get("mappings");
  if (mappingsField !== undefined && mappingsField.value !== null) {
    const seq = mappingsField.value;
    if (!isSeq(seq)) r.fail(seq, "mappings must be a list");
    seq.items.forEach((item, index) => {
      const node = item as YamlNode;
      const what = `mappings[${index}]`;
      const f = r.entries(node, what, ruleKeys);
      const matchField = f.get("match");
      if (matchField === undefined) r.fail(node, `${what}: match is required`);
      const match = r.string(matchField.value, `${what}: match`);
      const mt = f.get("match_type");
      const matchType =
        mt === undefined
          ? defaultMatchType
          : r.oneOf(mt.value, `${what}: match_type`, ["glob", "regex"]);
      if (matchType === "glob") {
        checkGlob(r, matchField.value, match);
      } else {
        try {
          new RegExp(match);
        } catch (err) {
          r.fail(
            matchField.value,
            `${what}: invalid regular expression "${match}": ${err instanceof Error ? err.message : String(err)}`,
          );
        }
      }
      const mmt = f.get("match_metric_type");
      let matchMetricType: StatKind | undefined;
      if (mmt !== undefined) {
        const kind = r.oneOf(mmt.value, `${what}: match_metric_type`, [
          "counter",
          "gauge",
          "observer",
          "timer",
          "histogram",
          "distribution",
        ]);
        matchMetricType =
          kind === "counter" || kind === "gauge" ? kind : "observer";
      }
      const actionField = f.get("action");
      const action =
        actionField === undefined
          ? "map"
          : r.oneOf(actionField.value, `${what}: action`, ["map", "drop"]);
      const nameField = f.get("name");
      let name = "";
      if (nameField !== undefined)
        name = r.string(nameField.value, `${what}: name`);
      if (action === "map") {
        if (name === "")
          r.fail(nameField?.value ?? node, `${what}: name is required`);
        if (!metricNameTemplate.test(name))
          r.fail(
            nameField?.value,
            `${what}: invalid metric name "${name}" (letters, digits, _ and $N captures; not starting with a digit)`,
          );
      }
      const labels: [string, string][] = [];
      const labelsField = f.get("labels");
      if (labelsField !== undefined && labelsField.value !== null) {
        for (const [label, entry] of r.entries(
          labelsField.value,
          `${what}: labels`,
          undefined,
        )) {
          if (!labelName.test(label) || label.startsWith("__"))
            r.fail(entry.key, `${what}: invalid label name "${label}"`);
          const value = entry.value;
          labels.push([
            label,
            isScalar(value) && typeof value.value === "number"
              ? String(value.value)
              : r.string(value, `${what}: labels.${label}`),
          ]);
        }
      }
      const o = readObserverOptions(r, f, what);
      const scaleField = f.get("scale");
      const scale =
        scaleField === undefined
          ? undefined
          : r.number(scaleField.value, `${what}: scale`);
      const helpField = f.get("help");
      const observerType = o.observerType ?? defaults.observerType;
      rules.push({
        match,
        matchType,
        matchMetricType,
        action,
        name,
        labels,
        observerType,
        buckets: o.buckets ?? defaults.buckets,
        quantiles: o.quantiles ?? defaults.quantiles,
        maxAgeSeconds: o.maxAgeSeconds ?? defaults.maxAgeSeconds,
        ageBuckets: o.ageBuckets ?? defaults.ageBuckets,
        scale,
        help:
          helpField === undefined
            ? undefined
            : r.string(helpField.value, `${what}: help`),
        line: r.lineOf(node),
      });
      const honor = f.get("honor_labels");
      if (honor !== undefined) r.boolean(honor.value, `${what}: honor_labels`);
    });
  }
  return { source, rules, defaults };
}

// --- built-in mapping --------------------------------------------------------------------------

/**
 * The built-in mapping: the rules of upstream `src/stats/prom/default_mapper.yaml`
 * (behavior.md §10.4), numbered as there. `responseTimeAsMilliseconds`
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
    defaults: fallback,
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

// --- matching ----------------------------------------------------------------------------------

/**
 * Returns, for each exported name written without captures, every label name the rules give
 * it. Rules may export one name with different label sets (the built-in mapping gives
 * `ratelimit_service_rate_limit_total_hits` `domain`, `key1` and sometimes `key2`); the metric
 * is declared with all of them and each series carries those it has, as statsd_exporter's
 * output does.
 */
export function labelNamesByMetric(
  mapping: PullMapping,
): ReadonlyMap<string, ReadonlySet<string>> {
  const out = new Map<string, Set<string>>();
  for (const rule of mapping.rules) {
    if (rule.action === "drop" || rule.name.includes("$")) continue;
    const name = escapeMetricName(rule.name);
    let labels = out.get(name);
    if (labels === undefined) {
      labels = new Set();
      out.set(name, labels);
    }
    for (const [label] of rule.labels) labels.add(label);
  }
  return out;
}

/** Maps one statistic; `undefined` means dropped. Results are cached per name and kind. */
export type PullMapper = (
  fullName: string,
  kind: StatKind,
) => MappedStat | undefined;

/**
 * Expands `$N`, `${N}` and (regex rules, Go `regexp.Expand` rules) `$name` / `${name}`;
 * `$$` is a `$`. A missing group expands to "".
 */
function expandTemplate(
  template: string,
  groups: readonly (string | undefined)[],
  named: Readonly<Record<string, string | undefined>> | undefined,
): string {
  return template.replace(
    /\$(?:\$|\{([A-Za-z0-9_]+)\}|([A-Za-z0-9_]+))/g,
    (_whole, braced: string | undefined, bare: string | undefined) => {
      const ref = braced ?? bare;
      if (ref === undefined) return "$";
      if (/^\d+$/.test(ref)) return groups[Number(ref)] ?? "";
      return named?.[ref] ?? "";
    },
  );
}

/** Same as {@link expandTemplate} for glob rules, where only `$N` / `${N}` are captures. */
function expandGlobTemplate(
  template: string,
  groups: readonly (string | undefined)[],
): string {
  return template.replace(
    /\$\{(\d+)\}|\$(\d+)/g,
    (_whole, braced: string | undefined, bare: string | undefined) =>
      groups[Number(braced ?? bare)] ?? "",
  );
}

function globToRegExp(glob: string): RegExp {
  const body = glob
    .split("*")
    .map((part) => part.replace(/[.+?^${}()|[\]\\]/g, "\\$&"))
    .join("([^.]*)");
  return new RegExp(`^${body}$`);
}

/**
 * Compiles a mapping into a {@link PullMapper} with statsd_exporter's order: glob rules first,
 * in file order, then regular expressions (matched anywhere in the name) in file order; a rule
 * with `match_metric_type` applies only to that kind. Tags serialized in the name
 * (`.__k=v`, e.g. `EXTRA_TAGS`) are split off first and become labels; the rule's labels win
 * over a tag of the same name. (The reference matches names with the tags still attached, so
 * with `EXTRA_TAGS` its globs stop matching; splitting them off is a deliberate difference.)
 * Unmatched statistics keep their statsd name escaped ({@link escapeMetricName}) and timers
 * among them use the mapping's defaults.
 */
export function createPullMapper(mapping: PullMapping): PullMapper {
  const compiled = mapping.rules.map((rule) => ({
    rule,
    regex:
      rule.matchType === "glob"
        ? globToRegExp(rule.match)
        : new RegExp(rule.match),
  }));
  const globs = compiled.filter((c) => c.rule.matchType === "glob");
  const regexes = compiled.filter((c) => c.rule.matchType === "regex");
  const cache = new Map<string, MappedStat | undefined>();

  function tagLabels(
    tags: readonly { key: string; value: string }[],
  ): Record<string, string> {
    const labels: Record<string, string> = {};
    for (const tag of tags) {
      const key = escapeMetricName(tag.key);
      if (key !== "" && !key.startsWith("__")) labels[key] = tag.value;
    }
    return labels;
  }

  function fromRule(
    rule: MappingRule,
    kind: StatKind,
    labels: Record<string, string>,
    expand: (template: string) => string,
  ): MappedStat | undefined {
    if (rule.action === "drop") return undefined;
    for (const [label, template] of rule.labels)
      labels[label] = expand(template);
    return {
      name: escapeMetricName(expand(rule.name)),
      type: kind === "observer" ? rule.observerType : kind,
      labels,
      help:
        rule.help ??
        `Statistics matching ${rule.match} (${mapping.source} mapping).`,
      buckets: rule.buckets,
      quantiles: rule.quantiles,
      maxAgeSeconds: rule.maxAgeSeconds,
      ageBuckets: rule.ageBuckets,
      scale: rule.scale ?? 1,
    };
  }

  function map(fullName: string, kind: StatKind): MappedStat | undefined {
    const { name, tags } = splitTags(fullName);
    const labels = tagLabels(tags);
    for (const { rule, regex } of globs) {
      if (rule.matchMetricType !== undefined && rule.matchMetricType !== kind)
        continue;
      const m = regex.exec(name);
      if (m === null) continue;
      return fromRule(rule, kind, labels, (t) => expandGlobTemplate(t, m));
    }
    for (const { rule, regex } of regexes) {
      if (rule.matchMetricType !== undefined && rule.matchMetricType !== kind)
        continue;
      const m = regex.exec(name);
      if (m === null) continue;
      return fromRule(rule, kind, labels, (t) =>
        expandTemplate(t, m, m.groups),
      );
    }
    const d = mapping.defaults;
    return {
      name: escapeMetricName(name),
      type: kind === "observer" ? d.observerType : kind,
      labels,
      help: `Statistic ${name}.`,
      buckets: d.buckets,
      quantiles: d.quantiles,
      maxAgeSeconds: d.maxAgeSeconds,
      ageBuckets: d.ageBuckets,
      scale: 1,
    };
  }

  return (fullName, kind) => {
    const key = `${kind}:${fullName}`;
    if (cache.has(key)) return cache.get(key);
    const mapped = map(fullName, kind);
    cache.set(key, mapped);
    return mapped;
  };
}
