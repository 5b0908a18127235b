import { mkdtemp, mkdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Logger } from "pino";
import { silentLogger } from "./silent-logger.js";
import {
  createApp,
  type App,
  type AppAddresses,
  type AppDependencies,
} from "../../src/app/create-app.js";
import { loadSettings } from "../../src/settings/settings.js";

/** A running in-process service with its config directory. */
export interface TestApp {
  readonly app: App;
  readonly addresses: AppAddresses;
  /** Directory holding the YAML files (directory-mode watch). */
  readonly configDir: string;
  /** Writes (or replaces) one config file. */
  writeConfig(name: string, text: string): Promise<void>;
  stop(): Promise<void>;
}

/**
 * Starts the whole service in this process on loopback with free ports, the memory backend,
 * and `files` as its config (directory mode, so in-place edits reload).
 */
export async function startTestApp(
  files: Record<string, string>,
  env: Record<string, string> = {},
  logger: Logger = silentLogger(),
  deps: Omit<AppDependencies, "logger"> = {},
): Promise<TestApp> {
  const root = await mkdtemp(join(tmpdir(), "rls-app-"));
  const configDir = join(root, "config");
  await mkdir(configDir);
  for (const [name, text] of Object.entries(files))
    await writeFile(join(configDir, name), text);
  const { settings } = loadSettings({
    BACKEND_TYPE: "memory",
    HOST: "127.0.0.1",
    PORT: "0",
    GRPC_HOST: "127.0.0.1",
    GRPC_PORT: "0",
    DEBUG_HOST: "127.0.0.1",
    DEBUG_PORT: "0",
    RUNTIME_ROOT: root,
    RUNTIME_SUBDIRECTORY: "",
    RUNTIME_APPDIRECTORY: "config",
    RUNTIME_WATCH_ROOT: "false",
    USE_PUSHSTATS: "false",
    // Counters still count in process (debug /stats); nothing is printed or sent.
    DISABLE_STATS: "true",
    ...env,
  });
  const app = await createApp(settings, { logger, ...deps });
  const addresses = await app.start();
  return {
    app,
    addresses,
    configDir,
    writeConfig: (name, text) => writeFile(join(configDir, name), text),
    async stop() {
      await app.close();
      await rm(root, { recursive: true, force: true });
    },
  };
}
