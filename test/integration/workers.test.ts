import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RateLimitResponse_Code as Code } from "../../src/proto.js";
import { GrpcJsRateLimitClient } from "../helpers/grpc-js-client.js";
import { startRedisServer, type RedisServer } from "../helpers/redis-server.js";
import { freePort, spawnNode, type Spawned } from "../helpers/spawn-service.js";
import { waitFor } from "../helpers/wait-for.js";
import { request } from "../helpers/requests.js";

const config = (limit: number): string => `
domain: rl
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: ${limit} }
`;

/** Decides once on a fresh connection (so the calls spread over the workers). */
async function decideOnce(grpc: number, user: string) {
  const client = new GrpcJsRateLimitClient(`127.0.0.1:${grpc}`);
  try {
    return await client.shouldRateLimit(request("rl", [["user", user]]));
  } finally {
    client.close();
  }
}

describe("WORKERS=2 on the key-value backend", () => {
  let redis: RedisServer;
  let service: Spawned;
  let grpc: number;
  let http: number;
  const dir = mkdtempSync(join(tmpdir(), "rls-workers-"));

  beforeAll(async () => {
    redis = await startRedisServer();
    mkdirSync(join(dir, "config"));
    writeFileSync(join(dir, "config", "rl.yaml"), config(5));
    grpc = await freePort();
    http = await freePort();
    service = spawnNode("dist/src/main.js", [], {
      BACKEND_TYPE: "kv",
      KV_SOCKET_TYPE: "tcp",
      KV_URL: `127.0.0.1:${redis.port}`,
      WORKERS: "2",
      HOST: "127.0.0.1",
      PORT: String(http),
      GRPC_HOST: "127.0.0.1",
      GRPC_PORT: String(grpc),
      DEBUG_HOST: "127.0.0.1",
      DEBUG_PORT: String(await freePort()),
      RUNTIME_ROOT: dir,
      RUNTIME_WATCH_ROOT: "false",
      USE_PUSHSTATS: "false",
      DISABLE_STATS: "true",
      LOG_LEVEL: "info",
    });
    await waitFor(
      () => service.output().split("ratelimit started").length - 1 === 2,
      "both workers to listen",
      30_000,
    );
  });

  afterAll(async () => {
    if (service.child.exitCode === null) service.child.kill("SIGKILL");
    await redis.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("runs two worker processes under the primary", () => {
    const children = execFileSync(
      "ps",
      ["-o", "pid=", "--ppid", String(service.child.pid)],
      {
        encoding: "utf8",
      },
    )
      .trim()
      .split("\n")
      .filter((line) => line.trim() !== "");
    expect(children).toHaveLength(2);
  });

  it("counts exactly across workers through the shared store", async () => {
    const codes: Code[] = [];
    for (let i = 0; i < 8; i++)
      codes.push((await decideOnce(grpc, "shared")).overallCode);
    expect(codes.filter((c) => c === Code.OK)).toHaveLength(5);
    expect(codes.filter((c) => c === Code.OVER_LIMIT)).toHaveLength(3);
  });

  it("reloads the config in every worker", async () => {
    writeFileSync(join(dir, "config", "rl.yaml"), config(1000));
    await waitFor(async () => {
      const limits = await Promise.all(
        Array.from(
          { length: 6 },
          async () =>
            (await decideOnce(grpc, "reload")).statuses[0]?.currentLimit
              ?.requestsPerUnit,
        ),
      );
      return limits.every((l) => l === 1000);
    }, "every worker to use the new limit");
  });

  it("answers /healthcheck and stops every worker on SIGTERM, exiting 0", async () => {
    expect((await fetch(`http://127.0.0.1:${http}/healthcheck`)).status).toBe(
      200,
    );
    service.child.kill("SIGTERM");
    expect(await service.exited).toBe(0);
  });
});
