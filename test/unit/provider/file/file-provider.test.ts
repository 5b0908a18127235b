import { chmod, mkdir, rename, rm, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ConfigError } from "../../../../src/config/config-error.js";
import type { ConfigUpdate } from "../../../../src/config/config-update.js";
import type { ConfigFile } from "../../../../src/config/load-config.js";
import type { RateLimitConfig } from "../../../../src/config/rate-limit-config.js";
import type { ConfigProvider } from "../../../../src/provider/config-provider.js";
import {
  createFileProvider,
  type FileProviderOptions,
} from "../../../../src/provider/file/file-provider.js";
import { waitFor } from "../../../helpers/wait-for.js";
import {
  captureLogger,
  makeTempDir,
  removeTempDir,
  settle,
  swapSymlink,
  warnLevel,
  writeTree,
  type LogLine,
} from "./provider-test-kit.js";

const debounceMs = 50;

const emptyConfig: RateLimitConfig = {
  getLimit: () => undefined,
  dump: () => "",
  domainCount: 0,
  domains: [],
};

/** A provider over a fake `load` that records the files of every load and every update. */
interface Harness {
  readonly provider: ConfigProvider;
  /** Files of each load, as `name=text` strings, in load order. */
  readonly loads: string[][];
  readonly updates: ConfigUpdate[];
  readonly logs: LogLine[];
  /** Waits until the latest load satisfies `check` (and returns it). */
  waitForLoad(
    check: (files: string[]) => boolean,
    description: string,
  ): Promise<string[]>;
}

describe("createFileProvider", { timeout: 30_000 }, () => {
  let dir: string;
  const providers: ConfigProvider[] = [];

  beforeEach(async () => {
    dir = await makeTempDir();
  });
  afterEach(async () => {
    await Promise.all(providers.splice(0).map((p) => p.close()));
    await removeTempDir(dir);
  });

  function harness(
    options: Partial<FileProviderOptions>,
    load: (files: readonly ConfigFile[]) => ConfigUpdate = () => ({
      ok: true,
      config: emptyConfig,
    }),
  ): Harness {
    const loads: string[][] = [];
    const updates: ConfigUpdate[] = [];
    const { logger, lines } = captureLogger();
    const provider = createFileProvider({
      runtimeRoot: dir,
      runtimeSubdirectory: "",
      runtimeAppDirectory: "config",
      ignoreDotFiles: false,
      watchRoot: false,
      debounceMs,
      logger,
      load: (files) => {
        loads.push(files.map((f) => `${f.name}=${f.text}`));
        return load(files);
      },
      ...options,
    });
    providers.push(provider);
    provider.subscribe((update) => updates.push(update));
    return {
      provider,
      loads,
      updates,
      logs: lines,
      waitForLoad: (check, description) =>
        waitFor(() => {
          const last = loads.at(-1);
          return last !== undefined && check(last) ? last : undefined;
        }, description),
    };
  }

  describe("directory mode", () => {
    it("delivers the initial update with every file before start resolves", async () => {
      await writeTree(dir, {
        "config/b.yaml": "b",
        "config/a.txt": "a",
        "config/sub/x.yaml": "x",
      });
      const h = harness({});
      await h.provider.start();
      expect(h.loads).toEqual([["a.txt=a", "b.yaml=b", "sub.x.yaml=x"]]);
      expect(h.updates).toEqual([{ ok: true, config: emptyConfig }]);
    });

    it("delivers an initial update even when there are no files", async () => {
      await mkdir(join(dir, "config"));
      const h = harness({});
      await h.provider.start();
      expect(h.loads).toEqual([[]]);
      expect(h.updates).toHaveLength(1);
    });

    it("reads the directory below the runtime subdirectory", async () => {
      await writeTree(dir, {
        "ratelimit/config/a.yaml": "a",
        "config/other.yaml": "o",
      });
      const h = harness({ runtimeSubdirectory: "ratelimit" });
      await h.provider.start();
      expect(h.loads).toEqual([["a.yaml=a"]]);
    });

    it("reloads every file after a file is edited, created, chmod-ed or removed", async () => {
      await writeTree(dir, { "config/a.yaml": "a1", "config/b.yaml": "b" });
      const h = harness({});
      await h.provider.start();

      await writeFile(join(dir, "config/a.yaml"), "a2");
      await h.waitForLoad(
        (f) => f.includes("a.yaml=a2") && f.includes("b.yaml=b"),
        "reload after edit",
      );

      await writeFile(join(dir, "config/c.yaml"), "c");
      await h.waitForLoad((f) => f.includes("c.yaml=c"), "reload after create");

      const before = h.loads.length;
      await chmod(join(dir, "config/c.yaml"), 0o600);
      await waitFor(() => h.loads.length > before, "reload after chmod");

      await rm(join(dir, "config/a.yaml"));
      await h.waitForLoad(
        (f) => f.join() === "b.yaml=b,c.yaml=c",
        "reload after remove",
      );
    });

    it("reloads when a file is renamed into the directory", async () => {
      await writeTree(dir, { "config/a.yaml": "a", "staging/n.yaml": "n" });
      const h = harness({});
      await h.provider.start();
      await rename(join(dir, "staging/n.yaml"), join(dir, "config/n.yaml"));
      await h.waitForLoad(
        (f) => f.includes("n.yaml=n"),
        "reload after rename into the directory",
      );
    });

    it("does not reload for edits inside nested directories, but reads them on the next reload", async () => {
      await writeTree(dir, { "config/a.yaml": "a", "config/sub/x.yaml": "x1" });
      const h = harness({});
      await h.provider.start();
      await writeFile(join(dir, "config/sub/x.yaml"), "x2");
      await settle(debounceMs);
      expect(h.loads).toHaveLength(1);
      await writeFile(join(dir, "config/a.yaml"), "a2");
      const files = await h.waitForLoad(
        (f) => f.includes("a.yaml=a2"),
        "reload after top-level edit",
      );
      expect(files).toContain("sub.x.yaml=x2");
    });

    it("follows a Kubernetes ConfigMap style swap and skips the hidden copies when asked", async () => {
      const config = join(dir, "config");
      await writeTree(config, { "..v1/a.yaml": "a1" });
      await symlink("..v1", join(config, "..data"));
      await symlink("..data/a.yaml", join(config, "a.yaml"));
      const h = harness({ ignoreDotFiles: true });
      await h.provider.start();
      expect(h.loads).toEqual([["a.yaml=a1"]]);

      await writeTree(config, { "..v2/a.yaml": "a2" });
      await swapSymlink("..v2", join(config, "..data"));
      await rm(join(config, "..v1"), { recursive: true });
      await h.waitForLoad(
        (f) => f.join() === "a.yaml=a2",
        "reload after the ..data swap",
      );
    });

    it("loads dotfiles unless told to ignore them", async () => {
      await writeTree(dir, {
        "config/.hidden.yaml": "h",
        "config/a.yaml": "a",
      });
      const all = harness({});
      await all.provider.start();
      expect(all.loads).toEqual([[".hidden.yaml=h", "a.yaml=a"]]);
      const visible = harness({ ignoreDotFiles: true });
      await visible.provider.start();
      expect(visible.loads).toEqual([["a.yaml=a"]]);
    });

    it("starts with no files when the directory is missing and recovers when it appears", async () => {
      const h = harness({ runtimeSubdirectory: "rl" });
      await h.provider.start();
      expect(h.loads).toEqual([[]]);
      expect(h.updates).toHaveLength(1);
      expect(h.logs).toContainEqual(
        expect.objectContaining({
          level: warnLevel,
          msg: "config directory does not exist",
          dir: join(dir, "rl/config"),
        }),
      );
      await writeTree(dir, { "rl/config/a.yaml": "a" });
      await h.waitForLoad(
        (f) => f.join() === "a.yaml=a",
        "reload once the directory exists",
      );
    });

    it("keeps watching after the directory is removed and created again", async () => {
      await writeTree(dir, { "config/a.yaml": "a" });
      const h = harness({});
      await h.provider.start();
      await rm(join(dir, "config"), { recursive: true });
      await h.waitForLoad(
        (f) => f.length === 0,
        "reload after the directory is removed",
      );
      await writeTree(dir, { "config/b.yaml": "b" });
      await h.waitForLoad(
        (f) => f.join() === "b.yaml=b",
        "reload after the directory is back",
      );
      await writeFile(join(dir, "config/b.yaml"), "b2");
      await h.waitForLoad(
        (f) => f.join() === "b.yaml=b2",
        "reload after an edit in the new directory",
      );
    });

    it("coalesces a burst of changes into few reloads and reads the final state", async () => {
      await mkdir(join(dir, "config"));
      const h = harness({ debounceMs: 300 });
      await h.provider.start();
      const burst = 20;
      for (let i = 0; i < burst; i++)
        await writeFile(
          join(dir, `config/f${String(i).padStart(2, "0")}.yaml`),
          "x",
        );
      await h.waitForLoad(
        (f) => f.length === burst,
        "reload with every file of the burst",
      );
      await settle(300);
      // Initial load plus, normally, one reload; a slow machine may split the burst once or twice.
      expect(h.loads.length).toBeLessThanOrEqual(4);
      expect(h.loads.at(-1)).toHaveLength(burst);
    });
  });

  describe("watch-root mode", () => {
    const root = (): string => join(dir, "current");

    /** Writes a version of the runtime tree under `dir/<name>/`. */
    async function version(
      name: string,
      files: Record<string, string>,
    ): Promise<string> {
      await writeTree(join(dir, name), files);
      return join(dir, name);
    }

    function watchRootHarness(
      options: Partial<FileProviderOptions> = {},
    ): Harness {
      return harness({
        runtimeRoot: root(),
        runtimeSubdirectory: "ratelimit",
        watchRoot: true,
        ...options,
      });
    }

    it("loads only the keys under the app directory prefix", async () => {
      await symlink(
        await version("v1", {
          "ratelimit/config/a.yaml": "a",
          "ratelimit/config/sub/b.yaml": "b",
          "ratelimit/config.yaml": "quirk",
          "ratelimit/configx.yaml": "no",
          "ratelimit/other/c.yaml": "no",
        }),
        root(),
      );
      const h = watchRootHarness();
      await h.provider.start();
      expect(h.loads).toEqual([
        ["config.a.yaml=a", "config.sub.b.yaml=b", "config.yaml=quirk"],
      ]);
    });

    it("reloads when the root symlink is swapped", async () => {
      await symlink(
        await version("v1", { "ratelimit/config/a.yaml": "a1" }),
        root(),
      );
      const h = watchRootHarness();
      await h.provider.start();
      expect(h.loads).toEqual([["config.a.yaml=a1"]]);

      await swapSymlink(
        await version("v2", {
          "ratelimit/config/a.yaml": "a2",
          "ratelimit/config/b.yaml": "b",
        }),
        root(),
      );
      await h.waitForLoad(
        (f) => f.join() === "config.a.yaml=a2,config.b.yaml=b",
        "reload after the first swap",
      );

      await swapSymlink(
        await version("v3", { "ratelimit/config/c.yaml": "c" }),
        root(),
      );
      await h.waitForLoad(
        (f) => f.join() === "config.c.yaml=c",
        "reload after the second swap",
      );
    });

    it("ignores in-place edits below the root", async () => {
      const v1 = await version("v1", { "ratelimit/config/a.yaml": "a1" });
      await symlink(v1, root());
      const h = watchRootHarness();
      await h.provider.start();
      await writeFile(join(v1, "ratelimit/config/a.yaml"), "a2");
      await writeFile(join(v1, "ratelimit/config/new.yaml"), "n");
      await settle(debounceMs);
      expect(h.loads).toHaveLength(1);

      await swapSymlink(
        await version("v2", { "ratelimit/config/a.yaml": "a3" }),
        root(),
      );
      await h.waitForLoad(
        (f) => f.join() === "config.a.yaml=a3",
        "reload after the swap",
      );
      expect(h.loads).toHaveLength(2);
    });

    it("starts with no files when the root is missing and loads once it is created", async () => {
      const h = watchRootHarness();
      await h.provider.start();
      expect(h.loads).toEqual([[]]);
      expect(h.logs).toContainEqual(
        expect.objectContaining({
          level: warnLevel,
          msg: "config directory does not exist",
        }),
      );
      await symlink(
        await version("v1", { "ratelimit/config/a.yaml": "a" }),
        root(),
      );
      await h.waitForLoad(
        (f) => f.join() === "config.a.yaml=a",
        "reload once the root exists",
      );
    });

    it("recovers when the parent of the root is created later", async () => {
      const h = harness({
        runtimeRoot: join(dir, "runtime/current"),
        runtimeSubdirectory: "ratelimit",
        watchRoot: true,
      });
      await h.provider.start();
      expect(h.loads).toEqual([[]]);
      await mkdir(join(dir, "runtime"));
      await symlink(
        await version("v1", { "ratelimit/config/a.yaml": "a" }),
        join(dir, "runtime/current"),
      );
      await h.waitForLoad(
        (f) => f.join() === "config.a.yaml=a",
        "reload once the root exists",
      );
    });

    it("delivers one empty update and watches nothing without a runtime subdirectory", async () => {
      await symlink(await version("v1", { "config/a.yaml": "a" }), root());
      const h = watchRootHarness({ runtimeSubdirectory: "" });
      await h.provider.start();
      expect(h.loads).toEqual([[]]);
      expect(h.logs).toContainEqual(
        expect.objectContaining({
          level: warnLevel,
          msg: "no runtime configuration, loading an empty config once",
        }),
      );
      await swapSymlink(await version("v2", { "config/b.yaml": "b" }), root());
      await settle(debounceMs);
      expect(h.loads).toHaveLength(1);
    });
  });

  describe("updates", () => {
    it("delivers a failed load as a failed update", async () => {
      await writeTree(dir, { "config/a.yaml": "a" });
      const error = new ConfigError("config.a.yaml: bad");
      const h = harness({}, () => ({ ok: false, error }));
      await h.provider.start();
      expect(h.updates).toEqual([{ ok: false, error }]);
    });

    it("turns a throwing load into a failed update", async () => {
      await writeTree(dir, { "config/a.yaml": "a" });
      const configError = new ConfigError("a.yaml: bad");
      const thrown = harness({}, () => {
        throw configError;
      });
      await thrown.provider.start();
      expect(thrown.updates).toEqual([{ ok: false, error: configError }]);

      const bug = harness({}, () => {
        throw new TypeError("oops");
      });
      await bug.provider.start();
      const update = bug.updates[0];
      expect(update?.ok).toBe(false);
      if (update?.ok === false) {
        expect(update.error).toBeInstanceOf(ConfigError);
        expect(update.error.message).toBe(
          "unexpected error loading config: oops",
        );
      }
    });

    it("keeps delivering to other listeners when one throws, and stops after unsubscribe", async () => {
      await writeTree(dir, { "config/a.yaml": "a1" });
      const h = harness({});
      h.provider.subscribe(() => {
        throw new Error("listener bug");
      });
      const seen: ConfigUpdate[] = [];
      const unsubscribe = h.provider.subscribe((u) => seen.push(u));
      await h.provider.start();
      expect(h.updates).toHaveLength(1);
      expect(seen).toHaveLength(1);
      expect(h.logs).toContainEqual(
        expect.objectContaining({ msg: "config update listener failed" }),
      );

      unsubscribe();
      await writeFile(join(dir, "config/a.yaml"), "a2");
      await h.waitForLoad((f) => f.join() === "a.yaml=a2", "reload after edit");
      await waitFor(() => h.updates.length === 2, "second update");
      expect(seen).toHaveLength(1);
    });
  });

  describe("close", () => {
    it("stops reloading and is idempotent", async () => {
      await writeTree(dir, { "config/a.yaml": "a1" });
      const h = harness({});
      await h.provider.start();
      await Promise.all([h.provider.close(), h.provider.close()]);
      await h.provider.close();
      await writeFile(join(dir, "config/a.yaml"), "a2");
      await settle(debounceMs);
      expect(h.loads).toHaveLength(1);
    });

    it("makes start a no-op when called first", async () => {
      await writeTree(dir, { "config/a.yaml": "a" });
      const h = harness({});
      await h.provider.close();
      await h.provider.start();
      expect(h.loads).toHaveLength(0);
    });

    it("lets a pending start finish", async () => {
      await writeTree(dir, { "config/a.yaml": "a" });
      const h = harness({});
      const starting = h.provider.start();
      await h.provider.close();
      await starting;
      expect(h.loads.length).toBeLessThanOrEqual(1);
    });
  });
});
