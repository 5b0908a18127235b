import { splitTags } from "./names.js";

/**
 * One rewrite rule of the tagged push sink (`TAGGED_PUSHSTATS_MOGRIFIERS_<M>_PATTERN`,
 * `_NAME`, `_TAGS`). Same shape as the settings' `TaggedPushStatsMogrifier`.
 */
export interface MogrifierRule {
  /** Name as listed in `TAGGED_PUSHSTATS_MOGRIFIERS` (for messages). */
  readonly name: string;
  /** Regular expression source matched anywhere in the statistic name (tags split off). */
  readonly pattern: string;
  /** Output name; `$N` is capture group N (`$0` the whole match). */
  readonly metricName: string;
  /** Extra tags, tag name → value template (`$N` allowed), in the order written. */
  readonly tags: Readonly<Record<string, string>>;
}

/** A statistic name as the tagged sink sends it. */
export interface TaggedName {
  /** Metric name after the first matching rule (or the name without tags). */
  readonly name: string;
  /** `key:value` tags: those serialized in the name first, then the rule's. */
  readonly tags: readonly string[];
}

/** Turns full statistic names into tagged names; results are cached per name. */
export type Mogrify = (fullName: string) => TaggedName;

/**
 * Replaces `$N` with capture group N; `$N` past the last group stays as written (same as
 * upstream `src/godogstats/mogrifier_map.go`).
 */
function expand(template: string, match: RegExpExecArray): string {
  return template.replace(/\$(\d+)/g, (whole, digits: string) => {
    const group = Number(digits);
    return group < match.length ? (match[group] ?? "") : whole;
  });
}

/**
 * Compiles the rules, in priority order, into a function that splits the serialized tags off a
 * name (`a.b.__k=v` → `a.b` with tag `k:v`), then applies the first rule whose pattern
 * matches: its NAME template gives the name and its TAGS templates add tags
 * (docs/reference-parity.md#mogrifiers). Without a match the name is kept.
 *
 * @throws SyntaxError when a pattern does not compile (settings already check this)
 */
export function createMogrify(rules: readonly MogrifierRule[]): Mogrify {
  const compiled = rules.map((rule) => ({
    regex: new RegExp(rule.pattern),
    metricName: rule.metricName,
    tags: Object.entries(rule.tags),
  }));
  const cache = new Map<string, TaggedName>();
  return (fullName) => {
    let result = cache.get(fullName);
    if (result !== undefined) return result;
    const split = splitTags(fullName);
    const tags = split.tags.map((tag) => `${tag.key}:${tag.value}`);
    let name = split.name;
    for (const rule of compiled) {
      const match = rule.regex.exec(split.name);
      if (match === null) continue;
      name = expand(rule.metricName, match);
      for (const [key, template] of rule.tags)
        tags.push(`${key}:${expand(template, match)}`);
      break;
    }
    result = { name, tags };
    cache.set(fullName, result);
    return result;
  };
}
