import { splitTags } from "./names.js";
import type {
  MappedStat,
  MappingRule,
  PullMapping,
  StatKind,
} from "./prometheus-mapping.js";

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
