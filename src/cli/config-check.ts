import { readdirSync, readFileSync, realpathSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { create } from "@bufbuild/protobuf";
import { explainLimit } from "../explain/descriptor-explanation.js";
import { explainConfig } from "../explain/explain-message.js";
import { ConfigError } from "../config/config-error.js";
import { loadConfig, type ConfigFile } from "../config/load-config.js";
import type { RateLimitConfig } from "../config/rate-limit-config.js";
import {
  ExplainResponseSchema,
  RateLimitRequestSchema,
  type RateLimitRequest,
} from "../proto.js";
import {
  legacyNameWarnings,
  type LegacyEnv,
} from "../settings/legacy-names.js";
import { createStatsManager } from "../stats/stats-manager.js";
import { versionLine } from "../util/version.js";
import { formatExplanation } from "./explain-format.js";
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
  explain: {
    kind: "string",
    default: "",
    help: "after a successful check, explain a request offline: 'domain:k1=v1,k2=v2' (';' between descriptors); match path and rule, no counters",
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
 * `error reading file <path>: <err>`, `error loading rate limit configs: <message>` (the
 * reference's message, then the hint and location of `ConfigError.detail`). Unlike
 * the reference, YAML and key errors are reported the same way as other config errors
 * instead of panicking.
 *
 * @param argv - arguments after the program name, Go `flag` syntax (`-config_dir DIR`,
 * `--config_dir=DIR`, `-merge_domain_configs`); `-version` prints the version; a non-flag
 * argument is refused as a bad flag
 * @param out - receives each output line (without newline)
 * @param err - receives flag errors and their usage text, and one `warning: <text>` line per
 * Go reference variable name set in `env` (`legacyNameWarnings`: not read by the service,
 * with the variable to set instead), before the check; `-h` usage goes to `out`
 * @param env - the environment to look for the reference's variable names in (names only;
 * values are never read); the command passes `process.env`
 * With `-explain 'domain:k1=v1,k2=v2'`, a successful check is followed by the offline
 * explanation of that request (match path and rule, as the Explain API gives them; no
 * counters).
 *
 * @returns the exit code: 0 when every config is valid, 1 when a directory, file or config is
 * bad, 2 for bad flags
 */
export function runConfigCheck(
  argv: readonly string[],
  out: (line: string) => void,
  err: (line: string) => void = out,
  env: LegacyEnv = {},
): number {
  let parsed;
  try {
    parsed = parseGoFlags(argv, flags);
    if (parsed.rest.length > 0)
      throw new FlagError(
        `unexpected argument: ${JSON.stringify(parsed.rest[0])}`,
      );
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
  if (parsed.version) {
    out(versionLine("ratelimit-config-check"));
    return 0;
  }
  for (const warning of legacyNameWarnings(env)) err(`warning: ${warning}`);
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
  let config: RateLimitConfig;
  try {
    config = loadConfig(files, {
      statsManager: createStatsManager(),
      mergeDomainConfig,
    });
  } catch (e) {
    // Any failure, including one that is not a ConfigError, means the configs are not usable.
    // A config error with its hint, line and field path (ConfigError.detail).
    const message = e instanceof ConfigError ? e.detail : messageOf(e);
    out(`error loading rate limit configs: ${message}`);
    return 1;
  }
  out("all rate limit configs ok");
  const explain = parsed.values.get("explain") ?? "";
  if (explain === "") return 0;
  let request: RateLimitRequest;
  try {
    request = parseExplainFlag(explain);
  } catch (e) {
    err(messageOf(e));
    return 2;
  }
  out(explainOffline(config, request));
  return 0;
}

/**
 * Parses `-explain`: `domain:k1=v1,k2=v2`, several descriptors separated by `;`.
 *
 * @throws {@link FlagError} naming the problem
 */
export function parseExplainFlag(text: string): RateLimitRequest {
  const colon = text.indexOf(":");
  if (colon <= 0)
    throw new FlagError(
      `invalid -explain "${text}": expected 'domain:key=value,key=value'`,
    );
  const domain = text.slice(0, colon);
  const descriptors = text
    .slice(colon + 1)
    .split(";")
    .map((part) => {
      const entries = part.split(",").map((pair) => {
        const [key, value, extra] = pair.split("=");
        if (
          key === undefined ||
          key === "" ||
          value === undefined ||
          extra !== undefined
        ) {
          throw new FlagError(
            `invalid -explain "${text}": '${pair}' is not key=value`,
          );
        }
        return { key, value };
      });
      return { entries };
    });
  return create(RateLimitRequestSchema, { domain, descriptors });
}

/** Explains a request against a loaded config, without counters (no backend). */
export function explainOffline(
  config: RateLimitConfig,
  request: RateLimitRequest,
): string {
  const explained = explainConfig(
    (domain, descriptor) =>
      config.view === undefined
        ? {
            domainFound: false,
            path: [],
            limit: undefined,
            source: undefined,
            fromOverride: false,
          }
        : explainLimit(config.view, domain, descriptor),
    request,
  );
  const response = create(ExplainResponseSchema, {
    backend: "none",
    domainFound: explained.domainFound,
    descriptors: explained.descriptors,
    summary: "offline: match path and rule only; counters are not read",
  });
  return formatExplanation(response, request);
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
  process.exit(
    runConfigCheck(process.argv.slice(2), log, logError, process.env),
  );
}
