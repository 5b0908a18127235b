// What the bundle (dist/bundle/main.js, what bin/ratelimit and the image run) loads by default:
// none of node:http2, node:tls, node:https, node:inspector or Node's bundled undici, after a
// gRPC ShouldRateLimit, a /json call and /healthcheck (docs/performance.md "What start-up loaded
// without using it"). Each costs RSS on every replica. The node engine is the control: it
// must load node:http2, so the list read here is the process's real one.

import { readFile, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GrpcJsRateLimitClient } from "../helpers/grpc-js-client.js";
import { startRedisServer, type RedisServer } from "../helpers/redis-server.js";
import { jsonRequest, request } from "../helpers/requests.js";
import {
  memoryServiceEnv,
  repoRoot,
  spawnNode,
} from "../helpers/spawn-service.js";
import { waitFor } from "../helpers/wait-for.js";

const unused = [
  "NativeModule http2",
  "NativeModule tls",
  "NativeModule https",
  "NativeModule inspector",
  "NativeModule inspector/promises",
  "NativeModule internal/deps/undici/undici",
];

let dir: string;
let redis: RedisServer;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "rls-start-modules-"));
  redis = await startRedisServer();
});

afterAll(async () => {
  await redis.stop();
  await rm(dir, { recursive: true, force: true });
});

/** Starts the bundle with `extra`, makes three calls, stops it; the built-ins it loaded. */
async function modulesLoaded(
  name: string,
  extra: Record<string, string>,
): Promise<string[]> {
  const listFile = join(dir, `${name}.txt`);
  // Every listener on a free loopback port; the example config, its directory watched (the
  // default); `extra` names the backend.
  const { env, grpcPort } = await memoryServiceEnv(
    "builtin",
    join(repoRoot, "examples"),
    { RUNTIME_APPDIRECTORY: "config", RUNTIME_WATCH_ROOT: "true", ...extra },
  );
  const service = spawnNode("dist/bundle/main.js", [], {
    ...env,
    NODE_OPTIONS: `--import ${pathToFileURL(join(repoRoot, "test", "fixtures", "preload", "module-list-on-exit.mjs")).href}`,
    MODULE_LIST_FILE: listFile,
  });
  const http = env["PORT"]!;
  const client = new GrpcJsRateLimitClient(`127.0.0.1:${grpcPort}`);
  try {
    await waitFor(
      () => service.output().includes("ratelimit started"),
      "the service to listen",
      20_000,
    ).catch((err: unknown) => {
      throw new Error(`${String(err)}; output: ${service.output()}`, {
        cause: err,
      });
    });
    const answer = await client.shouldRateLimit(
      request("rl", [["category", "account"]]),
      10_000,
    );
    expect(answer.overallCode).toBeGreaterThan(0);
    const json = await fetch(`http://127.0.0.1:${http}/json`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: jsonRequest("rl", [["category", "account"]]),
    });
    expect(json.status).toBe(200);
    expect((await fetch(`http://127.0.0.1:${http}/healthcheck`)).status).toBe(
      200,
    );
  } finally {
    client.close();
    service.child.kill("SIGTERM");
    await service.exited;
  }
  return (await readFile(listFile, "utf8")).split("\n");
}

describe("the bundle's start loads only what its settings use", () => {
  it("memory backend, default settings", async () => {
    const loaded = await modulesLoaded("memory", { BACKEND_TYPE: "memory" });
    expect(unused.filter((m) => loaded.includes(m))).toEqual([]);
  }, 30_000);

  it("kv backend without TLS", async () => {
    const loaded = await modulesLoaded("kv", {
      BACKEND_TYPE: "kv",
      KV_SOCKET_TYPE: "tcp",
      KV_URL: redis.address,
    });
    expect(unused.filter((m) => loaded.includes(m))).toEqual([]);
  }, 30_000);

  it("the node engine loads node:http2 (the control)", async () => {
    const loaded = await modulesLoaded("node-engine", {
      BACKEND_TYPE: "memory",
      GRPC_HTTP2_ENGINE: "node",
    });
    expect(loaded).toContain("NativeModule http2");
  }, 30_000);
});
