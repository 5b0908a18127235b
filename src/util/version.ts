import { readFileSync } from "node:fs";

// The one version of the project is `version` in package.json: `--version` of the service,
// `ratelimit-client` and `ratelimit-config-check` reads it here, at run time, so a release
// changes one line. package.json sits two folders above this code in the esbuild bundle
// (dist/bundle/*.js, also in an installed package) and under vitest (src/util/), three above
// in the compiled tree (dist/src/util/); the name check skips any other package.json.

/** Name of the package whose package.json holds the version. */
const packageName = "ratelimit-ts";

const candidates = [
  "../../package.json", // dist/bundle/*.js; src/util/version.ts under vitest
  "../../../package.json", // dist/src/util/version.js
];

let cached: string | undefined;

/**
 * Returns the project's semver version (`version` of package.json, e.g. `0.1.0`), read once
 * from the package.json of the `ratelimit-ts` package this code belongs to.
 *
 * @throws {@link Error} when no such package.json is found next to the code (a broken install)
 */
export function projectVersion(): string {
  if (cached !== undefined) return cached;
  for (const relative of candidates) {
    let text: string;
    try {
      text = readFileSync(new URL(relative, import.meta.url), "utf8");
    } catch {
      // Not this layout: try the next candidate.
      continue;
    }
    const parsed = JSON.parse(text) as { name?: unknown; version?: unknown };
    if (parsed.name === packageName && typeof parsed.version === "string") {
      cached = parsed.version;
      return cached;
    }
  }
  throw new Error(
    `cannot find the ${packageName} package.json next to ${import.meta.url}`,
  );
}

/** Returns the `--version` line of a command: `<command> <version>`, e.g. `ratelimit 0.1.0`. */
export function versionLine(command: string): string {
  return `${command} ${projectVersion()}`;
}
