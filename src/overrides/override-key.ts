// The two spellings of an override's descriptor. The descriptor text (`tenant=acme,plan=gold`,
// with `\`, `,` and `=` escaped by a backslash) names an override to people and is the field
// of the kv store's hash; the probe key is what the hot path builds from a request's entries
// to probe the table: the keys and values joined by U+0001, which costs one concatenation per
// part and no escaping (measured: a length-prefixed form, `${key.length}:…`, took four times
// as long as the lookup itself, for the number-to-string conversions). Both keep the entries
// in the request's order: a descriptor's order is part of its identity, as in the config tree
// (`a=1,b=2` and `b=2,a=1` reach different rules).

/** One descriptor entry: a key and a value (a value ending in `*` is a prefix wildcard). */
export interface OverrideEntry {
  readonly key: string;
  readonly value: string;
}

const separator = "\u0001";
/** Starts every length-prefixed probe key, and no joined one. */
const lengthPrefixed = "\u0000";

/**
 * Returns the probe key of a descriptor's entries: keys and values joined by U+0001. Where a
 * key or value holds U+0001 itself, or the first key starts with U+0000, it is instead U+0000
 * followed by `<length>:<text>` per part, so no two descriptors share a probe key.
 */
export function probeKey(entries: readonly OverrideEntry[]): string {
  // Without prefix lengths every descriptor has a probe key.
  return prefixProbeKey(entries, undefined) ?? "";
}

/**
 * Returns the probe key of a descriptor's entries with the values at some positions cut to a
 * prefix: what a prefix-wildcard override of that shape is stored under ({@link probeKey} of
 * the cut entries). `undefined` when a value is shorter than its prefix (it cannot match).
 *
 * @param prefixLengths - per position, the prefix length to cut the value to; -1 (or
 *   `undefined` for all) keeps the whole value
 */
export function prefixProbeKey(
  entries: readonly OverrideEntry[],
  prefixLengths: readonly number[] | undefined,
): string | undefined {
  const n = entries.length;
  let key = "";
  for (let i = 0; i < n; i++) {
    const entry = entries[i];
    if (entry === undefined) break;
    let value = entry.value;
    const prefix = prefixLengths?.[i] ?? -1;
    if (prefix >= 0) {
      if (value.length < prefix) return undefined;
      value = value.slice(0, prefix);
    }
    if (
      entry.key.includes(separator) ||
      value.includes(separator) ||
      (i === 0 && entry.key.startsWith(lengthPrefixed))
    )
      return lengthPrefixedKey(entries, prefixLengths);
    key += i === 0 ? entry.key : separator + entry.key;
    key += separator + value;
  }
  return key;
}

function lengthPrefixedKey(
  entries: readonly OverrideEntry[],
  prefixLengths: readonly number[] | undefined,
): string {
  let key = lengthPrefixed;
  entries.forEach((entry, i) => {
    const prefix = prefixLengths?.[i] ?? -1;
    const value = prefix >= 0 ? entry.value.slice(0, prefix) : entry.value;
    key += `${String(entry.key.length)}:${entry.key}${String(value.length)}:${value}`;
  });
  return key;
}

/**
 * The entries of a probe key ({@link probeKey} reversed; the key of no entries is "").
 *
 * @throws {@link RangeError} for a string no {@link probeKey} returns
 */
export function parseProbeKey(probe: string): OverrideEntry[] {
  const entries: OverrideEntry[] = [];
  if (probe === "") return entries;
  if (!probe.startsWith(lengthPrefixed)) {
    const parts = probe.split(separator);
    if (parts.length % 2 !== 0)
      throw new RangeError("probe key with an odd number of parts");
    for (let i = 0; i < parts.length; i += 2)
      entries.push({ key: parts[i] ?? "", value: parts[i + 1] ?? "" });
    return entries;
  }
  let at = lengthPrefixed.length;
  const part = (): string => {
    const colon = probe.indexOf(":", at);
    const length = Number(probe.slice(at, colon));
    if (colon < 0 || !Number.isInteger(length))
      throw new RangeError("malformed length-prefixed probe key");
    const text = probe.slice(colon + 1, colon + 1 + length);
    at = colon + 1 + length;
    return text;
  };
  while (at < probe.length) {
    const key = part();
    entries.push({ key, value: part() });
  }
  return entries;
}

const special = /[\\,=]/g;

function escapePart(text: string): string {
  return text.replace(special, (c) => "\\" + c);
}

/**
 * Returns the descriptor text of entries: `key=value` pairs joined by `,`, with `\`, `,` and
 * `=` inside a key or value escaped by a backslash (`a\,b=c`). The canonical name of an
 * override, and its field in the kv store.
 */
export function descriptorText(entries: readonly OverrideEntry[]): string {
  return entries
    .map((entry) => escapePart(entry.key) + "=" + escapePart(entry.value))
    .join(",");
}

/**
 * Parses a descriptor text back into entries ({@link descriptorText} reversed).
 *
 * @throws {@link RangeError} when a pair has no unescaped `=`, more than one, or the text ends
 *   in a lone backslash
 */
export function parseDescriptorText(text: string): OverrideEntry[] {
  const entries: OverrideEntry[] = [];
  let key: string | undefined;
  let part = "";
  for (let i = 0; i < text.length; i++) {
    const c = text.charAt(i);
    if (c === "\\") {
      if (i + 1 >= text.length)
        throw new RangeError(
          `descriptor text ends in a lone backslash: ${text}`,
        );
      part += text.charAt(i + 1);
      i++;
    } else if (c === "=") {
      if (key !== undefined)
        throw new RangeError(
          `descriptor text has two '=' in one entry: ${text}`,
        );
      key = part;
      part = "";
    } else if (c === ",") {
      if (key === undefined)
        throw new RangeError(
          `descriptor text has an entry without '=': ${text}`,
        );
      entries.push({ key, value: part });
      key = undefined;
      part = "";
    } else {
      part += c;
    }
  }
  if (key === undefined)
    throw new RangeError(`descriptor text has an entry without '=': ${text}`);
  entries.push({ key, value: part });
  return entries;
}

/** Whether a value is a prefix wildcard (ends in `*`); the prefix is the value without it. */
export function isWildcardValue(value: string): boolean {
  return value.endsWith("*");
}
