import type { Dirent } from "node:fs";
import { readdir, readFile, realpath, stat } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "pino";
import type { ConfigFile } from "../../config/load-config.js";

/** Options of {@link loadRuntimeFiles}. */
export interface LoadRuntimeFilesOptions {
  /** Directory to walk; followed when it is a symlink. */
  readonly dir: string;
  /** Skip files and directories whose name starts with `.` (`RUNTIME_IGNOREDOTFILES`). */
  readonly ignoreDotFiles: boolean;
  /** Receives one line per skipped file or unreadable directory. */
  readonly logger: Logger;
}

/**
 * Reads every regular file below a directory, whatever its extension, and names it by its
 * runtime key: the path relative to `dir` with `/` replaced by `.` (`sub/x.yaml` →
 * `sub.x.yaml`), as goruntime's snapshot does.
 *
 * Symlinked files are followed; symlinked directories inside the tree are not descended
 * (the reference's walk does not follow them either). A file that cannot be read is logged
 * and skipped, not an error. A missing or unreadable `dir` yields no files: the reference
 * treats a missing `RUNTIME_ROOT` the same way.
 *
 * @returns the files sorted by name (the reference's order is random)
 */
export async function loadRuntimeFiles(
  options: LoadRuntimeFilesOptions,
): Promise<ConfigFile[]> {
  const { dir, logger } = options;
  let realDir: string;
  try {
    realDir = await realpath(dir);
    if (!(await stat(realDir)).isDirectory()) {
      logger.warn({ dir }, "config path is not a directory");
      return [];
    }
  } catch (err) {
    if (errorCode(err) === "ENOENT")
      logger.warn({ dir }, "config directory does not exist");
    else logger.warn({ dir, err }, "cannot open config directory");
    return [];
  }
  const files: ConfigFile[] = [];
  await walk(realDir, "", options, files);
  return files.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

async function walk(
  dir: string,
  keyPrefix: string,
  options: LoadRuntimeFilesOptions,
  files: ConfigFile[],
): Promise<void> {
  const { logger } = options;
  let entries: Dirent[];
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch (err) {
    logger.warn({ dir, err }, "cannot read config directory");
    return;
  }
  for (const entry of entries) {
    if (options.ignoreDotFiles && entry.name.startsWith(".")) continue;
    const path = join(dir, entry.name);
    const key = keyPrefix + entry.name;
    if (entry.isDirectory()) {
      await walk(path, `${key}.`, options, files);
      continue;
    }
    if (!entry.isFile() && !entry.isSymbolicLink()) {
      // FIFOs, sockets and devices: reading a FIFO would block the reload forever.
      logger.warn(
        { file: path },
        "skipping config entry that is not a regular file",
      );
      continue;
    }
    try {
      if (entry.isSymbolicLink() && !(await stat(path)).isFile()) {
        logger.warn(
          { file: path },
          "skipping symlink that does not point to a regular file",
        );
        continue;
      }
      files.push({ name: key, text: await readFile(path, "utf8") });
    } catch (err) {
      logger.warn({ file: path, err }, "cannot read config file");
    }
  }
}

function errorCode(err: unknown): string | undefined {
  if (err instanceof Error && "code" in err && typeof err.code === "string")
    return err.code;
  return undefined;
}
