import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, realpathSync } from "node:fs";
import {
  chmod,
  mkdir,
  mkdtemp,
  readFile,
  rm,
  writeFile,
} from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  freePort,
  repoRoot,
  runToEnd,
  type RunResult,
} from "../helpers/spawn-service.js";
import { waitFor } from "../helpers/wait-for.js";
import { minuteWithRoom } from "../helpers/windows.js";

// The npm package as a user gets it: `npm pack` of the built tree, `npm install -g` of the
// tarball into a temporary prefix (dependencies from the registry or npm's cache), then the
// three commands from <prefix>/bin with only a Node >= 22.12 on PATH: no source checkout, no
// build step, no Node download. Needs `make build` first (the tarball ships dist/bundle).

const nodeDir = dirname(process.execPath);
const { version } = JSON.parse(
  await readFile(join(repoRoot, "package.json"), "utf8"),
) as { version: string };

type Run = RunResult;

/** Runs `command` to its end with `env` alone (plus what the caller puts in it). */
function run(
  command: string,
  args: readonly string[],
  options: { cwd: string; env: NodeJS.ProcessEnv },
): Promise<Run> {
  return runToEnd(command, args, options);
}

describe("the npm package installed with npm install -g", () => {
  let work: string;
  let prefix: string;
  let packageDir: string;
  /** PATH of the installed commands: the prefix's bin, then this test's Node, then the system. */
  let path: string;
  let packed: { filename: string; size: number; files: { path: string }[] };

  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), "rls-package-"));
    prefix = join(work, "prefix");
    path = [join(prefix, "bin"), nodeDir, process.env["PATH"] ?? ""].join(":");
    // npm keeps the whole environment: proxies and CA bundles reach the registry through it.
    const npmEnv = {
      ...process.env,
      PATH: [nodeDir, process.env["PATH"] ?? ""].join(":"),
    };
    const pack = await run(
      "npm",
      ["pack", "--json", "--pack-destination", work],
      { cwd: repoRoot, env: npmEnv },
    );
    expect(pack.code).toBe(0);
    [packed] = JSON.parse(pack.stdout) as [typeof packed];
    const install = await run(
      "npm",
      [
        "install",
        "--global",
        "--prefix",
        prefix,
        "--prefer-offline",
        "--no-audit",
        "--no-fund",
        "--loglevel=error",
        join(work, packed.filename),
      ],
      { cwd: work, env: npmEnv },
    );
    expect(install.stderr).toBe("");
    expect(install.code).toBe(0);
    packageDir = join(prefix, "lib", "node_modules", "ratelimit-ts");
  }, 300_000);

  afterAll(async () => {
    await rm(work, { recursive: true, force: true });
  });

  it("packs the bundle, the launchers and the texts, not the sources", () => {
    const files = packed.files.map((f) => f.path);
    expect(packed.filename).toBe(`ratelimit-ts-${version}.tgz`);
    for (const file of [
      "bin/ratelimit",
      "bin/ratelimit-client",
      "bin/ratelimit-config-check",
      "bin/find-node.sh",
      "dist/bundle/main.js",
      "dist/bundle/client.js",
      "dist/bundle/config-check.js",
      "dist/console/app.js",
      "examples/config/example.yaml",
      "LICENSE",
      "README.md",
      "CHANGELOG.md",
      "package.json",
    ])
      expect(files).toContain(file);
    expect(
      files.filter((f) => /^(src|dist\/src|test|scripts|gen|proto)\//.test(f)),
    ).toEqual([]);
    // What the installed commands run is in the tarball: they must not look for the checkout.
    expect(existsSync(join(packageDir, "scripts"))).toBe(false);
  });

  it.each(["ratelimit", "ratelimit-client", "ratelimit-config-check"])(
    "puts %s on PATH, printing the package version",
    async (command) => {
      const r = await run(command, ["--version"], {
        cwd: work,
        env: { PATH: path },
      });
      expect(r).toEqual({
        code: 0,
        stdout: `${command} ${version}\n`,
        stderr: "",
      });
    },
  );

  it("refuses a node on PATH older than 22.12, saying what to install", async () => {
    const oldNode = join(work, "old-node");
    await mkdir(oldNode, { recursive: true });
    // A stand-in for an old Node: prints its version and fails the version check.
    await writeFile(
      join(oldNode, "node"),
      "#!/bin/sh\nprintf v20.11.0\nexit 1\n",
    );
    await chmod(join(oldNode, "node"), 0o755);
    const r = await run(join(prefix, "bin", "ratelimit"), ["--version"], {
      cwd: work,
      env: { PATH: `${oldNode}:/usr/bin:/bin` },
    });
    expect(r.code).toBe(1);
    expect(r.stdout).toBe("");
    expect(r.stderr).toContain("ratelimit: Node.js >= 22.12 is required");
    expect(r.stderr).toContain("is v20.11.0");
  });

  it("checks the shipped example config with ratelimit-config-check", async () => {
    const r = await run(
      "ratelimit-config-check",
      ["-config_dir", join(packageDir, "examples", "config")],
      { cwd: work, env: { PATH: path } },
    );
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("all rate limit configs ok");
  });

  describe("the installed service", () => {
    let service: ChildProcess;
    let output = "";
    let exited: Promise<number | string>;
    let ports: { http: number; grpc: number; debug: number };

    beforeAll(async () => {
      ports = {
        http: await freePort(),
        grpc: await freePort(),
        debug: await freePort(),
      };
      service = spawn(join(prefix, "bin", "ratelimit"), [], {
        cwd: work,
        env: {
          PATH: path,
          BACKEND_TYPE: "memory",
          HOST: "127.0.0.1",
          PORT: String(ports.http),
          GRPC_HOST: "127.0.0.1",
          GRPC_PORT: String(ports.grpc),
          DEBUG_HOST: "127.0.0.1",
          DEBUG_PORT: String(ports.debug),
          RUNTIME_ROOT: join(packageDir, "examples"),
          RUNTIME_SUBDIRECTORY: "",
          RUNTIME_APPDIRECTORY: "config",
          RUNTIME_WATCH_ROOT: "false",
          USE_PUSHSTATS: "false",
          DISABLE_STATS: "true",
          LOG_LEVEL: "info",
        },
        stdio: ["ignore", "pipe", "pipe"],
      });
      service.stdout?.on("data", (d: Buffer) => (output += d.toString()));
      service.stderr?.on("data", (d: Buffer) => (output += d.toString()));
      exited = new Promise((resolve) => {
        service.on("exit", (code, signal) => {
          resolve(code ?? signal ?? -1);
        });
      });
      await waitFor(
        async () =>
          (await fetch(`http://127.0.0.1:${ports.http}/healthcheck`)).status ===
          200,
        `the installed service to answer /healthcheck (output: ${output})`,
        20_000,
      );
    });

    afterAll(async () => {
      if (service.exitCode === null && service.signalCode === null)
        service.kill("SIGKILL");
      await exited;
    });

    it("runs the bundle from the package", async () => {
      const pid = service.pid ?? 0;
      const cmdline = (await readFile(`/proc/${pid}/cmdline`, "utf8")).split(
        "\0",
      );
      expect(cmdline).toContain(
        join(realpathSync(packageDir), "dist", "bundle", "main.js"),
      );
    });

    it("decides over /json with the example config", async () => {
      const call = () =>
        fetch(`http://127.0.0.1:${ports.http}/json`, {
          method: "POST",
          body: JSON.stringify({
            domain: "rl",
            descriptors: [
              {
                entries: [
                  { key: "foo", value: "x" },
                  { key: "bar", value: "bkthomps" },
                ],
              },
            ],
          }),
        });
      // One request per minute: both calls in one minute of the service's clock.
      await minuteWithRoom(2);
      const first = await call();
      expect(first.status).toBe(200);
      expect(await first.json()).toMatchObject({
        overallCode: "OK",
        statuses: [
          {
            code: "OK",
            currentLimit: {
              name: "bkthomps",
              requestsPerUnit: 1,
              unit: "MINUTE",
            },
          },
        ],
      });
      // The second in the same window is refused.
      const second = await call();
      expect(second.status).toBe(429);
      expect(await second.json()).toMatchObject({ overallCode: "OVER_LIMIT" });
    });

    it("answers the installed ratelimit-client on GRPC_HOST:GRPC_PORT", async () => {
      const r = await run(
        "ratelimit-client",
        ["-domain", "rl", "-descriptors", "category=account"],
        {
          cwd: work,
          env: {
            PATH: path,
            GRPC_HOST: "127.0.0.1",
            GRPC_PORT: String(ports.grpc),
          },
        },
      );
      expect(r.code).toBe(0);
      expect(r.stdout).toContain(
        "descriptor category=account: OK, limit 4 per MINUTE, 3 remaining",
      );
    });

    it("drains and exits 0 on SIGTERM", async () => {
      service.kill("SIGTERM");
      expect(await exited).toBe(0);
    });
  });
});
