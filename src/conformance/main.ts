// `ratelimit-conformance`: the entry point. Parses the command line, runs the chosen sections
// against a launched or a running server, prints the tables and failures, writes `--json`,
// and exits 1 when a scenario failed (2 on a usage or set-up error).
import { writeFile } from "node:fs/promises";
import { readFileSync, realpathSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Section } from "./model.js";
import {
  parseConformanceArgs,
  usage,
  UsageError,
  type ConformanceOptions,
} from "./options.js";
import { buildReport, jsonReport, textReport } from "./report.js";
import { runSections, slug } from "./runner.js";
import { allSections } from "./scenarios/index.js";
import {
  LaunchProvider,
  RunningProvider,
  type TargetProvider,
} from "./targets.js";

/** Sections picked by `--only` (names or slugs; all when empty). */
export function selectSections(
  sections: readonly Section[],
  only: readonly string[],
): Section[] {
  if (only.length === 0) return [...sections];
  const wanted = new Set(only.map(slug));
  const picked = sections.filter((s) => wanted.has(slug(s.name)));
  const known = new Set(sections.map((s) => slug(s.name)));
  const unknown = [...wanted].filter((w) => !known.has(w));
  if (unknown.length > 0)
    throw new UsageError(
      `--only: no section ${unknown.join(", ")} (see --list)`,
    );
  return picked;
}

function listing(sections: readonly Section[]): string {
  return sections
    .map(
      (s) =>
        `${slug(s.name)}${s.beyondSpec === true ? " (beyond the spec)" : ""}: ${s.name}\n` +
        s.scenarios.map((c) => `  ${c.id}  ${c.title} [${c.spec}]`).join("\n"),
    )
    .join("\n");
}

function providerFor(
  options: ConformanceOptions,
  token: string,
): TargetProvider {
  const probe = { token, reloadTimeoutMs: options.reloadTimeoutMs };
  const mode = options.mode;
  if (mode.kind === "running")
    return new RunningProvider(mode.grpc, mode.http, mode.configDir, probe);
  const env: Record<string, string> = {};
  for (const name of [
    "PATH",
    "HOME",
    "TMPDIR",
    "XDG_CACHE_HOME",
    "GOPATH",
    "GOCACHE",
    "GOFLAGS",
    "GOMODCACHE",
    "GOPROXY",
  ]) {
    const value = process.env[name];
    if (value !== undefined) env[name] = value;
  }
  return new LaunchProvider(
    mode.command,
    mode.flavour,
    mode.backend,
    probe,
    env,
  );
}

/**
 * Runs the command with `argv` (without `node` and the script) and resolves with the exit
 * status.
 */
export async function main(argv: readonly string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseConformanceArgs(argv);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(`ratelimit-conformance: ${error.message}\n\n${usage}`);
    return 2;
  }
  if (parsed.kind === "help") {
    process.stdout.write(usage);
    return 0;
  }
  if (parsed.kind === "version") {
    process.stdout.write(`ratelimit-conformance ${packageVersion()}\n`);
    return 0;
  }
  if (parsed.kind === "list") {
    process.stdout.write(`${listing(allSections)}\n`);
    return 0;
  }
  const options = parsed.options;
  let sections: Section[];
  try {
    sections = selectSections(allSections, options.only);
  } catch (error) {
    process.stderr.write(
      `ratelimit-conformance: ${error instanceof Error ? error.message : String(error)}\n`,
    );
    return 2;
  }
  const token = `cf${Date.now().toString(36)}${Math.floor(Math.random() * 1296).toString(36)}`;
  const provider = providerFor(options, token);
  const scenarios = sections.reduce((n, s) => n + s.scenarios.length, 0);
  process.stdout.write(
    `ratelimit-conformance: ${scenarios} scenarios in ${sections.length} sections; ${provider.description}; --seed ${options.seed}\n`,
  );
  let outcomes;
  const started = Date.now();
  try {
    outcomes = await runSections(sections, provider, {
      seed: options.seed,
      token,
      concurrency: options.concurrency,
      parallelSessions: options.parallel,
      ...(options.mode.kind === "launch"
        ? { backend: options.mode.backend }
        : {}),
      onSection: (section, results) => {
        const failed = results.filter((r) => r.status === "failed").length;
        process.stderr.write(
          `  ${section.name}: ${results.length - failed} done${failed > 0 ? `, ${failed} failed` : ""} (${((Date.now() - started) / 1000).toFixed(1)} s)\n`,
        );
      },
    });
  } catch (error) {
    process.stderr.write(`ratelimit-conformance: ${String(error)}\n`);
    return 2;
  } finally {
    await provider.close();
  }
  const report = buildReport(outcomes);
  process.stdout.write(`\n${textReport(report)}`);
  if (options.json !== undefined)
    await writeFile(options.json, jsonReport(report));
  return report.failed > 0 ? 1 : 0;
}

/** The version in the package.json above this file (source checkout or installed bundle). */
function packageVersion(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 6; i++) {
    try {
      const found = JSON.parse(
        readFileSync(join(dir, "package.json"), "utf8"),
      ) as { name?: unknown; version?: unknown };
      if (found.name === "ratelimit-ts" && typeof found.version === "string")
        return found.version;
    } catch {
      // Not here: one level up.
    }
    dir = dirname(dir);
  }
  return "unknown";
}

function isMain(): boolean {
  const script = process.argv[1];
  if (script === undefined) return false;
  try {
    return (
      realpathSync(script) === realpathSync(fileURLToPath(import.meta.url))
    );
  } catch {
    return false;
  }
}

if (isMain()) {
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (error: unknown) => {
      process.stderr.write(`ratelimit-conformance: ${String(error)}\n`);
      process.exitCode = 2;
    },
  );
}
