import {
  isMap,
  isScalar,
  isSeq,
  LineCounter,
  parseDocument,
  type Node as YamlNode,
} from "yaml";
import { parseGoDuration } from "../util/go-duration.js";
import {
  defaultObserverSettings,
  PullMappingError,
  type MappingRule,
  type ObserverType,
  type PullMapping,
  type Quantile,
  type StatKind,
} from "./prometheus-mapping.js";

const metricNameTemplate =
  /^(?:[a-zA-Z_]|\$\{?\d+\}?)(?:[a-zA-Z0-9_]|\$\{?\d+\}?)*$/;
const labelName = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

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

/**
 * Go duration (`90s`, `10m`, `1h30m`) in seconds; undefined when malformed. statsd_exporter
 * decodes `max_age` into a Go `time.Duration`, so the syntax is Go's `time.ParseDuration`.
 */
function goDurationSeconds(text: string): number | undefined {
  const nanoseconds = parseGoDuration(text);
  return nanoseconds === undefined ? undefined : Number(nanoseconds) / 1e9;
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
  if (doc.contents === null)
    return { source, rules: [], defaults: defaultObserverSettings };
  const top = r.entries(doc.contents, "mapping file", topKeys);

  let defaults: PullMapping["defaults"] = defaultObserverSettings;
  let defaultMatchType: "glob" | "regex" = "glob";
  const defaultsField = top.get("defaults");
  if (defaultsField !== undefined && defaultsField.value !== null) {
    const d = r.entries(defaultsField.value, "defaults", defaultsKeys);
    const o = readObserverOptions(r, d, "defaults");
    defaults = {
      observerType: o.observerType ?? defaultObserverSettings.observerType,
      buckets: o.buckets ?? defaultObserverSettings.buckets,
      quantiles: o.quantiles ?? defaultObserverSettings.quantiles,
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
