// The container image (Containerfile) built as `make image` builds it (scripts/build-image.sh:
// buildah, chroot isolation, on the local Debian + Node 24 base, no registry), then run with
// `buildah run` on the host's network: the image's own entrypoint, user and health check,
// the examples config mounted at the default runtime path, and the kv backend on a real
// redis-server on loopback. The first build on a machine also builds the base image (about a
// minute) and runs npm ci (a few); later builds reuse both from the machine's container storage.
import {
  execFile,
  spawn,
  spawnSync,
  type ChildProcess,
} from "node:child_process";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  startRedisServer,
  stopAllRedisServers,
  type RedisServer,
} from "../helpers/redis-server.js";
import { freePort, repoRoot } from "../helpers/spawn-service.js";
import { waitFor } from "../helpers/wait-for.js";

const execFileAsync = promisify(execFile);

/** Installs buildah, podman and mmdebstrap when missing (apt-get); false when that fails. */
function imageToolsReady(): { ok: boolean; detail: string } {
  const result = spawnSync(
    join(repoRoot, "scripts", "ensure-image-base.sh"),
    ["--tools"],
    { encoding: "utf8", timeout: 300_000 },
  );
  return {
    ok: result.status === 0,
    detail: `${result.error?.message ?? ""}${result.stderr}`.trim(),
  };
}

const tools = imageToolsReady();
if (!tools.ok) {
  console.warn(
    `container image tests skipped: buildah/podman/mmdebstrap are missing and could not be installed with apt-get (${tools.detail.split("\n").slice(-3).join(" | ")})`,
  );
}

const image = "localhost/ratelimit-ts:integration-test";
const buildTimeoutMs = 20 * 60_000;

/** Runs a command; resolves with stdout, rejects with its stderr in the message. */
async function run(
  file: string,
  args: readonly string[],
  env: Record<string, string> = {},
  timeoutMs = 60_000,
): Promise<string> {
  try {
    const { stdout } = await execFileAsync(file, args, {
      env: { ...process.env, ...env },
      maxBuffer: 64 * 1024 * 1024,
      timeout: timeoutMs,
    });
    return stdout;
  } catch (err) {
    const stderr = (err as { stderr?: string }).stderr ?? "";
    throw new Error(
      `${file} ${args.join(" ")} failed: ${stderr.slice(-4000)}`,
      {
        cause: err,
      },
    );
  }
}

/** The image's Docker-format config, as buildah reports it. */
interface ImageConfig {
  readonly User: string;
  readonly Entrypoint: readonly string[] | null;
  readonly StopSignal: string;
  readonly ExposedPorts: Record<string, unknown> | null;
  readonly Healthcheck: { readonly Test: readonly string[] } | null;
}

describe.skipIf(!tools.ok)("container image", () => {
  let builtName = "";
  let config: ImageConfig;
  let redis: RedisServer;
  const containers: string[] = [];
  let service: ChildProcess | undefined;
  let serviceOutput = "";
  let serviceExited: Promise<void> = Promise.resolve();
  let httpPort = 0;

  /** A new working container from the image, removed in afterAll. */
  async function newContainer(): Promise<string> {
    const name = `rls-it-${randomBytes(4).toString("hex")}`;
    await run("buildah", ["from", "--quiet", "--name", name, image]);
    containers.push(name);
    return name;
  }

  beforeAll(async () => {
    const stdout = await run(
      join(repoRoot, "scripts", "build-image.sh"),
      [],
      { RLS_IMAGE: image },
      buildTimeoutMs,
    );
    builtName = stdout.trim().split("\n").at(-1) ?? "";
    const inspected = await run("buildah", [
      "inspect",
      "--type",
      "image",
      image,
    ]);
    config = (JSON.parse(inspected) as { Docker: { config: ImageConfig } })
      .Docker.config;

    redis = await startRedisServer();
    httpPort = await freePort();
    const container = await newContainer();
    const env = {
      BACKEND_TYPE: "kv",
      KV_SOCKET_TYPE: "tcp",
      KV_URL: redis.address,
      HOST: "127.0.0.1",
      PORT: String(httpPort),
      GRPC_HOST: "127.0.0.1",
      GRPC_PORT: String(await freePort()),
      DEBUG_HOST: "127.0.0.1",
      DEBUG_PORT: String(await freePort()),
      USE_PUSHSTATS: "false",
      LOG_FORMAT: "json",
    };
    const child = spawn(
      "buildah",
      [
        "run",
        "--isolation",
        "chroot",
        "--network",
        "host",
        "--volume",
        `${join(repoRoot, "examples", "config")}:/srv/runtime_data/current/config:ro`,
        ...Object.entries(env).flatMap(([k, v]) => ["--env", `${k}=${v}`]),
        container,
        "--",
        ...(config.Entrypoint ?? []),
      ],
      { stdio: ["ignore", "pipe", "pipe"] },
    );
    service = child;
    // If the test process dies first, the container's process goes with it.
    process.once("exit", () => {
      child.kill("SIGTERM");
    });
    child.stdout.on("data", (d: Buffer) => (serviceOutput += d.toString()));
    child.stderr.on("data", (d: Buffer) => (serviceOutput += d.toString()));
    serviceExited = new Promise((resolve) => {
      child.once("exit", () => {
        resolve();
      });
    });
    try {
      await waitFor(
        async () =>
          (await fetch(`http://127.0.0.1:${httpPort}/healthcheck`)).status ===
          200,
        "the service in the container to answer /healthcheck",
        60_000,
      );
    } catch (err) {
      throw new Error(`${String(err)}\nservice output:\n${serviceOutput}`, {
        cause: err,
      });
    }
  }, buildTimeoutMs + 90_000);

  afterAll(async () => {
    if (service?.exitCode === null) {
      service.kill("SIGTERM");
      await serviceExited;
    }
    for (const name of containers) {
      await run("buildah", ["rm", name]).catch((err: unknown) => {
        // Cleanup only: a container left behind does not change any result.
        console.warn(`could not remove container ${name}: ${String(err)}`);
      });
    }
    await stopAllRedisServers();
  }, 60_000);

  it("prints the image's name on the build's last line", () => {
    expect(builtName).toBe(image);
  });

  it("declares a non-root user, SIGTERM, the three ports, a health check and node on the bundle", () => {
    expect(config.User).toBe("ratelimit:ratelimit");
    expect(config.StopSignal).toBe("SIGTERM");
    expect(Object.keys(config.ExposedPorts ?? {}).sort()).toEqual([
      "6070/tcp",
      "8080/tcp",
      "8081/tcp",
    ]);
    expect(config.Healthcheck?.Test.join(" ")).toContain("/healthcheck");
    expect(config.Entrypoint).toEqual(["node", "/app/dist/bundle/main.js"]);
  });

  it("runs the service as the unprivileged user", async () => {
    const container = await newContainer();
    const uid = await run("buildah", [
      "run",
      "--isolation",
      "chroot",
      container,
      "--",
      "id",
      "-u",
    ]);
    expect(uid.trim()).toBe("10001");
  });

  it("has ratelimit-conformance on PATH, on its bundle", async () => {
    const container = await newContainer();
    const listed = await run("buildah", [
      "run",
      "--isolation",
      "chroot",
      container,
      "--",
      "ratelimit-conformance",
      "--list",
    ]);
    expect(listed).toContain("accuracy under bursts");
    expect(listed).toContain("Matching rules");
  });

  it("answers /healthcheck with 200 OK", async () => {
    const response = await fetch(`http://127.0.0.1:${httpPort}/healthcheck`);
    expect(response.status).toBe(200);
    expect(await response.text()).toBe("OK");
  });

  it("passes its own HEALTHCHECK command", async () => {
    const container = await newContainer();
    const test = config.Healthcheck?.Test ?? [];
    expect(test[0]).toBe("CMD");
    // Exit status 0 is the healthy answer; run() rejects on any other.
    await run("buildah", [
      "run",
      "--isolation",
      "chroot",
      "--network",
      "host",
      "--env",
      `PORT=${httpPort}`,
      container,
      "--",
      ...test.slice(1),
    ]);
  });

  it("decides a request from the mounted examples config, counting in the kv backend", async () => {
    const response = await fetch(`http://127.0.0.1:${httpPort}/json`, {
      method: "POST",
      body: JSON.stringify({
        domain: "rl",
        descriptors: [{ entries: [{ key: "category", value: "account" }] }],
      }),
    });
    expect(response.status).toBe(200);
    const body = (await response.json()) as {
      overallCode: string;
      statuses: { code: string; limitRemaining: number }[];
    };
    expect(body.overallCode).toBe("OK");
    expect(body.statuses).toHaveLength(1);
    expect(body.statuses[0]?.code).toBe("OK");
    expect(body.statuses[0]?.limitRemaining).toBe(3);
    const client = redis.client();
    try {
      const keys = await client.keys("rl_category_account_*");
      expect(keys).toHaveLength(1);
      expect(await client.get(keys[0] ?? "")).toBe("1");
    } finally {
      client.disconnect();
    }
  });
});
