// Reads environment variables for loadSettings, collecting every problem instead of stopping at
// the first, so one restart is enough to fix them all.

import { EnvParseError } from "./env-parsers.js";

/** The environment as `loadSettings` reads it; `undefined` means unset. */
export type SettingsEnv = Readonly<Record<string, string | undefined>>;

/** `JSON.stringify` of a text, as values are quoted in problem lines. */
export const quote = (text: string): string => JSON.stringify(text);

/** Reads variables, collecting every problem instead of stopping at the first. */
export interface EnvReader {
  /** Problem lines so far, in the order found. */
  readonly problems: readonly string[];
  /** Raw text of a variable; undefined when unset. */
  text(name: string): string | undefined;
  isSet(name: string): boolean;
  /** True when none of the variables failed to parse, so combination checks can trust them. */
  allValid(...names: string[]): boolean;
  /**
   * Parses a set variable, or returns the fallback when it is unset. On a parse failure the
   * problem is recorded and the fallback returned, so reading can go on.
   * @param secret - keep the value out of the problem text
   */
  read<T>(
    name: string,
    fallback: T,
    parse: (text: string) => T,
    secret?: boolean,
  ): T;
  /** Records a problem; the named variables count as failed for later checks. */
  problem(line: string, ...failedNames: string[]): void;
}

/** An {@link EnvReader} over `env`; reads nothing but `env`. */
export function createEnvReader(env: SettingsEnv): EnvReader {
  const problems: string[] = [];
  const failed = new Set<string>();
  return {
    problems,
    text: (name) => env[name],
    isSet: (name) => env[name] !== undefined,
    allValid: (...names) => names.every((name) => !failed.has(name)),
    read(name, fallback, parse, secret = false) {
      const text = env[name];
      if (text === undefined) return fallback;
      try {
        return parse(text);
      } catch (err) {
        if (!(err instanceof EnvParseError)) throw err;
        failed.add(name);
        problems.push(
          secret
            ? `${name} (value hidden): expected ${err.expected}`
            : `${name}=${quote(text)}: ${err.message}`,
        );
        return fallback;
      }
    },
    problem(line, ...failedNames) {
      problems.push(line);
      for (const name of failedNames) failed.add(name);
    },
  };
}

/**
 * Returns the first of two spellings of one variable that is set. Both set to different values
 * is a problem (which one was meant is unknown); both set alike is fine.
 */
export function readEitherSpelling(
  reader: EnvReader,
  primary: string,
  alias: string,
): { readonly name: string; readonly text: string } | undefined {
  const primaryText = reader.text(primary);
  const aliasText = reader.text(alias);
  if (
    primaryText !== undefined &&
    aliasText !== undefined &&
    primaryText !== aliasText
  ) {
    reader.problem(
      `${primary}=${quote(primaryText)} and ${alias}=${quote(aliasText)} disagree: expected only one of these spellings, or both with the same value`,
      primary,
      alias,
    );
    return undefined;
  }
  if (primaryText !== undefined) return { name: primary, text: primaryText };
  if (aliasText !== undefined) return { name: alias, text: aliasText };
  return undefined;
}
