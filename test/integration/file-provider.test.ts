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
import { silentLogger } from "../helpers/silent-logger.js";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ConfigError } from "../../src/config/config-error.js";
import type { ConfigUpdate } from "../../src/config/config-update.js";
import { loadConfig, type ConfigFile } from "../../src/config/load-config.js";
import type { ConfigProvider } from "../../src/provider/config-provider.js";
import {
  createFileProvider,
  type FileProviderOptions,
} from "../../src/provider/file/file-provider.js";
import { createStatsManager } from "../../src/stats/stats-manager.js";
import { waitFor } from "../helpers/wait-for.js";

const domainYaml = (domain: string): string =>
  `domain: ${domain}\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 3\n`;

/** The same load closure the app builds: real loadConfig, ConfigError → failed update. */
function realLoad(files: readonly ConfigFile[]): ConfigUpdate {
  try {
    return {
      ok: true,
      config: loadConfig(files, { statsManager: createStatsManager() }),
    };
  } catch (err) {
    if (err instanceof ConfigError) return { ok: false, error: err };
    throw err;
  }
}

async function writeTree(
  dir: string,
  files: Record<string, string>,
): Promise<void> {
  for (const [path, text] of Object.entries(files)) {
    await mkdir(dirname(join(dir, path)), { recursive: true });
    await writeFile(join(dir, path), text);
  }
}

/** `ln -s target tmp && mv -T tmp link`: rename(2) swaps the link atomically. */
async function swapSymlink(target: string, link: string): Promise<void> {
  await symlink(target, `${link}.tmp`);
  await rename(`${link}.tmp`, link);
}

const domainsOf = (
  update: ConfigUpdate | undefined,
): readonly string[] | undefined =>
  update?.ok === true ? update.config.domains : undefined;

describe("file provider with the real config loader", () => {
  let base: string;
  let provider: ConfigProvider | undefined;
  let updates: ConfigUpdate[];

  beforeEach(async () => {
    base = await mkdtemp(join(tmpdir(), "rls-file-provider-it-"));
    updates = [];
  });
  afterEach(async () => {
    await provider?.close();
    provider = undefined;
    await rm(base, { recursive: true, force: true });
  });

  async function start(options: Partial<FileProviderOptions>): Promise<void> {
    provider = createFileProvider({
      runtimeRoot: join(base, "current"),
      runtimeSubdirectory: "ratelimit",
      runtimeAppDirectory: "config",
      ignoreDotFiles: false,
      watchRoot: true,
      load: realLoad,
      logger: silentLogger(),
      ...options,
    });
    provider.subscribe((update) => updates.push(update));
    await provider.start();
  }

  it("loads a new config after an atomic symlink swap and reports a bad one", async () => {
    await writeTree(join(base, "v1"), {
      "ratelimit/config/one.yaml": domainYaml("one"),
    });
    await symlink(join(base, "v1"), join(base, "current"));
    await start({});
    expect(domainsOf(updates[0])).toEqual(["one"]);

    await writeTree(join(base, "v2"), {
      "ratelimit/config/one.yaml": domainYaml("one"),
      "ratelimit/config/nested/two.yaml": domainYaml("two"),
    });
    await swapSymlink(join(base, "v2"), join(base, "current"));
    await waitFor(
      () => domainsOf(updates.at(-1))?.join() === "one,two",
      "config of v2",
    );

    await writeTree(join(base, "v3"), {
      "ratelimit/config/bad.yaml": domainYaml("x").replace(
        "unit: minute",
        "unit: fortnight",
      ),
    });
    await swapSymlink(join(base, "v3"), join(base, "current"));
    const failed = await waitFor(() => {
      const last = updates.at(-1);
      return last?.ok === false ? last : undefined;
    }, "failed update for v3");
    expect(failed.error).toBeInstanceOf(ConfigError);
    expect(failed.error.message).toMatch(/^config\.bad\.yaml: /);
  });

  it("reloads in directory mode after an in-place edit", async () => {
    const configDir = join(base, "runtime", "config");
    await writeTree(configDir, { "a.yaml": domainYaml("one") });
    await start({
      runtimeRoot: join(base, "runtime"),
      runtimeSubdirectory: "",
      watchRoot: false,
    });
    expect(domainsOf(updates[0])).toEqual(["one"]);
    await writeFile(join(configDir, "a.yaml"), domainYaml("renamed"));
    await waitFor(
      () => domainsOf(updates.at(-1))?.join() === "renamed",
      "config after the edit",
    );
  });
});
