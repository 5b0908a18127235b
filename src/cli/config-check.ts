import { readdirSync, readFileSync, realpathSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { loadConfig, type ConfigFile } from "../config/load-config.js";
import { createStatsManager } from "../stats/stats-manager.js";
import {
  FlagError,
  flagUsage,
  parseGoFlags,
  type FlagSpec,
} from "./go-flags.js";

const flags = {
  config_dir: {
    kind: "string",
    default: "",
    help: "path to directory containing rate limit configs",
  },
  merge_domain_configs: {
    kind: "bool",
    help: "whether to merge configurations, referencing the same domain",
  },
} as const satisfies Record<string, FlagSpec>;

const usage = `usage of ratelimit-config-check:\n${flagUsage(flags)}`;

/**
 * Runs the offline config check (upstream `config_check_cmd`): reads every entry of
 * `-config_dir` in name order, whatever its extension, and loads them together as the service
 * would (`-merge_domain_configs` as `MERGE_DOMAIN_CONFIG`). Config names in messages are the
 * file paths.
 *
 * Output lines, as the reference prints them: `checking rate limit configs...`,
 * `loading config directory: <dir>`, one `opening config file: <dir>/<file>` per entry, then
 * `all rate limit configs ok`, or one of `error opening directory <dir>: <err>`,
 * `error reading file <path>: <err>`, `error loading rate limit configs: <message>`. Unlike
 * the reference, YAML and key errors are reported the same way as other config errors
 * instead of panicking.
 *
 * @param argv - arguments after the program name, Go `flag` syntax (`-config_dir DIR`,
 * `--config_dir=DIR`, `-merge_domain_configs`)
 * @param out - receives each output line (without newline)
 * @param err - receives flag errors and their usage text; `-h` usage goes to `out`
 * @returns the exit code: 0 when every config is valid, 1 when a directory, file or config is
 * bad, 2 for bad flags
 */
export function runConfigCheck(
  argv: readonly string[],
  out: (line: string) => void,
  err: (line: string) => void = out,
): number {
  let parsed;
  try {
    parsed = parseGoFlags(argv, flags);
  } catch (e) {
    if (!(e instanceof FlagError)) throw e;
    err(e.message);
    err(usage);
    return 2;
  }
  if (parsed.help) {
    out(usage);
    return 0;
  }
  const dir = parsed.values.get("config_dir") ?? "";
  const mergeDomainConfig =
    parsed.values.get("merge_domain_configs") === "true";

  out("checking rate limit configs...");
  out(`loading config directory: ${dir}`);
  let names: string[];
  try {
    names = readdirSync(dir).sort(compareBytes);
  } catch (e) {
    out(`error opening directory ${dir}: ${messageOf(e)}`);
    return 1;
  }
  const files: ConfigFile[] = [];
  for (const name of names) {
    const path = join(dir, name);
    out(`opening config file: ${path}`);
    try {
      files.push({ name: path, text: readFileSync(path, "utf8") });
    } catch (e) {
      out(`error reading file ${path}: ${messageOf(e)}`);
      return 1;
    }
  }
  try {
    loadConfig(files, {
      statsManager: createStatsManager(),
      mergeDomainConfig,
    });
  } catch (e) {
    // Any failure, including one that is not a ConfigError, means the configs are not usable.
    out(`error loading rate limit configs: ${messageOf(e)}`);
    return 1;
  }
  out("all rate limit configs ok");
  return 0;
}

/** Orders names by their UTF-8 bytes, as Go's `os.ReadDir` does. */
function compareBytes(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a), Buffer.from(b));
}

function messageOf(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

function isMainModule(): boolean {
  const script = process.argv[1];
  if (script === undefined) return false;
  try {
    return import.meta.url === pathToFileURL(realpathSync(script)).href;
  } catch {
    // The script path does not exist (e.g. `node -e`): this module was imported.
    return false;
  }
}

if (isMainModule()) {
  const log = (line: string): void => {
    process.stdout.write(`${line}\n`);
  };
  const logError = (line: string): void => {
    process.stderr.write(`${line}\n`);
  };
  process.exit(runConfigCheck(process.argv.slice(2), log, logError));
}
