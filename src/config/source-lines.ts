// Lines of the YAML fields a decoded config object came from, kept beside the plain data (a
// WeakMap keyed by the decoded object) so the decoded shapes stay the reference's structs and
// tests comparing them are unaffected. Load-time errors read them to name a line.

const linesByObject = new WeakMap<object, ReadonlyMap<string, number>>();

/**
 * Records the 1-based lines of `decoded`'s fields, by YAML key (`unit`, `domain`, …); the key
 * `""` is the line of the block itself.
 */
export function recordSourceLines(
  decoded: object,
  lines: ReadonlyMap<string, number>,
): void {
  linesByObject.set(decoded, lines);
}

/**
 * Returns the line of the YAML field `yamlKey` of `decoded` (`""` for the block itself), or
 * undefined when the object was not decoded from YAML (xDS) or the field was absent.
 */
export function sourceLine(
  decoded: object,
  yamlKey: string,
): number | undefined {
  return linesByObject.get(decoded)?.get(yamlKey);
}
