import { execFileSync } from "node:child_process";
import { mkdir, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { loadRuntimeFiles } from "../../../../src/provider/file/load-runtime-files.js";
import {
  captureLogger,
  makeTempDir,
  removeTempDir,
  warnLevel,
  writeTree,
} from "./provider-test-kit.js";

describe("loadRuntimeFiles", () => {
  let dir: string;
  beforeEach(async () => {
    dir = await makeTempDir();
  });
  afterEach(async () => {
    await removeTempDir(dir);
  });

  it("names every file by its relative path with dots, sorted, whatever the extension", async () => {
    await writeTree(dir, {
      "b.yaml": "b",
      "a.txt": "a",
      "sub/x.yaml": "x",
      "sub/deeper/y": "y",
    });
    const { logger } = captureLogger();
    const files = await loadRuntimeFiles({
      dir,
      ignoreDotFiles: false,
      logger,
    });
    expect(files).toEqual([
      { name: "a.txt", text: "a" },
      { name: "b.yaml", text: "b" },
      { name: "sub.deeper.y", text: "y" },
      { name: "sub.x.yaml", text: "x" },
    ]);
  });

  it("loads dotfiles and dot directories unless told to ignore them", async () => {
    await writeTree(dir, {
      ".hidden.yaml": "h",
      ".dir/x.yaml": "x",
      "a.yaml": "a",
    });
    const { logger } = captureLogger();
    const all = await loadRuntimeFiles({ dir, ignoreDotFiles: false, logger });
    expect(all.map((f) => f.name)).toEqual([
      ".dir.x.yaml",
      ".hidden.yaml",
      "a.yaml",
    ]);
    const visible = await loadRuntimeFiles({
      dir,
      ignoreDotFiles: true,
      logger,
    });
    expect(visible.map((f) => f.name)).toEqual(["a.yaml"]);
  });

  it("follows symlinked files and the directory itself but not symlinked directories inside it", async () => {
    const real = join(dir, "real");
    await writeTree(real, { "a.yaml": "a" });
    await writeTree(dir, { "outside/o.yaml": "o" });
    await symlink(join(dir, "outside"), join(real, "linked-dir"));
    await symlink(join(dir, "outside", "o.yaml"), join(real, "linked.yaml"));
    await symlink(real, join(dir, "current"));
    const { logger, lines } = captureLogger();
    const files = await loadRuntimeFiles({
      dir: join(dir, "current"),
      ignoreDotFiles: false,
      logger,
    });
    expect(files).toEqual([
      { name: "a.yaml", text: "a" },
      { name: "linked.yaml", text: "o" },
    ]);
    expect(
      lines.some(
        (l) =>
          l.level === warnLevel && String(l["file"]).endsWith("linked-dir"),
      ),
    ).toBe(true);
  });

  it("logs and skips a file it cannot read", async () => {
    await writeTree(dir, { "a.yaml": "a" });
    await symlink(join(dir, "missing-target.yaml"), join(dir, "dangling.yaml"));
    const { logger, lines } = captureLogger();
    const files = await loadRuntimeFiles({
      dir,
      ignoreDotFiles: false,
      logger,
    });
    expect(files.map((f) => f.name)).toEqual(["a.yaml"]);
    const warning = lines.find((l) => l.msg === "cannot read config file");
    expect(warning?.level).toBe(warnLevel);
    expect(warning?.["file"]).toBe(join(dir, "dangling.yaml"));
  });

  it("skips entries that are not regular files, such as FIFOs", async () => {
    await writeTree(dir, { "a.yaml": "a" });
    execFileSync("mkfifo", [join(dir, "pipe")]);
    const { logger } = captureLogger();
    const files = await loadRuntimeFiles({
      dir,
      ignoreDotFiles: false,
      logger,
    });
    expect(files.map((f) => f.name)).toEqual(["a.yaml"]);
  });

  it("returns no files and warns when the directory does not exist", async () => {
    const { logger, lines } = captureLogger();
    const missing = join(dir, "nope");
    const files = await loadRuntimeFiles({
      dir: missing,
      ignoreDotFiles: false,
      logger,
    });
    expect(files).toEqual([]);
    expect(lines).toContainEqual(
      expect.objectContaining({
        level: warnLevel,
        msg: "config directory does not exist",
        dir: missing,
      }),
    );
  });

  it("returns no files when the path is a file", async () => {
    await writeFile(join(dir, "file"), "x");
    await mkdir(join(dir, "empty"));
    const { logger, lines } = captureLogger();
    expect(
      await loadRuntimeFiles({
        dir: join(dir, "file"),
        ignoreDotFiles: false,
        logger,
      }),
    ).toEqual([]);
    expect(lines.at(-1)?.msg).toBe("config path is not a directory");
    expect(
      await loadRuntimeFiles({
        dir: join(dir, "empty"),
        ignoreDotFiles: false,
        logger,
      }),
    ).toEqual([]);
  });
});
