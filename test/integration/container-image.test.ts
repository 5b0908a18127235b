// The container image (Containerfile) built as `make image` builds it (scripts/build-image.sh:
// buildah, chroot isolation, on the local Debian + Node 24 base, no registry), then run with
// `buildah run` on the host's network: the image's own entrypoint, user and health check, on
// real stores on loopback. Two services run from it, so that each optional part the image must
// still load without node_modules starts in it: one on the kv backend (redis-server) with the
// examples config mounted at the default runtime path, tracing on (spans to an OTLP/HTTP
// receiver in this test) and pull statistics; one on the mc backend (memcached) with its config
// from xDS (a management server in this test) and tracing over OTLP/gRPC. The first build on a machine also builds the
// base image (about a minute) and runs npm ci (a few); later builds reuse both from the
// machine's container storage.
import {
  execFile,
  spawn,
  spawnSync,
  type ChildProcess,
} from "node:child_process";
import { randomBytes } from "node:crypto";
import { connect } from "node:net";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  ConfigRateLimitUnit,
  RateLimitResponse_Code,
} from "../../src/proto.js";
import {
  rateLimitConfigResource,
  startAdsServer,
  type AdsServer,
} from "../helpers/ads-server.js";
import { GrpcJsRateLimitClient } from "../helpers/grpc-js-client.js";
import {
  startMemcached,
  type MemcachedServer,
} from "../helpers/memcached-server.js";
import {
  startOtlpGrpcReceiver,
  startOtlpHttpReceiver,
  type OtlpReceiver,
} from "../helpers/otlp-receivers.js";
import {
  startRedisServer,
  stopAllRedisServers,
  type RedisServer,
} from "../helpers/redis-server.js";
import { request } from "../helpers/requests.js";
import { freePort, repoRoot } from "../helpers/spawn-service.js";
import { waitFor } from "../helpers/wait-for.js";
import { minuteWithRoom } from "../helpers/windows.js";

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
  readonly Env: readonly string[] | null;
}

/** The size bound of issue 34: the image's own layers, as `podman image inspect` counts them. */
const maxImageBytes = 160 * 1024 * 1024;

/** Reads one key from memcached over its text protocol; undefined when it is not there. */
async function memcachedGet(
  server: MemcachedServer,
  key: string,
): Promise<string | undefined> {
  const socket = connect(server.port, server.host);
  try {
    let reply = "";
    await new Promise<void>((resolve, reject) => {
      socket.once("error", reject);
      socket.on("data", (d: Buffer) => {
        reply += d.toString("latin1");
        if (reply.endsWith("END\r\n")) resolve();
      });
      socket.write(`get ${key}\r\n`);
    });
    const match = /^VALUE \S+ \d+ \d+\r\n(.*)\r\n/.exec(reply);
    return match?.[1];
  } finally {
    socket.destroy();
  }
}

/** One service running in a working container of the image. */
interface ContainerService {
  readonly httpPort: number;
  readonly grpcPort: number;
  /** Everything it wrote so far (stdout and stderr). */
  output(): string;
  stop(): Promise<void>;
}

describe.skipIf(!tools.ok)("container image", () => {
  let builtName = "";
  let imageBytes = 0;
  let config: ImageConfig;
  let redis: RedisServer;
  let memcached: MemcachedServer;
  let receiver: OtlpReceiver;
  let grpcReceiver: OtlpReceiver;
  let ads: AdsServer;
  const containers: string[] = [];
  const services: ContainerService[] = [];
  /** Stops the test's own servers started so far (memcached, OTLP receiver, xDS). */
  const stores: (() => Promise<void>)[] = [];
  let kv: ContainerService;
  let mc: ContainerService;
  let pullPort = 0;

  /** A new working container from the image, removed in afterAll. */
  async function newContainer(): Promise<string> {
    const name = `rls-it-${randomBytes(4).toString("hex")}`;
    await run("buildah", ["from", "--quiet", "--name", name, image]);
    containers.push(name);
    return name;
  }

  /**
   * Runs the image's entrypoint in a new container on the host's network, with the listeners
   * on free loopback ports and `env` over them, and waits until it answers /healthcheck.
   */
  async function startService(
    env: Record<string, string>,
    volumes: readonly string[] = [],
  ): Promise<ContainerService> {
    const httpPort = await freePort();
    const grpcPort = await freePort();
    const container = await newContainer();
    const fullEnv = {
      HOST: "127.0.0.1",
      PORT: String(httpPort),
      GRPC_HOST: "127.0.0.1",
      GRPC_PORT: String(grpcPort),
      DEBUG_HOST: "127.0.0.1",
      DEBUG_PORT: String(await freePort()),
      USE_PUSHSTATS: "false",
      LOG_FORMAT: "json",
      ...env,
    };
    const child: ChildProcess = spawn(
      "buildah",
      [
        "run",
        "--isolation",
        "chroot",
        "--network",
        "host",
        ...volumes.flatMap((v) => ["--volume", v]),
        ...Object.entries(fullEnv).flatMap(([k, v]) => ["--env", `${k}=${v}`]),
        container,
        "--",
        ...(config.Entrypoint ?? []),
      ],
      { stdio: ["ignore", "pipe", "pipe"] },
    );
    // If the test process dies first, the container's process goes with it.
    process.once("exit", () => {
      child.kill("SIGTERM");
    });
    let output = "";
    child.stdout?.on("data", (d: Buffer) => (output += d.toString()));
    child.stderr?.on("data", (d: Buffer) => (output += d.toString()));
    const exited = new Promise<void>((resolve) => {
      child.once("exit", () => {
        resolve();
      });
    });
    const service: ContainerService = {
      httpPort,
      grpcPort,
      output: () => output,
      stop: async () => {
        if (child.exitCode === null && child.signalCode === null) {
          child.kill("SIGTERM");
          await exited;
        }
      },
    };
    services.push(service);
    try {
      await waitFor(
        async () =>
          (await fetch(`http://127.0.0.1:${httpPort}/healthcheck`)).status ===
          200,
        "the service in the container to answer /healthcheck",
        60_000,
      );
    } catch (err) {
      throw new Error(`${String(err)}\nservice output:\n${output}`, {
        cause: err,
      });
    }
    return service;
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
    imageBytes = Number(
      (
        await run("podman", [
          "image",
          "inspect",
          "--format",
          "{{.Size}}",
          image,
        ])
      ).trim(),
    );

    redis = await startRedisServer();
    memcached = await startMemcached();
    stores.push(() => memcached.stop());
    receiver = await startOtlpHttpReceiver();
    stores.push(() => receiver.close());
    grpcReceiver = await startOtlpGrpcReceiver();
    stores.push(() => grpcReceiver.close());
    ads = await startAdsServer();
    stores.push(() => ads.stop());
    ads.push("v1", [
      rateLimitConfigResource({
        name: "image-xds",
        domain: "image-xds",
        descriptors: [
          {
            key: "k",
            rateLimit: { unit: ConfigRateLimitUnit.MINUTE, requestsPerUnit: 2 },
          },
        ],
      }),
    ]);
    pullPort = await freePort();
    kv = await startService(
      {
        BACKEND_TYPE: "kv",
        KV_SOCKET_TYPE: "tcp",
        KV_URL: redis.address,
        TRACING_ENABLED: "true",
        TRACING_SERVICE_NAME: "rls-image",
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
        OTEL_BSP_SCHEDULE_DELAY: "100",
        USE_PULLSTATS: "true",
        PULLSTATS_ADDR: `127.0.0.1:${pullPort}`,
      },
      [
        `${join(repoRoot, "examples", "config")}:/srv/runtime_data/current/config:ro`,
      ],
    );
    mc = await startService({
      BACKEND_TYPE: "mc",
      MC_HOST_PORT: memcached.address,
      CONFIG_TYPE: "GRPC_XDS_SOTW",
      CONFIG_GRPC_XDS_SERVER_URL: ads.address,
      CONFIG_GRPC_XDS_NODE_ID: "image-test",
      TRACING_ENABLED: "true",
      TRACING_EXPORTER_PROTOCOL: "grpc",
      TRACING_SERVICE_NAME: "rls-image-grpc",
      OTEL_EXPORTER_OTLP_ENDPOINT: grpcReceiver.endpoint,
      OTEL_BSP_SCHEDULE_DELAY: "100",
    });
  }, buildTimeoutMs + 180_000);

  afterAll(async () => {
    for (const service of services) await service.stop();
    for (const name of containers) {
      await run("buildah", ["rm", name]).catch((err: unknown) => {
        // Cleanup only: a container left behind does not change any result.
        console.warn(`could not remove container ${name}: ${String(err)}`);
      });
    }
    for (const stop of stores.reverse()) await stop();
    await stopAllRedisServers();
  }, 60_000);

  it("prints the image's name on the build's last line", () => {
    expect(builtName).toBe(image);
  });

  it(`is at most ${maxImageBytes / 1024 / 1024} MiB`, () => {
    expect(imageBytes).toBeGreaterThan(0);
    expect(imageBytes).toBeLessThanOrEqual(maxImageBytes);
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

  it("starts node with the memory settings of bin/ratelimit", () => {
    expect(config.Env).toEqual(
      expect.arrayContaining([
        "NODE_OPTIONS=--max-semi-space-size=8",
        "MALLOC_ARENA_MAX=2",
      ]),
    );
  });

  it("runs as the unprivileged user, named in /etc/passwd", async () => {
    const container = await newContainer();
    const ids = await run("buildah", [
      "run",
      "--isolation",
      "chroot",
      container,
      "--",
      "node",
      "-e",
      'const os = require("node:os"); console.log(`${process.getuid()} ${process.getgid()} ${os.userInfo().username}`)',
    ]);
    expect(ids.trim()).toBe("10001 10001 ratelimit");
  });

  it("holds no shell and no npm", async () => {
    const container = await newContainer();
    for (const command of ["/bin/sh", "npm"]) {
      await expect(
        run("buildah", [
          "run",
          "--isolation",
          "chroot",
          container,
          "--",
          command,
          "--version",
        ]),
      ).rejects.toThrow(/failed/);
    }
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
    const response = await fetch(`http://127.0.0.1:${kv.httpPort}/healthcheck`);
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
      `PORT=${kv.httpPort}`,
      container,
      "--",
      ...test.slice(1),
    ]);
  });

  it("decides a /json request from the mounted examples config, counting in the kv backend", async () => {
    const response = await fetch(`http://127.0.0.1:${kv.httpPort}/json`, {
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

  it("answers ShouldRateLimit over gRPC, exports its span over OTLP and counts it in pull statistics", async () => {
    const client = new GrpcJsRateLimitClient(`127.0.0.1:${kv.grpcPort}`);
    try {
      const response = await client.shouldRateLimit(
        request("rl", [
          ["foo", "image"],
          ["baz", "not-so-shady"],
        ]),
      );
      expect(response.overallCode).toBe(RateLimitResponse_Code.OK);
      expect(response.statuses[0]?.limitRemaining).toBe(2);
    } finally {
      client.close();
    }
    const span = await waitFor(
      () =>
        receiver.spans.find(
          (s) =>
            s.name ===
            "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        ),
      "the ShouldRateLimit span at the OTLP receiver",
      20_000,
    ).catch((err: unknown) => {
      throw new Error(`${String(err)}\nservice output:\n${kv.output()}`, {
        cause: err,
      });
    });
    expect(span.resource["service.name"]).toBe("rls-image");
    const metrics = await (
      await fetch(`http://127.0.0.1:${pullPort}/metrics`)
    ).text();
    expect(metrics).toMatch(
      /^ratelimit_service_rate_limit_total_hits\{[^}]*domain="rl"[^}]*\} [1-9]/m,
    );
  });

  it("decides from its xDS config, counting in the mc backend, and exports its spans over OTLP/gRPC", async () => {
    const windowStart = await minuteWithRoom(20);
    const client = new GrpcJsRateLimitClient(`127.0.0.1:${mc.grpcPort}`);
    const codes: RateLimitResponse_Code[] = [];
    try {
      for (let i = 0; i < 3; i++) {
        const response = await client.shouldRateLimit(
          request("image-xds", [["k", "v"]]),
        );
        codes.push(response.overallCode);
      }
    } finally {
      client.close();
    }
    expect(codes).toEqual([
      RateLimitResponse_Code.OK,
      RateLimitResponse_Code.OK,
      RateLimitResponse_Code.OVER_LIMIT,
    ]);
    const counted = await memcachedGet(
      memcached,
      `image-xds_k_v_${windowStart}`,
    );
    expect(Number(counted)).toBeGreaterThanOrEqual(2);
    const spans = await waitFor(
      () => {
        const found = grpcReceiver.spans.filter(
          (s) =>
            s.name ===
            "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        );
        return found.length >= 3 && found;
      },
      "3 ShouldRateLimit spans at the OTLP/gRPC receiver",
      20_000,
    ).catch((err: unknown) => {
      throw new Error(`${String(err)}\nservice output:\n${mc.output()}`, {
        cause: err,
      });
    });
    expect(spans[0]?.resource["service.name"]).toBe("rls-image-grpc");
  });
});
