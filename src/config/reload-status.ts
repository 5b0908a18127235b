// The state of config loading that operators see: when the config in force was loaded and the
// last failed load, for `/healthcheck`, `/rlconfig?format=json` and the web console. The shape
// is the JSON the debug server answers (docs/configuration.md#errors), hence `null`s.

import type { ConfigError } from "./config-error.js";

/** The most recent failed load or reload; cleared by the next successful one. */
export interface FailedReload {
  /** Config name (file runtime key or path, xDS resource name); null when unknown. */
  readonly file: string | null;
  /** 1-based line in `file`; null for xDS and whole-file problems. */
  readonly line: number | null;
  /** Field path, e.g. `descriptors[0].rate_limit.unit`; null for whole-file problems. */
  readonly fieldPath: string | null;
  /** The problem with its hint, without the file (`ConfigError.problem`). */
  readonly message: string;
  /** When the load failed, RFC 3339 (UTC, milliseconds). */
  readonly time: string;
}

/** Config loading as seen from outside: what loaded when, and what failed last. */
export interface ConfigReloadStatus {
  /** RFC 3339 time of the last successful load; null before the first. */
  readonly loadedAt: string | null;
  /** The last failed load if no load succeeded since; else null. */
  readonly lastFailedReload: FailedReload | null;
}

/** Describes a failed load at `timeMs` (milliseconds since the Unix epoch). */
export function toFailedReload(
  error: ConfigError,
  timeMs: number,
): FailedReload {
  return Object.freeze({
    file: error.file ?? null,
    line: error.line ?? null,
    fieldPath: error.fieldPath ?? null,
    message: error.problem,
    time: toRfc3339(timeMs),
  });
}

/** Formats milliseconds since the Unix epoch as RFC 3339 in UTC (`2026-01-02T03:04:05.678Z`). */
export function toRfc3339(timeMs: number): string {
  return new Date(timeMs).toISOString();
}

/**
 * The `/healthcheck` line of a failed reload:
 * `last config reload failed at <time>: <file>:<line>: <message>`, leaving out the parts that
 * are null (`<file>: ` without a line, nothing without a file).
 */
export function failedReloadLine(failed: FailedReload): string {
  let where = "";
  if (failed.file !== null) {
    where =
      failed.line === null
        ? `${failed.file}: `
        : `${failed.file}:${failed.line}: `;
  }
  return `last config reload failed at ${failed.time}: ${where}${failed.message}`;
}
