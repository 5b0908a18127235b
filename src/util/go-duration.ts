// Go durations (`time.ParseDuration` syntax, `300ms`, `1.5h`, `2h45m`): the one reader and
// writer of that syntax, used by the settings (`settings/env-parsers.ts`) and by pull-stats
// mapping files (`stats/prometheus-mapping-parser.ts`). Callers wrap the result in their own
// error type and message.

const nanosecondsPerUnit: ReadonlyMap<string, bigint> = new Map([
  ["ns", 1n],
  ["us", 1_000n],
  ["\u00b5s", 1_000n], // U+00B5 micro sign
  ["\u03bcs", 1_000n], // U+03BC Greek small letter mu
  ["ms", 1_000_000n],
  ["s", 1_000_000_000n],
  ["m", 60_000_000_000n],
  ["h", 3_600_000_000_000n],
]);
const maxNanoseconds = (1n << 63n) - 1n;
// One `<number><unit>` part: digits, optional fraction, then everything up to the next digit or dot.
const durationPart = /^([0-9]*)(?:\.([0-9]*))?([^0-9.]*)/;

/**
 * Reads a Go duration (Go `time.ParseDuration`) as whole nanoseconds: a sequence of decimal
 * numbers, each with an optional fraction and a unit (`ns`, `us`, `µs`, `μs`, `ms`, `s`, `m`,
 * `h`), with an optional leading sign: `300ms`, `1.5h`, `2h45m`, `.5s`, `-1s`. A bare `0` is
 * valid; a bare `10` is not. Sub-nanosecond remainders are truncated, as in Go.
 *
 * @returns signed nanoseconds, or undefined when the syntax is wrong or the magnitude exceeds
 *   Go's signed 64-bit count of nanoseconds (about 292 years). Never throws.
 */
export function parseGoDuration(text: string): bigint | undefined {
  let rest = text;
  let negative = false;
  if (rest.startsWith("+") || rest.startsWith("-")) {
    negative = rest.startsWith("-");
    rest = rest.slice(1);
  }
  if (rest === "0") return 0n;
  if (rest === "") return undefined;
  let total = 0n;
  while (rest !== "") {
    const part = durationPart.exec(rest);
    if (part === null) return undefined;
    const [matched, whole = "", fraction = "", unit = ""] = part;
    if (whole === "" && fraction === "") return undefined;
    const scale = nanosecondsPerUnit.get(unit);
    if (scale === undefined) return undefined;
    let nanoseconds = BigInt(whole === "" ? "0" : whole) * scale;
    if (fraction !== "") {
      // Sub-nanosecond remainders are truncated, as in Go.
      nanoseconds +=
        (BigInt(fraction) * scale) / 10n ** BigInt(fraction.length);
    }
    total += nanoseconds;
    if (total > maxNanoseconds + (negative ? 1n : 0n)) return undefined;
    rest = rest.slice(matched.length);
  }
  return negative ? -total : total;
}

const formatUnits: readonly (readonly [string, bigint])[] = [
  ["h", 3_600_000_000_000n],
  ["m", 60_000_000_000n],
  ["s", 1_000_000_000n],
  ["ms", 1_000_000n],
  ["us", 1_000n],
  ["ns", 1n],
];

/**
 * Formats nanoseconds as the shortest Go duration text that {@link parseGoDuration} reads back
 * to the same value: `86400000000000n` → `24h`, `90000000000n` → `1m30s`, `0n` → `0`. Unlike
 * Go's `Duration.String` it writes no fractions (`1m30s`, not `1m30.000s`) and `us`, not `µs`.
 */
export function formatGoDuration(nanoseconds: bigint): string {
  if (nanoseconds === 0n) return "0";
  let rest = nanoseconds < 0n ? -nanoseconds : nanoseconds;
  let text = nanoseconds < 0n ? "-" : "";
  for (const [unit, scale] of formatUnits) {
    // Hours stay in hours ("24h", not "1d"): Go has no larger unit.
    const count = rest / scale;
    if (count > 0n) {
      text += `${count.toString()}${unit}`;
      rest -= count * scale;
    }
  }
  return text;
}
