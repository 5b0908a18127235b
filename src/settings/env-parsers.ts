// Parsers for environment variable values, with the syntax of the reference service's env
// library (docs/reference-parity.md#settings-parsing): Go's strconv.ParseBool / ParseInt(base 0) /
// ParseFloat and time.ParseDuration, plus its comma-separated list and `k:v` map forms. Each parser
// takes the raw text (never undefined: "unset" is decided by the caller) and throws EnvParseError.

import { formatGoDuration, parseGoDuration } from "../util/go-duration.js";

/**
 * One environment value does not have the expected form. {@link loadSettings} turns it into one
 * line of a {@link SettingsError}, prefixed with the variable name and the bad value.
 */
export class EnvParseError extends Error {
  override readonly name = "EnvParseError";
  /** What a valid value looks like, e.g. `"a non-negative integer"`. */
  readonly expected: string;
  /** What is wrong beyond "not the expected form", e.g. `invalid map item: "a:b:c"`. */
  readonly detail: string | undefined;
  constructor(expected: string, detail?: string) {
    super(
      detail === undefined
        ? `expected ${expected}`
        : `${detail}; expected ${expected}`,
    );
    this.expected = expected;
    this.detail = detail;
  }
}

// ---------------------------------------------------------------------------------------------
// bool

const trueWords: ReadonlySet<string> = new Set([
  "1",
  "t",
  "T",
  "TRUE",
  "true",
  "True",
]);
const falseWords: ReadonlySet<string> = new Set([
  "0",
  "f",
  "F",
  "FALSE",
  "false",
  "False",
]);

/** What {@link parseBool} accepts, as shown in error messages. */
export const boolExpected =
  "a boolean: 1, t, T, TRUE, true, True, 0, f, F, FALSE, false or False";

/**
 * Parses a boolean with Go `strconv.ParseBool` rules: exactly one of `1 t T TRUE true True`
 * (true) or `0 f F FALSE false False` (false). No trimming; `""`, `yes`, `on` are invalid.
 * @throws {@link EnvParseError} for any other text
 */
export function parseBool(text: string): boolean {
  if (trueWords.has(text)) return true;
  if (falseWords.has(text)) return false;
  throw new EnvParseError(boolExpected);
}

// ---------------------------------------------------------------------------------------------
// integer

/** Inclusive bounds for {@link parseInteger}; both must be safe integers. */
export interface IntegerRange {
  readonly min: number;
  readonly max: number;
}

/** Every integer a JavaScript number holds exactly. */
export const anyInteger: IntegerRange = {
  min: Number.MIN_SAFE_INTEGER,
  max: Number.MAX_SAFE_INTEGER,
};
/** 0 and above. */
export const nonNegativeInteger: IntegerRange = {
  min: 0,
  max: Number.MAX_SAFE_INTEGER,
};
/** 1 and above. */
export const positiveInteger: IntegerRange = {
  min: 1,
  max: Number.MAX_SAFE_INTEGER,
};

function describeIntegerRange(range: IntegerRange): string {
  const unboundedAbove = range.max === Number.MAX_SAFE_INTEGER;
  if (unboundedAbove && range.min === Number.MIN_SAFE_INTEGER)
    return "an integer";
  if (unboundedAbove && range.min === 0) return "a non-negative integer";
  if (unboundedAbove && range.min === 1) return "a positive integer";
  if (unboundedAbove) return `an integer of at least ${range.min}`;
  return `an integer from ${range.min} to ${range.max}`;
}

const integerDigits: Readonly<Record<number, string>> = {
  2: "[01]",
  8: "[0-7]",
  10: "[0-9]",
  16: "[0-9a-fA-F]",
};

/**
 * Reads a Go integer literal the way `strconv.ParseInt(text, 0, 64)` does: optional sign, then
 * `0x`/`0o`/`0b` (any case) or a bare leading `0` (octal) selects the base, and single `_` may
 * separate digits (and follow a base prefix). Returns undefined when the syntax is wrong.
 */
function goIntegerValue(text: string): bigint | undefined {
  let rest = text;
  let negative = false;
  if (rest.startsWith("+") || rest.startsWith("-")) {
    negative = rest.startsWith("-");
    rest = rest.slice(1);
  }
  let radix = 10;
  let prefixed = false;
  const prefix = rest.slice(0, 2).toLowerCase();
  if (prefix === "0x" || prefix === "0o" || prefix === "0b") {
    radix = prefix === "0x" ? 16 : prefix === "0o" ? 8 : 2;
    rest = rest.slice(2);
    prefixed = true;
  } else if (rest.length > 1 && rest.startsWith("0")) {
    radix = 8;
    rest = rest.slice(1);
    prefixed = true;
  }
  const digit = integerDigits[radix] ?? "[0-9]";
  // A base prefix counts as a digit, so one underscore may directly follow it ("0x_1F").
  const shape = new RegExp(`^${prefixed ? "_?" : ""}${digit}+(?:_${digit}+)*$`);
  if (!shape.test(rest)) return undefined;
  let value = 0n;
  for (const ch of rest.replaceAll("_", "")) {
    value = value * BigInt(radix) + BigInt(Number.parseInt(ch, 16));
  }
  return negative ? -value : value;
}

/**
 * Parses an integer with Go `strconv.ParseInt(text, 0, 64)` syntax: `42`, `-7`, `0x2A`, `0o52`,
 * `052` (leading zero = octal), `0b101010`, `1_000`. No whitespace, no fraction, no exponent.
 * @param range - inclusive bounds of the field; defaults to every safe integer
 * @throws {@link EnvParseError} when the syntax is wrong or the value is outside `range`
 */
export function parseInteger(
  text: string,
  range: IntegerRange = anyInteger,
): number {
  const expected = describeIntegerRange(range);
  const value = goIntegerValue(text);
  if (value === undefined) throw new EnvParseError(expected);
  if (value < BigInt(range.min) || value > BigInt(range.max)) {
    throw new EnvParseError(expected, "out of range");
  }
  return Number(value);
}

// ---------------------------------------------------------------------------------------------
// float

const decimalDigits = "[0-9](?:_?[0-9])*";
const hexDigits = "[0-9a-fA-F](?:_?[0-9a-fA-F])*";
const decimalFloat = new RegExp(
  `^[+-]?(?:${decimalDigits}(?:\\.(?:${decimalDigits})?)?|\\.${decimalDigits})(?:[eE][+-]?${decimalDigits})?$`,
);
// Hexadecimal mantissa, binary exponent; Go requires the `p` exponent.
const hexFloat = new RegExp(
  `^([+-]?)0[xX](?:_?(${hexDigits}))?(?:\\.(${hexDigits})?)?[pP]([+-]?${decimalDigits})$`,
);
const infinityWords = /^([+-]?)(?:inf|infinity)$/i;

/** What {@link parseFloat} accepts, as shown in error messages. */
export const floatExpected = "a number such as 0.5, 1e-3 or 2";

/**
 * Parses a floating-point number with Go `strconv.ParseFloat(text, 64)` syntax: decimal
 * (`1.5`, `.5`, `5.`, `1e-3`, `1_000.5`), hexadecimal with a binary exponent (`0x1p-2`), and
 * `inf`/`infinity` (optionally signed) or `nan`, case-insensitive. A finite literal whose value
 * overflows a double (`1e400`) is an error, as in Go.
 * @param range - when given, the value must be finite and within these inclusive bounds
 * @throws {@link EnvParseError} when the syntax is wrong or the value is out of range
 */
export function parseFloat(
  text: string,
  range?: { readonly min: number; readonly max: number },
): number {
  const expected =
    range === undefined
      ? floatExpected
      : range.max === Number.POSITIVE_INFINITY
        ? `a number of at least ${range.min}`
        : `a number from ${range.min} to ${range.max}`;
  const value = goFloatValue(text);
  if (value === undefined) throw new EnvParseError(expected);
  if (
    range !== undefined &&
    !(Number.isFinite(value) && value >= range.min && value <= range.max)
  ) {
    throw new EnvParseError(expected, "out of range");
  }
  return value;
}

function goFloatValue(text: string): number | undefined {
  const infinity = infinityWords.exec(text);
  if (infinity !== null) {
    return infinity[1] === "-"
      ? Number.NEGATIVE_INFINITY
      : Number.POSITIVE_INFINITY;
  }
  if (/^nan$/i.test(text)) return Number.NaN;
  let value: number;
  if (decimalFloat.test(text)) {
    value = Number(text.replaceAll("_", ""));
  } else {
    const hex = hexFloat.exec(text);
    if (hex === null) return undefined;
    const [, sign, whole = "", fraction = "", exponent = "0"] = hex;
    if (whole === "" && fraction === "") return undefined;
    const mantissa = BigInt(
      `0x${(whole + fraction).replaceAll("_", "") || "0"}`,
    );
    const shift =
      Number(exponent.replaceAll("_", "")) -
      4 * fraction.replaceAll("_", "").length;
    value = Number(mantissa) * 2 ** shift;
    if (sign === "-") value = -value;
  }
  // Go reports a finite literal that rounds to ±Inf as "value out of range".
  return Number.isFinite(value) ? value : undefined;
}

/**
 * Parses a ratio: a {@link parseFloat} number from 0 to 1 inclusive (`NEAR_LIMIT_RATIO`,
 * `TRACING_SAMPLING_RATE`).
 * @throws {@link EnvParseError} when the text is not a number or is outside 0..1
 */
export function parseRatio(text: string): number {
  return parseFloat(text, { min: 0, max: 1 });
}

// ---------------------------------------------------------------------------------------------
// duration

const durationSyntax =
  "duration such as 300ms, 1.5h or 2h45m (units ns, us, µs, ms, s, m, h)";

/** What {@link parseDurationMs} accepts, as shown in error messages. */
export const durationExpected = `a ${durationSyntax}`;

/** Sign restriction for {@link parseDurationMs}: any, ≥ 0, or > 0. */
export type DurationBound = "any" | "non-negative" | "positive";

/**
 * Parses a Go duration (`time.ParseDuration`): a sequence of decimal numbers, each with an
 * optional fraction and a unit (`ns`, `us`, `µs`, `μs`, `ms`, `s`, `m`, `h`), with an optional
 * leading sign: `300ms`, `1.5h`, `2h45m`, `-1s`. A bare `0` is valid; a bare `10` is not.
 * @param bound - sign the field allows; the error's `expected` names it
 * @returns milliseconds, fractional for sub-millisecond parts (`1us` → 0.001)
 * @throws {@link EnvParseError} when the syntax is wrong, the magnitude exceeds Go's range
 *   (about 292 years), or the sign is not allowed by `bound`
 */
export function parseDurationMs(
  text: string,
  bound: DurationBound = "any",
): number {
  const expected =
    bound === "any" ? durationExpected : `a ${bound} ${durationSyntax}`;
  const nanoseconds = parseGoDuration(text);
  if (nanoseconds === undefined) throw new EnvParseError(expected);
  if (bound === "non-negative" && nanoseconds < 0n)
    throw new EnvParseError(expected, "negative");
  if (bound === "positive" && nanoseconds <= 0n)
    throw new EnvParseError(expected, "not positive");
  return Number(nanoseconds) / 1e6;
}

/**
 * Formats milliseconds as the shortest Go duration text that {@link parseDurationMs} reads back
 * to the same value (to the nanosecond): `86400000` → `24h`, `90000` → `1m30s`, `0` → `0`.
 */
export function formatDurationMs(durationMs: number): string {
  return formatGoDuration(BigInt(Math.round(durationMs * 1e6)));
}

// ---------------------------------------------------------------------------------------------
// list and map

/**
 * Parses a comma-separated list. Items are not trimmed (`"a, b"` → `["a", " b"]`); a blank or
 * whitespace-only value is the empty list. Never throws.
 */
export function parseList(text: string): string[] {
  return text.trim() === "" ? [] : text.split(",");
}

/** What {@link parseMap} accepts, as shown in error messages. */
export const mapExpected =
  'comma-separated key:value pairs, each with exactly one ":"';

/**
 * Parses `k1:v1,k2:v2` into an object. Each comma-separated item must split on `:` into exactly
 * two parts (so neither key nor value may contain `:`; either may be empty). Nothing is trimmed;
 * a later duplicate key wins; a blank value is the empty map.
 * @throws {@link EnvParseError} with detail `invalid map item: "<item>"` for the first bad item
 */
export function parseMap(text: string): Record<string, string> {
  if (text.trim() === "") return {};
  const entries: [string, string][] = [];
  for (const item of text.split(",")) {
    const parts = item.split(":");
    const [entryKey, entryValue] = parts;
    if (
      parts.length !== 2 ||
      entryKey === undefined ||
      entryValue === undefined
    ) {
      throw new EnvParseError(
        mapExpected,
        `invalid map item: ${JSON.stringify(item)}`,
      );
    }
    entries.push([entryKey, entryValue]);
  }
  // fromEntries defines own properties, so a "__proto__" key is stored, not a prototype change.
  return Object.fromEntries(entries);
}
