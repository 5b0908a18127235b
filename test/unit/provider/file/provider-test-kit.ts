import {
  mkdir,
  mkdtemp,
  rename,
  rm,
  symlink,
  writeFile,
} from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { pino, type Logger } from "pino";

/** One parsed pino line. */
export interface LogLine {
  readonly level: number;
  readonly msg: string;
  readonly [field: string]: unknown;
}

/** pino's numeric level of `warn`. */
export const warnLevel = 40;

/** A debug-level pino logger that keeps its lines in memory. */
export function captureLogger(): { logger: Logger; lines: LogLine[] } {
  const lines: LogLine[] = [];
  const logger = pino(
    { level: "debug" },
    {
      write(line: string) {
        lines.push(JSON.parse(line) as LogLine);
      },
    },
  );
  return { logger, lines };
}

/** Creates a fresh temp directory; remove it with {@link removeTempDir}. */
export function makeTempDir(): Promise<string> {
  return mkdtemp(join(tmpdir(), "rls-file-provider-"));
}

/** Removes a temp directory made by {@link makeTempDir}. */
export function removeTempDir(dir: string): Promise<void> {
  return rm(dir, { recursive: true, force: true });
}

/** Writes files given by relative path (`sub/x.yaml`), creating directories as needed. */
export async function writeTree(
  dir: string,
  files: Readonly<Record<string, string>>,
): Promise<void> {
  for (const [path, text] of Object.entries(files)) {
    const full = join(dir, path);
    await mkdir(dirname(full), { recursive: true });
    await writeFile(full, text);
  }
}

/**
 * Points the symlink `link` at `target` atomically, the way deployments swap the runtime root:
 * `ln -s target tmp && mv -T tmp link` (rename(2) replaces the old link in one step).
 */
export async function swapSymlink(target: string, link: string): Promise<void> {
  const tmp = `${link}.tmp-${String(process.pid)}`;
  await symlink(target, tmp);
  await rename(tmp, link);
}

/**
 * Waits long enough for a change that should NOT reload to have been noticed if it were going
 * to be (watch latency plus several debounce windows). Used before a negative check only.
 */
export function settle(debounceMs: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, debounceMs * 3 + 400));
}
