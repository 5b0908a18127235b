/**
 * Resolution of YAML scalars the way gopkg.in/yaml.v2 (YAML 1.1) does it, which is what the
 * reference service uses to read config files (docs/reference-parity.md#yaml-dialect). The `yaml`
 * package parses the text with its failsafe schema (every scalar a string); this module then
 * decides what that text means, so that `yes`, `0x1F`, `08`, `1_000`, `.inf` or `2001-12-14` behave
 * as upstream.
 */

/** YAML core tag prefix; `tag:yaml.org,2002:int` is written `!!int` in messages. */
const yamlTagPrefix = "tag:yaml.org,2002:";

/** What a scalar resolves to: the Go type yaml.v2 would decode it into `interface{}` as. */
export type ResolvedScalar =
  | { readonly kind: "str"; readonly value: string }
  | { readonly kind: "int"; readonly value: bigint }
  | { readonly kind: "float"; readonly value: number }
  | { readonly kind: "bool"; readonly value: boolean }
  | { readonly kind: "null" }
  /** Looks like a timestamp; yaml.v2 (2.4) still hands it out as its text. */
  | { readonly kind: "timestamp"; readonly value: string }
  /** `!!binary`: the base64-decoded text. */
  | { readonly kind: "binary"; readonly value: string };

/**
 * A YAML problem that yaml.v2 reports as a failure of the whole document (not a per-field
 * unmarshal error). The message has no `yaml: ` prefix.
 */
export class YamlDocumentError extends Error {
  override readonly name = "YamlDocumentError";
}

/** Returns the short form of a tag: `tag:yaml.org,2002:str` → `!!str`; others unchanged. */
export function shortYamlTag(tag: string): string {
  return tag.startsWith(yamlTagPrefix)
    ? `!!${tag.slice(yamlTagPrefix.length)}`
    : tag;
}

// Plain scalars that resolve by table lookup (yaml.v2 `resolve.go` `resolveMap`).
const tableValues = new Map<string, ResolvedScalar>();
for (const text of [
  "y",
  "Y",
  "yes",
  "Yes",
  "YES",
  "true",
  "True",
  "TRUE",
  "on",
  "On",
  "ON",
]) {
  tableValues.set(text, { kind: "bool", value: true });
}
for (const text of [
  "n",
  "N",
  "no",
  "No",
  "NO",
  "false",
  "False",
  "FALSE",
  "off",
  "Off",
  "OFF",
]) {
  tableValues.set(text, { kind: "bool", value: false });
}
for (const text of ["", "~", "null", "Null", "NULL"])
  tableValues.set(text, { kind: "null" });
for (const text of [".nan", ".NaN", ".NAN"])
  tableValues.set(text, { kind: "float", value: NaN });
for (const text of [".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"]) {
  tableValues.set(text, { kind: "float", value: Infinity });
}
for (const text of ["-.inf", "-.Inf", "-.INF"]) {
  tableValues.set(text, { kind: "float", value: -Infinity });
}

/** Tags whose scalars yaml.v2 resolves; any other tag leaves the text a string. */
const resolvableTags = new Set([
  "",
  "!!str",
  "!!bool",
  "!!int",
  "!!float",
  "!!null",
  "!!timestamp",
]);

const yamlStyleFloat =
  /^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$/;
const dotFloat = /^\.[0-9]+(?:[eE][-+]?[0-9]+)?$/;
const int64Min = -(2n ** 63n);
const int64Max = 2n ** 63n - 1n;
const uint64Max = 2n ** 64n - 1n;

/**
 * Resolves one scalar.
 *
 * @param text - the scalar's string value (plain text as written, or the decoded quoted text)
 * @param tag - the explicit tag in short form (`!!str`, `!foo`), or "" when untagged
 * @param plain - whether the scalar is plain (unquoted, not a block scalar); only untagged plain
 *   scalars are resolved implicitly, everything else untagged is a string
 * @returns the resolved value and the tag to name it by in messages (`!!int`, `!foo`)
 * @throws {@link YamlDocumentError} for a tag that contradicts the text (`!!int abc`) or bad
 *   `!!binary` data, as yaml.v2 fails the whole document for those
 */
export function resolveYamlScalar(
  text: string,
  tag: string,
  plain: boolean,
): { readonly resolved: ResolvedScalar; readonly tag: string } {
  if (tag === "" && !plain) {
    return { resolved: { kind: "str", value: text }, tag: "!!str" };
  }
  if (tag === "!!binary") {
    const compact = text.replace(/\s+/g, "");
    if (
      !/^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/.test(
        compact,
      )
    ) {
      throw new YamlDocumentError(
        "!!binary value contains invalid base64 data",
      );
    }
    const decoded = Buffer.from(compact, "base64").toString("utf8");
    return { resolved: { kind: "binary", value: decoded }, tag };
  }
  if (!resolvableTags.has(tag)) {
    return { resolved: { kind: "str", value: text }, tag };
  }
  const resolved =
    tag === "!!str"
      ? { kind: "str" as const, value: text }
      : resolvePlain(text, tag);
  const resolvedTag = `!!${resolved.kind}`;
  if (tag === "" || tag === "!!str" || tag === resolvedTag) {
    return { resolved, tag: resolvedTag };
  }
  if (tag === "!!float" && resolved.kind === "int") {
    return { resolved: { kind: "float", value: Number(resolved.value) }, tag };
  }
  // Same failure as yaml.v2 `resolve`: an explicit tag that the text does not fit.
  throw new YamlDocumentError(
    `cannot decode ${resolvedTag} \`${text}\` as a ${tag}`,
  );
}

/** Implicit resolution of a plain scalar (yaml.v2 `resolve.go` `resolve`). */
function resolvePlain(text: string, tag: string): ResolvedScalar {
  const table = tableValues.get(text);
  if (table !== undefined) return table;
  const first = text.charAt(0);
  if (first === ".") {
    // Not in the table, so maybe a plain float such as `.5`.
    if (dotFloat.test(text)) {
      const value = Number(text);
      if (Number.isFinite(value)) return { kind: "float", value };
    }
    return { kind: "str", value: text };
  }
  const isSign = first === "+" || first === "-";
  if (!isSign && !(first >= "0" && first <= "9")) {
    return { kind: "str", value: text };
  }
  if ((tag === "" || tag === "!!timestamp") && isTimestamp(text)) {
    return { kind: "timestamp", value: text };
  }
  // yaml.v2 drops every underscore before parsing numbers (`1_000` → 1000).
  const digits = text.replaceAll("_", "");
  const asInt = parseGoInteger(digits, true);
  if (asInt !== undefined && asInt >= int64Min && asInt <= int64Max) {
    return { kind: "int", value: asInt };
  }
  const asUint = parseGoInteger(digits, false);
  if (asUint !== undefined && asUint <= uint64Max) {
    return { kind: "int", value: asUint };
  }
  if (yamlStyleFloat.test(digits)) {
    const value = Number(digits);
    // Go's ParseFloat reports out-of-range values as errors; the text then stays a string.
    if (Number.isFinite(value)) return { kind: "float", value };
  }
  return { kind: "str", value: text };
}

/**
 * Parses an integer with Go `strconv.ParseInt(s, 0, 64)` syntax (without the range check):
 * optional sign (only when `signed`), `0x`/`0o`/`0b` prefixes, a leading `0` for octal.
 */
function parseGoInteger(text: string, signed: boolean): bigint | undefined {
  let rest = text;
  let negative = false;
  if (signed && (rest.startsWith("+") || rest.startsWith("-"))) {
    negative = rest.startsWith("-");
    rest = rest.slice(1);
  }
  let pattern: RegExp;
  let prefix = "";
  const lower = rest.slice(0, 2).toLowerCase();
  if (lower === "0x") {
    pattern = /^[0-9a-fA-F]+$/;
    prefix = "0x";
    rest = rest.slice(2);
  } else if (lower === "0o") {
    pattern = /^[0-7]+$/;
    prefix = "0o";
    rest = rest.slice(2);
  } else if (lower === "0b") {
    pattern = /^[01]+$/;
    prefix = "0b";
    rest = rest.slice(2);
  } else if (rest.length > 1 && rest.startsWith("0")) {
    pattern = /^[0-7]+$/;
    prefix = "0o";
    rest = rest.slice(1);
  } else {
    pattern = /^[0-9]+$/;
  }
  if (!pattern.test(rest)) return undefined;
  const magnitude = BigInt(prefix + rest);
  return negative ? -magnitude : magnitude;
}

const dateOnly = /^(\d{4})-(\d{1,2})-(\d{1,2})$/;
const dateTimeZone =
  /^(\d{4})-(\d{1,2})-(\d{1,2})[Tt](\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})$/;
const dateTimeSpace =
  /^(\d{4})-(\d{1,2})-(\d{1,2}) (\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.\d+)?$/;

/** Whether yaml.v2 `parseTimestamp` accepts the text (its four layouts, valid calendar date). */
function isTimestamp(text: string): boolean {
  const match =
    dateOnly.exec(text) ?? dateTimeZone.exec(text) ?? dateTimeSpace.exec(text);
  if (match === null) return false;
  const [year, month, day, hour = 0, minute = 0, second = 0] = match
    .slice(1)
    .map(Number);
  if (year === undefined || month === undefined || day === undefined) {
    return false;
  }
  if (
    month < 1 ||
    month > 12 ||
    day < 1 ||
    hour > 23 ||
    minute > 59 ||
    second > 59
  )
    return false;
  const daysInMonth = new Date(Date.UTC(year, month, 0)).getUTCDate();
  return day <= daysInMonth;
}

/**
 * Formats a float like Go's `%v` (shortest representation, exponent form below 1e-4 and from
 * 1e21 on, two-digit exponents): `0.25`, `1000`, `1e+21`, `1e-05`, `+Inf`, `NaN`.
 */
export function formatGoFloat(value: number): string {
  if (Number.isNaN(value)) return "NaN";
  if (value === Infinity) return "+Inf";
  if (value === -Infinity) return "-Inf";
  if (value === 0) return Object.is(value, -0) ? "-0" : "0";
  const [mantissa = "", exponentText = "0"] = value.toExponential().split("e");
  const exponent = Number(exponentText);
  if (exponent < -4 || exponent >= 21) {
    const sign = exponent < 0 ? "-" : "+";
    return `${mantissa}e${sign}${String(Math.abs(exponent)).padStart(2, "0")}`;
  }
  return String(value);
}

/** Formats a resolved scalar like Go's `%v` of the value yaml.v2 decodes into `interface{}`. */
export function formatGoScalar(resolved: ResolvedScalar): string {
  switch (resolved.kind) {
    case "str":
    case "timestamp":
    case "binary":
      return resolved.value;
    case "int":
      return resolved.value.toString();
    case "float":
      return formatGoFloat(resolved.value);
    case "bool":
      return resolved.value ? "true" : "false";
    case "null":
      return "<nil>";
  }
}
