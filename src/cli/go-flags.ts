import { realpathSync } from "node:fs";
import { fileURLToPath } from "node:url";

/** Kind of a command-line flag: a string (optionally repeatable) or a boolean switch. */
export interface FlagSpec {
  readonly kind: "string" | "bool";
  /** Collect every occurrence instead of keeping the last one. @defaultValue false */
  readonly repeatable?: boolean;
  /** Value when the flag is absent. */
  readonly default?: string;
  /** One-line help. */
  readonly help: string;
}

/** Parsed flags: last value per string flag, all values per repeatable flag, bools as "true"/"false". */
export interface ParsedFlags {
  readonly values: ReadonlyMap<string, string>;
  readonly lists: ReadonlyMap<string, readonly string[]>;
  /** `-h`, `-help` or `--help` was given. */
  readonly help: boolean;
  /** `-version` or `--version` was given. */
  readonly version: boolean;
  /** The arguments after the flags (after `--` or from the first non-flag argument on). */
  readonly rest: readonly string[];
}

/** A command-line flag is unknown or lacks its value. */
export class FlagError extends Error {
  override readonly name = "FlagError";
}

/**
 * Parses arguments with Go `flag` package syntax, as the reference's tools accept them:
 * `-name value`, `-name=value`, `--name=value`, bool flags as `-name` or `-name=false`;
 * parsing stops at `--` or the first non-flag argument, and what follows is returned as `rest`.
 * `-h` / `-help` / `--help` ask for help, `-version` / `--version` for the version.
 *
 * @throws {@link FlagError} for an unknown flag, a missing value or a bad bool
 */
export function parseGoFlags(
  argv: readonly string[],
  specs: Readonly<Record<string, FlagSpec>>,
): ParsedFlags {
  const values = new Map<string, string>();
  const lists = new Map<string, string[]>();
  for (const [name, spec] of Object.entries(specs)) {
    if (spec.default !== undefined) values.set(name, spec.default);
    else if (spec.kind === "bool") values.set(name, "false");
  }
  let help = false;
  let version = false;
  let i = 0;
  for (; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "--") {
      i++;
      break;
    }
    if (arg === undefined || !arg.startsWith("-") || arg === "-") break;
    const body = arg.replace(/^--?/, "");
    const eq = body.indexOf("=");
    const name = eq < 0 ? body : body.slice(0, eq);
    if (name === "h" || name === "help") {
      help = true;
      continue;
    }
    if (name === "version" && specs[name] === undefined) {
      version = eq < 0 || ["1", "t", "true"].includes(body.slice(eq + 1));
      continue;
    }
    const spec = specs[name];
    if (spec === undefined)
      throw new FlagError(`flag provided but not defined: -${name}`);
    let value: string;
    if (eq >= 0) value = body.slice(eq + 1);
    else if (spec.kind === "bool") value = "true";
    else {
      const next = argv[i + 1];
      if (next === undefined)
        throw new FlagError(`flag needs an argument: -${name}`);
      value = next;
      i++;
    }
    if (spec.kind === "bool") {
      const lowered = value.toLowerCase();
      if (!["1", "t", "true", "0", "f", "false"].includes(lowered)) {
        throw new FlagError(`invalid boolean value "${value}" for -${name}`);
      }
      value = ["1", "t", "true"].includes(lowered) ? "true" : "false";
    }
    if (spec.repeatable === true) {
      const list = lists.get(name) ?? [];
      list.push(value);
      lists.set(name, list);
    }
    values.set(name, value);
  }
  return { values, lists, help, version, rest: argv.slice(i) };
}

/** Formats the flag list for `-h`, one flag per two lines as Go's `flag.PrintDefaults`. */
export function flagUsage(specs: Readonly<Record<string, FlagSpec>>): string {
  return Object.entries(specs)
    .map(([name, spec]) => {
      const type = spec.kind === "string" ? " string" : "";
      const def =
        spec.default !== undefined && spec.default !== ""
          ? ` (default "${spec.default}")`
          : "";
      return `  -${name}${type}\n    \t${spec.help}${def}`;
    })
    .join("\n");
}

/**
 * Returns whether the module at `moduleUrl` (its `import.meta.url`) is the script Node was
 * started with, following symlinks.
 */
export function isMain(moduleUrl: string): boolean {
  const script = process.argv[1];
  if (script === undefined) return false;
  try {
    return realpathSync(script) === fileURLToPath(moduleUrl);
  } catch {
    // The script path vanished or is not a file: then this module is not it.
    return false;
  }
}
