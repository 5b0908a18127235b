import { dirname, join, resolve, sep } from "node:path";
import { watch, type FSWatcher } from "chokidar";
import type { Logger } from "pino";
import type {
  ConfigUpdate,
  ConfigUpdateListener,
} from "../../config/config-update.js";
import type { ConfigFile } from "../../config/load-config.js";
import type { ConfigProvider } from "../config-provider.js";
import { loadRuntimeFiles } from "./load-runtime-files.js";
import {
  createReloadDebouncer,
  type ReloadDebouncer,
  type ScheduleTimer,
} from "./reload-debouncer.js";
import { ConfigUpdateFanout } from "../config-update-fanout.js";

/** Options of {@link createFileProvider}. Paths may be relative to the working directory. */
export interface FileProviderOptions {
  /**
   * Root of the runtime tree (`RUNTIME_ROOT`). In watch-root mode this is normally a symlink
   * that deployments swap atomically (`ln -s new tmp && mv -T tmp current`).
   * @defaultValue "/srv/runtime_data/current" (in settings)
   */
  readonly runtimeRoot: string;
  /**
   * Directory below the root holding the application directories (`RUNTIME_SUBDIRECTORY`).
   * Empty in watch-root mode means "no runtime": one empty file set is delivered and nothing
   * is watched (the reference's nil loader).
   * @defaultValue "" (in settings)
   */
  readonly runtimeSubdirectory: string;
  /**
   * Application directory holding the YAML files (`RUNTIME_APPDIRECTORY`). In watch-root mode
   * only files whose key starts with `<runtimeAppDirectory>.` are loaded; in directory mode it
   * is the watched directory itself.
   * @defaultValue "config" (in settings)
   */
  readonly runtimeAppDirectory: string;
  /**
   * Skip files and directories whose name starts with `.` when reading
   * (`RUNTIME_IGNOREDOTFILES`); needed for Kubernetes ConfigMap mounts, whose hidden
   * `..<timestamp>` copies would otherwise load every file twice.
   * @defaultValue false (in settings)
   */
  readonly ignoreDotFiles: boolean;
  /**
   * Watch-root mode (`RUNTIME_WATCH_ROOT`): reload only when `runtimeRoot` itself is replaced
   * (symlink swap); edits inside the tree are not seen. When false (directory mode), reload
   * whenever an entry directly inside
   * `runtimeRoot/runtimeSubdirectory/runtimeAppDirectory` is created, written, chmod-ed or
   * removed.
   * @defaultValue true (in settings)
   */
  readonly watchRoot: boolean;
  /**
   * Turns the files of one reload into a config update. The app passes a closure over
   * `loadConfig` that turns a `ConfigError` into `{ ok: false, error }`. If it throws
   * anyway, the provider delivers the error as a failed update.
   */
  readonly load: (files: readonly ConfigFile[]) => ConfigUpdate;
  /** Logger for reloads, skipped files and watch errors. */
  readonly logger: Logger;
  /**
   * Time from the first change of a burst to the reload, in milliseconds; changes within it
   * are coalesced into one reload. At least one reload always follows the last change.
   * @defaultValue 100
   */
  readonly debounceMs?: number;
  /** Timer source for the debounce; tests inject a fake. @defaultValue `setTimeout` */
  readonly schedule?: ScheduleTimer;
}

const defaultDebounceMs = 100;

/**
 * Creates the file-based config provider (upstream `file_provider.go` over goruntime). See
 * {@link FileProviderOptions} for the two watch modes.
 *
 * `start()` starts the watch, then reads every file and delivers the initial update, even
 * when there are no files; each later reload reads and loads all files again. A missing
 * directory is an empty file set, not a crash, and the watch picks the directory up when it
 * appears.
 */
export function createFileProvider(
  options: FileProviderOptions,
): ConfigProvider {
  return new FileProvider(options);
}

/** What to walk, which keys to keep, and what to watch. */
interface Layout {
  /** Directory whose files are read (keys are relative to it). */
  readonly readDir: string;
  /** Keep only keys with this prefix (watch-root mode); "" keeps all. */
  readonly keyPrefix: string;
  /** Absolute path given to the watcher. */
  readonly watchPath: string;
}

/** Runtime-tree watcher delivering {@link ConfigUpdate}s; see {@link createFileProvider}. */
export class FileProvider implements ConfigProvider {
  private readonly options: FileProviderOptions;
  private readonly logger: Logger;
  private readonly fanout: ConfigUpdateFanout;
  /** Undefined when there is no runtime to watch (the reference's nil loader). */
  private readonly layout: Layout | undefined;
  private readonly debouncer: ReloadDebouncer;
  private watcher: FSWatcher | undefined;
  private starting: Promise<void> | undefined;
  private closing: Promise<void> | undefined;
  /** Releases a `start()` waiting for the watcher's initial scan when `close()` comes first. */
  private abortStart: (() => void) | undefined;

  constructor(options: FileProviderOptions) {
    this.options = options;
    this.logger = options.logger;
    this.fanout = new ConfigUpdateFanout(options.logger);
    this.layout = resolveLayout(options);
    this.debouncer = createReloadDebouncer({
      delayMs: options.debounceMs ?? defaultDebounceMs,
      run: () => this.reload(),
      onError: (err) => {
        this.logger.error({ err }, "config reload failed");
      },
      ...(options.schedule !== undefined ? { schedule: options.schedule } : {}),
    });
  }

  subscribe(listener: ConfigUpdateListener): () => void {
    return this.fanout.subscribe(listener);
  }

  start(): Promise<void> {
    this.starting ??= this.startOnce();
    return this.starting;
  }

  close(): Promise<void> {
    this.closing ??= this.closeOnce();
    return this.closing;
  }

  private async startOnce(): Promise<void> {
    if (this.closing !== undefined) return;
    if (this.layout === undefined) {
      this.logger.warn(
        {
          runtimeRoot: this.options.runtimeRoot,
          runtimeSubdirectory: this.options.runtimeSubdirectory,
          runtimeAppDirectory: this.options.runtimeAppDirectory,
        },
        "no runtime configuration, loading an empty config once",
      );
      this.deliver(this.loadSafely([]));
      return;
    }
    await this.startWatching(this.layout);
    await this.debouncer.runNow();
  }

  private async closeOnce(): Promise<void> {
    this.abortStart?.();
    await this.debouncer.close();
    const watcher = this.watcher;
    this.watcher = undefined;
    await watcher?.close();
  }

  /** Starts the watcher and waits for its initial scan, so no change after it is missed. */
  private async startWatching(layout: Layout): Promise<void> {
    const { watchPath } = layout;
    const watchRoot = this.options.watchRoot;
    // Only the watched path, the directories above it (chokidar never filters those; it watches
    // through them while the path is missing) and, in directory mode, its direct children are
    // of interest. Everything below is ignored so nothing is watched recursively.
    const ignored = (path: string): boolean =>
      !(
        path === watchPath ||
        isAncestor(path, watchPath) ||
        (!watchRoot && dirname(path) === watchPath)
      );
    let watcher: FSWatcher;
    try {
      watcher = watch(watchPath, {
        ignoreInitial: true,
        ignored,
        // Watch-root mode observes the root link itself: a swapped target is a `change` of it.
        followSymlinks: !watchRoot,
      });
    } catch (err) {
      this.logger.error(
        { err, path: watchPath },
        "cannot watch config path, reloads are disabled",
      );
      return;
    }
    this.watcher = watcher;
    watcher.on("error", (err) => {
      this.logger.warn({ err, path: watchPath }, "config watch error");
    });
    watcher.on("all", (event, path) => {
      if (this.isReloadEvent(event, path, watchPath)) {
        this.logger.debug({ event, path }, "config change detected");
        this.debouncer.trigger();
      }
    });
    if (!watchRoot) {
      // chokidar drops a `change` whose mtime and size are unchanged, which is what a chmod
      // looks like; the reference reloads on Chmod, so take the native event of the watched
      // directory as well (duplicates of real writes are coalesced by the debounce). The
      // polling backend has no native events: there a chmod alone does not reload.
      watcher.on("raw", (event, name, details) => {
        // A name with a separator comes from a recursive native watch: not a direct child.
        const direct = name === null || !/[\\/]/.test(name);
        if (event === "change" && direct && isWatchedPath(details, watchPath)) {
          this.logger.debug(
            { event: "raw change", path: watchPath },
            "config change detected",
          );
          this.debouncer.trigger();
        }
      });
    }
    await new Promise<void>((resolveReady) => {
      this.abortStart = resolveReady;
      watcher.once("ready", () => {
        resolveReady();
      });
    });
    this.abortStart = undefined;
  }

  private isReloadEvent(
    event: string,
    path: string,
    watchPath: string,
  ): boolean {
    if (this.options.watchRoot) {
      // Same rule as goruntime's symlink refresher: the root itself was created or replaced.
      // Its removal keeps the current config; it reloads when the root comes back.
      return (
        path === watchPath &&
        (event === "add" || event === "addDir" || event === "change")
      );
    }
    // Directory mode: any entry directly in the directory (write, create, chmod, remove), or the
    // directory itself appearing or disappearing (the reference would have crashed instead).
    return path === watchPath || dirname(path) === watchPath;
  }

  /** One reload: read all files, load them, deliver the result. Never throws. */
  private async reload(): Promise<void> {
    const layout = this.layout;
    if (layout === undefined) return;
    const all = await loadRuntimeFiles({
      dir: layout.readDir,
      ignoreDotFiles: this.options.ignoreDotFiles,
      logger: this.logger,
    });
    const files =
      layout.keyPrefix === ""
        ? all
        : all.filter((f) => f.name.startsWith(layout.keyPrefix));
    if (this.closing !== undefined) return;
    this.logger.info(
      { dir: layout.readDir, fileCount: files.length },
      "loading config files",
    );
    this.deliver(this.loadSafely(files));
  }

  private loadSafely(files: readonly ConfigFile[]): ConfigUpdate {
    return this.fanout.loadSafely(this.options.load, files);
  }

  private deliver(update: ConfigUpdate): void {
    this.fanout.deliver(update);
  }
}

/**
 * Maps the options to paths. Same "nil loader" rule as goruntime: no runtime when the
 * directory passed as its root or its subdirectory is empty.
 */
function resolveLayout(options: FileProviderOptions): Layout | undefined {
  const { runtimeRoot, runtimeSubdirectory, runtimeAppDirectory } = options;
  if (options.watchRoot) {
    if (runtimeRoot === "" || runtimeSubdirectory === "") return undefined;
    const watchPath = resolve(runtimeRoot);
    return {
      readDir: join(watchPath, runtimeSubdirectory),
      keyPrefix: `${runtimeAppDirectory}.`,
      watchPath,
    };
  }
  // Directory mode hands goruntime `join(root, subdirectory)` as its root and the app directory
  // as its subdirectory.
  if (
    (runtimeRoot === "" && runtimeSubdirectory === "") ||
    runtimeAppDirectory === ""
  )
    return undefined;
  const dir = resolve(runtimeRoot, runtimeSubdirectory, runtimeAppDirectory);
  return { readDir: dir, keyPrefix: "", watchPath: dir };
}

/** Whether raw-event details name `path` as the watched directory (`{ watchedPath }`). */
function isWatchedPath(details: unknown, path: string): boolean {
  return (
    typeof details === "object" &&
    details !== null &&
    "watchedPath" in details &&
    details.watchedPath === path
  );
}

function isAncestor(path: string, of: string): boolean {
  return of.startsWith(path.endsWith(sep) ? path : path + sep);
}
