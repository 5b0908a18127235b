// The two spellings of an override's descriptor. The descriptor text (`tenant=acme,plan=gold`,
// with `\`, `,` and `=` escaped by a backslash) names an override to people and is the field
// of the kv store's hash; the probe key (each key and value prefixed by its length) is what
// the hot path builds from a request's entries, without scanning them for characters to
// escape. Both keep the entries in the request's order: a descriptor's order is part of its
// identity, as in the config tree (`a=1,b=2` and `b=2,a=1` reach different rules).

/** One descriptor entry: a key and a value (a value ending in `*` is a prefix wildcard). */
export interface OverrideEntry {
  readonly key: string;
  readonly value: string;
}

/**
 * Returns the probe key of a descriptor's entries: `<key length>:<key><value length>:<value>`
 * per entry, concatenated. Unambiguous for any key and value (lengths delimit them), and
 * cheap: one concatenation per part, no scan.
 */
export function probeKey(entries: readonly OverrideEntry[]): string {
  let key = "";
  for (const entry of entries)
    key += `${entry.key.length}:${entry.key}${entry.value.length}:${entry.value}`;
  return key;
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
