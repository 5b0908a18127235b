import { readdirSync, readFileSync, realpathSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { create, toJsonString } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import {
  Code,
  ConnectError,
  createClient,
  type Client,
} from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { explainLimit } from "../explain/descriptor-explanation.js";
import { explainConfig } from "../explain/explain-message.js";
import { ConfigError } from "../config/config-error.js";
import { loadConfig, type ConfigFile } from "../config/load-config.js";
import type { RateLimitConfig } from "../config/rate-limit-config.js";
import {
  AdminService,
  ExplainResponseSchema,
  GetCanaryReportResponseSchema,
  RateLimitRequestSchema,
  type RateLimitRequest,
} from "../proto.js";
import {
  legacyNameWarnings,
  type LegacyEnv,
} from "../settings/legacy-names.js";
import { createStatsManager } from "../stats/stats-manager.js";
import { versionLine } from "../util/version.js";
import { formatCanaryReport } from "./canary-format.js";
import { formatExplanation } from "./explain-format.js";
import {
  FlagError,
  flagUsage,
  parseGoFlags,
  type FlagSpec,
  type ParsedFlags,
} from "./go-flags.js";

const checkFlags = {
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

const flags = {
  ...checkFlags,
  canary: {
    kind: "string",
    default: "",
    help: "after a successful check, start a config canary with the checked files on the running service whose debug port is at this host:port: it evaluates every request against them too (no effect on answers) and reports what they would refuse or admit differently (docs/operations.md#config-canary)",
  },
  "canary-report": {
    kind: "bool",
    help: "with -canary: print the running canary's report (no -config_dir needed)",
  },
  "canary-stop": {
    kind: "bool",
    help: "with -canary: stop the running canary and print its last report",
  },
  json: {
    kind: "bool",
    help: "with -canary: print the service's answer as proto3 JSON",
  },
} as const satisfies Record<string, FlagSpec>;

const checkUsage = `usage of ratelimit-config-check:\n${flagUsage(checkFlags)}`;
const usage = `usage of ratelimit-config-check:\n${flagUsage(flags)}`;

/**
 * Parses the command's flags, refusing positional arguments; on a bad flag writes its message
 * and the usage to `err` and returns undefined (the caller exits 2).
 */
function parseFlagsOrReport(
  argv: readonly string[],
  spec: Readonly<Record<string, FlagSpec>>,
  usageText: string,
  err: (line: string) => void,
): ParsedFlags | undefined {
  try {
    const parsed = parseGoFlags(argv, spec);
    if (parsed.rest.length > 0)
      throw new FlagError(
        `unexpected argument: ${JSON.stringify(parsed.rest[0])}`,
      );
    return parsed;
  } catch (e) {
    if (!(e instanceof FlagError)) throw e;
    err(e.message);
    err(usageText);
    return undefined;
  }
}

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
 * bad, 2 for bad flags (the canary flags among them: they belong to
 * {@link runConfigCheckCommand}, which the command runs)
 */
export function runConfigCheck(
  argv: readonly string[],
  out: (line: string) => void,
  err: (line: string) => void = out,
  env: LegacyEnv = {},
): number {
  const parsed = parseFlagsOrReport(argv, checkFlags, checkUsage, err);
  if (parsed === undefined) return 2;
  if (parsed.help) {
    out(checkUsage);
    return 0;
  }
  if (parsed.version) {
    out(versionLine("ratelimit-config-check"));
    return 0;
  }
  for (const warning of legacyNameWarnings(env)) err(`warning: ${warning}`);
  const checked = checkDirectory(
    parsed.values.get("config_dir") ?? "",
    parsed.values.get("merge_domain_configs") === "true",
    out,
  );
  if (checked === undefined) return 1;
  return explainAfterCheck(
    checked.config,
    parsed.values.get("explain") ?? "",
    out,
    err,
  );
}

/** The files of a checked directory, by their names in it, and the config they load into. */
interface CheckedDirectory {
  readonly files: readonly { readonly name: string; readonly text: string }[];
  readonly config: RateLimitConfig;
}

/**
 * Reads and loads a config directory as {@link runConfigCheck} describes, printing its lines.
 *
 * @returns undefined when the directory, a file or the config is bad (the error is printed)
 */
function checkDirectory(
  dir: string,
  mergeDomainConfig: boolean,
  out: (line: string) => void,
): CheckedDirectory | undefined {
  out("checking rate limit configs...");
  out(`loading config directory: ${dir}`);
  let names: string[];
  try {
    names = readdirSync(dir).sort(compareBytes);
  } catch (e) {
    out(`error opening directory ${dir}: ${messageOf(e)}`);
    return undefined;
  }
  const files: ConfigFile[] = [];
  const byName: { name: string; text: string }[] = [];
  for (const name of names) {
    const path = join(dir, name);
    out(`opening config file: ${path}`);
    try {
      const text = readFileSync(path, "utf8");
      files.push({ name: path, text });
      byName.push({ name, text });
    } catch (e) {
      out(`error reading file ${path}: ${messageOf(e)}`);
      return undefined;
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
    return undefined;
  }
  out("all rate limit configs ok");
  return { files: byName, config };
}

/** Prints the offline explanation of `-explain` after a good check; the exit code. */
function explainAfterCheck(
  config: RateLimitConfig,
  explain: string,
  out: (line: string) => void,
  err: (line: string) => void,
): number {
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

/** Options of {@link runConfigCheckCommand}. */
export interface ConfigCheckCommandOptions {
  /**
   * How long one call to the service's admin API may take, in milliseconds.
   * @defaultValue 10000
   */
  readonly timeoutMs?: number;
}

/**
 * The `ratelimit-config-check` command: {@link runConfigCheck}, plus the config canary of a
 * running service (docs/operations.md#config-canary) through its admin API on the debug port
 * (Connect over HTTP/1.1):
 *
 * - `-canary <host:port> -config_dir DIR`: checks the directory as {@link runConfigCheck}
 *   does; when it is good, sends its files (named as in the directory) inline with
 *   `StartCanary` and prints `config canary started on <address> at <time>: domains <list>`
 *   (a running canary is replaced);
 * - `-canary <host:port> -canary-report`: prints the running (or last) canary's report
 *   ({@link formatCanaryReport});
 * - `-canary <host:port> -canary-stop`: stops the canary and prints its last report;
 * - `-json`: the service's answer as proto3 JSON instead.
 *
 * An error from the service prints `error from the config canary at <address>: <code>:
 * <message>` (for a candidate the service cannot load, the loader's text with file, line and
 * field).
 *
 * @returns the exit code: as {@link runConfigCheck}; 1 when the service answers an error or
 *   cannot be reached; 2 for `-canary-report` or `-canary-stop` without `-canary`
 */
export async function runConfigCheckCommand(
  argv: readonly string[],
  out: (line: string) => void,
  err: (line: string) => void = out,
  env: LegacyEnv = {},
  options: ConfigCheckCommandOptions = {},
): Promise<number> {
  const parsed = parseFlagsOrReport(argv, flags, usage, err);
  if (parsed === undefined) return 2;
  if (parsed.help) {
    out(usage);
    return 0;
  }
  const address = parsed.values.get("canary") ?? "";
  const report = parsed.values.get("canary-report") === "true";
  const stop = parsed.values.get("canary-stop") === "true";
  const json = parsed.values.get("json") === "true";
  if (address === "") {
    if (report || stop || json) {
      err(
        `flag -${report ? "canary-report" : stop ? "canary-stop" : "json"} needs -canary <debug host:port>`,
      );
      err(usage);
      return 2;
    }
    return runConfigCheck(argv, out, err, env);
  }
  if (parsed.version) {
    out(versionLine("ratelimit-config-check"));
    return 0;
  }
  const client = createClient(
    AdminService,
    createConnectTransport({
      baseUrl: `http://${address}`,
      httpVersion: "1.1",
      defaultTimeoutMs: options.timeoutMs ?? 10_000,
    }),
  );
  try {
    if (report || stop) {
      const answer = stop
        ? ((await client.stopCanary({})).report ??
          create(GetCanaryReportResponseSchema))
        : await client.getCanaryReport({});
      if (json) out(toJsonString(GetCanaryReportResponseSchema, answer));
      else for (const line of formatCanaryReport(answer, address)) out(line);
      return 0;
    }
    for (const warning of legacyNameWarnings(env)) err(`warning: ${warning}`);
    const checked = checkDirectory(
      parsed.values.get("config_dir") ?? "",
      parsed.values.get("merge_domain_configs") === "true",
      out,
    );
    if (checked === undefined) return 1;
    const explained = explainAfterCheck(
      checked.config,
      parsed.values.get("explain") ?? "",
      out,
      err,
    );
    if (explained !== 0) return explained;
    return await startCanary(client, address, checked, json, out);
  } catch (e) {
    if (!(e instanceof ConnectError)) throw e;
    out(
      `error from the config canary at ${address}: ${codeName(e)}: ${e.rawMessage}`,
    );
    return 1;
  }
}

async function startCanary(
  client: Client<typeof AdminService>,
  address: string,
  checked: CheckedDirectory,
  json: boolean,
  out: (line: string) => void,
): Promise<number> {
  const started = await client.startCanary({
    files: checked.files.map((f) => ({ name: f.name, content: f.text })),
  });
  if (json) {
    out(
      JSON.stringify({
        startTime:
          started.startTime === undefined
            ? undefined
            : timestampDate(started.startTime).toISOString(),
        domains: started.domains,
      }),
    );
    return 0;
  }
  const at =
    started.startTime === undefined
      ? ""
      : ` at ${timestampDate(started.startTime).toISOString()}`;
  out(
    `config canary started on ${address}${at}: domains ${started.domains.join(", ")}`,
  );
  out(`report: ratelimit-config-check -canary ${address} -canary-report`);
  return 0;
}

/** The RPC code's name, as gRPC spells it (`INVALID_ARGUMENT`). */
function codeName(e: ConnectError): string {
  return Code[e.code].replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
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
  void runConfigCheckCommand(
    process.argv.slice(2),
    log,
    logError,
    process.env,
  ).then((code) => process.exit(code));
}
