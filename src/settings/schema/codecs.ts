// Codecs: how one kind of environment value is parsed (with the reference's Go syntax, see
// ../env-parsers.ts) and how its default is spelled in `--help` and docs/settings.md.

import {
  EnvParseError,
  formatDurationMs,
  parseBool,
  parseDurationMs,
  parseFloat,
  parseInteger,
  parseList,
  parseMap,
  parseRatio,
  type DurationBound,
  type IntegerRange,
} from "../env-parsers.js";

/** Parses one variable's text and spells a value back the way the environment would. */
export interface Codec<T> {
  /**
   * Text → value; never sees `undefined` (unset variables take the default).
   * @throws {@link EnvParseError} when the text is invalid
   */
  readonly parse: (text: string) => T;
  /** Value → environment text, for the default column; "(empty)" for an empty value. */
  readonly format: (value: T) => string;
}

const empty = "(empty)";

function codec<T>(
  parse: (text: string) => T,
  format: (value: T) => string,
): Codec<T> {
  return Object.freeze({ parse, format });
}

/** Any text, taken verbatim. */
export const text: Codec<string> = codec(
  (value) => value,
  (value) => (value === "" ? empty : value),
);

/** Go `strconv.ParseBool` words. */
export const flag: Codec<boolean> = codec(parseBool, String);

/** Go integer literal within inclusive bounds (see `parseInteger`). */
export function integer(range: IntegerRange): Codec<number> {
  return codec((value) => parseInteger(value, range), String);
}

/** TCP port to listen on; 0 picks a free one. */
export const listenPort: IntegerRange = { min: 0, max: 65_535 };
/** TCP/UDP port to connect to. */
export const remotePort: IntegerRange = { min: 1, max: 65_535 };

/** Go float literal, optionally within inclusive bounds (see `parseFloat`). */
export function float(range?: {
  readonly min: number;
  readonly max: number;
}): Codec<number> {
  return codec((value) => parseFloat(value, range), String);
}

/** A number from 0 to 1 (see `parseRatio`). */
export const ratio: Codec<number> = codec(parseRatio, String);

/**
 * Go duration, read as milliseconds and spelled back as the shortest Go duration; with
 * `maxMs`, longer durations are invalid (e.g. for a timer: Node's timers take at most
 * 2^31 - 1 ms).
 */
export function durationMs(
  bound: DurationBound,
  maxMs?: number,
): Codec<number> {
  if (maxMs === undefined)
    return codec((value) => parseDurationMs(value, bound), formatDurationMs);
  return codec((value) => {
    const ms = parseDurationMs(value, bound);
    if (ms > maxMs) {
      throw new EnvParseError(
        `a duration of at most ${formatDurationMs(maxMs)}`,
        "too long",
      );
    }
    return ms;
  }, formatDurationMs);
}

/**
 * Go duration of whole seconds ≥ 1 s, read as milliseconds (for durations a peer truncates to
 * whole seconds, such as Envoy's RLQS filter), at most `maxMs`.
 */
export function wholeSecondsMs(maxMs: number): Codec<number> {
  return codec((value) => {
    const ms = parseDurationMs(value, "positive");
    if (ms % 1000 !== 0 || ms > maxMs) {
      throw new EnvParseError(
        `whole seconds from 1s to ${formatDurationMs(maxMs)}`,
        ms % 1000 !== 0 ? "not whole seconds" : "too long",
      );
    }
    return ms;
  }, formatDurationMs);
}

/** Comma-separated list, items not trimmed (see `parseList`). */
export const list: Codec<readonly string[]> = codec<readonly string[]>(
  parseList,
  (value) => (value.length === 0 ? empty : value.join(",")),
);

const formatMap = (value: Readonly<Record<string, string>>): string => {
  const entries = Object.entries(value);
  return entries.length === 0
    ? empty
    : entries.map(([k, v]) => `${k}:${v}`).join(",");
};

/** `k1:v1,k2:v2` (see `parseMap`). */
export const map: Codec<Readonly<Record<string, string>>> = codec(
  parseMap,
  formatMap,
);

/** A map with its own item syntax; the default is spelled like {@link map}'s. */
export function mapOf(
  parse: (text: string) => Record<string, string>,
): Codec<Readonly<Record<string, string>>> {
  return codec(parse, formatMap);
}

/**
 * One word of a fixed table, looked up after `fold` (e.g. lower-casing). Several words may
 * map to one value (aliases).
 * @param expected - shown after "expected" in the problem line
 */
export function oneOf<T>(
  words: ReadonlyMap<string, T>,
  expected: string,
  options: {
    readonly fold?: (text: string) => string;
    readonly format?: (value: T) => string;
  } = {},
): Codec<T> {
  const fold = options.fold ?? ((value: string) => value);
  return codec<T>(
    (value) => {
      const word = words.get(fold(value));
      if (word === undefined) throw new EnvParseError(expected);
      return word;
    },
    options.format ?? ((value: T) => String(value)),
  );
}

/** Any parse function, with a custom spelling of the default. */
export function custom<T>(
  parse: (text: string) => T,
  format: (value: T) => string,
): Codec<T> {
  return codec(parse, format);
}

export const lowerCase = (value: string): string => value.toLowerCase();
export const upperCase = (value: string): string => value.toUpperCase();
