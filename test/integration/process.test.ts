import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  freePort,
  repoRoot,
  spawnNode,
  type Spawned,
} from "../helpers/spawn-service.js";
import { startRedisServer } from "../helpers/redis-server.js";
import { waitFor } from "../helpers/wait-for.js";
import { minuteWithRoom } from "../helpers/windows.js";

// Drives the built service as a real child process: the compiled modules (dist/src/main.js,
// what `make run` starts) and the esbuild bundle (dist/bundle/main.js, what bin/ratelimit
// starts), so the shipped bundle passes the same checks.
describe.each(["dist/src/main.js", "dist/bundle/main.js"])(
  "the ratelimit process (%s)",
  (entry) => {
    let ports: { http: number; grpc: number; debug: number };
    let service: Spawned;
    let env: Record<string, string>;

    beforeAll(async () => {
      ports = {
        http: await freePort(),
        grpc: await freePort(),
        debug: await freePort(),
      };
      env = {
        BACKEND_TYPE: "memory",
        HOST: "127.0.0.1",
        PORT: String(ports.http),
        GRPC_HOST: "127.0.0.1",
        GRPC_PORT: String(ports.grpc),
        DEBUG_HOST: "127.0.0.1",
        DEBUG_PORT: String(ports.debug),
        RUNTIME_ROOT: join(repoRoot, "examples"),
        RUNTIME_SUBDIRECTORY: "",
        RUNTIME_WATCH_ROOT: "false",
        LOG_LEVEL: "info",
        LOG_FORMAT: "json",
        // A Go reference variable name, which is ignored with a warning.
        USE_STATSD: "false",
      };
      service = spawnNode(entry, [], env);
      await waitFor(
        () => service.output().includes("ratelimit started"),
        "the service to listen",
        20_000,
      );
    });

    afterAll(async () => {
      if (service.child.exitCode === null) service.child.kill("SIGKILL");
      await service.exited;
    });

    it("logs JSON lines with the loaded descriptors and the three addresses", () => {
      const lines = service
        .output()
        .split("\n")
        .filter((l) => l.startsWith("{"))
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      expect(lines.length).toBeGreaterThan(0);
      for (const line of lines) {
        expect(typeof line["@timestamp"]).toBe("string");
        expect(typeof line["@message"]).toBe("string");
        expect(typeof line["level"]).toBe("string");
      }
      const messages = lines.map((l) => String(l["@message"]));
      const limits = lines.map((l) => l["limit"]);
      expect(limits).toContain(
        "rl.category_account: unit=MINUTE requests_per_unit=4, shadow_mode: false, quota_mode: false",
      );
      expect(
        lines.some(
          (l) => l["@message"] === "loaded domain" && l["domain"] === "rl",
        ),
      ).toBe(true);
      for (const what of ["debug", "gRPC", "HTTP"]) {
        expect(
          messages.some((m) => m.startsWith(`listening for ${what}`)),
        ).toBe(true);
      }
    });

    it("logs one start-up summary line: backend, failure mode, statistics, config source, engine, addresses", async () => {
      // Logged right after the HTTP listener's line, which beforeAll waited for.
      await waitFor(
        () => service.output().includes("ratelimit started"),
        "the start-up summary",
        5_000,
      );
      const summaries = service
        .output()
        .split("\n")
        .filter((l) => l.startsWith("{"))
        .map((l) => JSON.parse(l) as Record<string, unknown>)
        .filter((l) => l["@message"] === "ratelimit started");
      expect(summaries).toHaveLength(1);
      expect(summaries[0]).toMatchObject({
        backend: "memory",
        failureMode: "none",
        statsSink: "pushstats",
        configSource: `files ${join(repoRoot, "examples")}`,
        http2Engine: "builtin",
        grpc: `127.0.0.1:${String(ports.grpc)}`,
        http: `127.0.0.1:${String(ports.http)}`,
        debug: `127.0.0.1:${String(ports.debug)}`,
      });
    });

    it("warns once about a Go reference variable name, naming the setting that replaces it", () => {
      const warnings = service
        .output()
        .split("\n")
        .filter((l) => l.includes("USE_STATSD"));
      expect(warnings).toHaveLength(1);
      const line = JSON.parse(warnings[0]!) as Record<string, unknown>;
      expect(line["level"]).toBe("warning");
      expect(String(line["@message"])).toContain(
        "USE_STATSD is the Go reference's name and is ignored: set USE_PUSHSTATS",
      );
    });

    it("answers bin/ratelimit-client, counting down then OVER_LIMIT", async () => {
      const run = async (): Promise<string> => {
        const client = spawnNode(
          "dist/src/cli/client.js",
          [
            "-dial_string",
            `127.0.0.1:${ports.grpc}`,
            "-domain",
            "rl",
            "-descriptors",
            "client_id=cli,path=x",
            "-descriptors",
            "category=account",
          ],
          {},
        );
        expect(await client.exited).toBe(0);
        return client.output();
      };
      // Five client processes in one minute window: each may take seconds on a loaded machine.
      await minuteWithRoom(20);
      const first = await run();
      expect(first).toContain(
        "descriptor category=account: OK, limit 4 per MINUTE, 3 remaining",
      );
      expect(first).toContain("overall: OK");
      for (let i = 0; i < 3; i++) await run();
      const over = await run();
      expect(over).toContain("descriptor category=account: OVER_LIMIT");
      expect(over).toContain("overall: OVER_LIMIT");
    }, 90_000);

    it("does not die on SIGHUP, and drains and exits 0 on SIGTERM", async () => {
      service.child.kill("SIGHUP");
      await new Promise((r) => setTimeout(r, 300));
      const res = await fetch(`http://127.0.0.1:${ports.http}/healthcheck`);
      expect(res.status).toBe(200);
      service.child.kill("SIGTERM");
      expect(await service.exited).toBe(0);
    });
  },
);

describe("the bundle on the key-value backend", () => {
  it("loads the backend's chunk and counts in redis-server with the reference's cache keys", async () => {
    const redis = await startRedisServer();
    const http = await freePort();
    const service = spawnNode("dist/bundle/main.js", [], {
      BACKEND_TYPE: "kv",
      KV_SOCKET_TYPE: "tcp",
      KV_URL: redis.address,
      HOST: "127.0.0.1",
      PORT: String(http),
      GRPC_HOST: "127.0.0.1",
      GRPC_PORT: String(await freePort()),
      DEBUG_HOST: "127.0.0.1",
      DEBUG_PORT: String(await freePort()),
      RUNTIME_ROOT: join(repoRoot, "examples"),
      RUNTIME_SUBDIRECTORY: "",
      RUNTIME_WATCH_ROOT: "false",
      USE_PUSHSTATS: "false",
      LOG_LEVEL: "warn",
    });
    try {
      await waitFor(
        () => service.output().includes("ratelimit started"),
        "the service to listen",
        20_000,
      );
      const res = await fetch(`http://127.0.0.1:${http}/json`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          domain: "rl",
          descriptors: [{ entries: [{ key: "category", value: "account" }] }],
        }),
      });
      expect(res.status).toBe(200);
      expect(await res.json()).toMatchObject({ overallCode: "OK" });
      const admin = redis.client();
      const keys = await admin.keys("rl_category_account_*");
      await admin.quit();
      expect(keys).toHaveLength(1);
    } finally {
      service.child.kill("SIGKILL");
      await service.exited;
      await redis.stop();
    }
  });
});

describe("start-up errors", () => {
  it("reports every invalid setting at once and exits non-zero", async () => {
    const p = spawnNode("dist/src/main.js", [], {
      PORT: "eighty",
      NEAR_LIMIT_RATIO: "2",
      LOG_LEVEL: "loud",
    });
    const code = await p.exited;
    expect(code).not.toBe(0);
    for (const name of ["PORT", "NEAR_LIMIT_RATIO", "LOG_LEVEL"])
      expect(p.output()).toContain(name);
  });

  it("names kv for BACKEND_TYPE=redis, and the setting for each Go reference name", async () => {
    const p = spawnNode("dist/src/main.js", [], {
      BACKEND_TYPE: "redis",
      REDIS_URL: "127.0.0.1:6379",
    });
    expect(await p.exited).not.toBe(0);
    expect(p.output()).toContain("set BACKEND_TYPE=kv");
    expect(p.output()).toContain(
      "REDIS_URL is the Go reference's name and is ignored: set KV_URL",
    );
  });

  it("prints the settings table for --help", async () => {
    const p = spawnNode("dist/src/main.js", ["--help"], {});
    expect(await p.exited).toBe(0);
    expect(p.output()).toContain("GRPC_PORT");
    expect(p.output()).toContain("KV_URL");
  });

  it("keeps serving with a broken initial config, answering UNAVAILABLE until it is fixed", async () => {
    const dir = await mkdtemp(join(tmpdir(), "rls-bad-"));
    try {
      const { mkdir, writeFile } = await import("node:fs/promises");
      await mkdir(join(dir, "config"));
      await writeFile(
        join(dir, "config", "bad.yaml"),
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
      );
      const http = await freePort();
      const p = spawnNode("dist/src/main.js", [], {
        BACKEND_TYPE: "memory",
        HOST: "127.0.0.1",
        PORT: String(http),
        GRPC_HOST: "127.0.0.1",
        GRPC_PORT: String(await freePort()),
        DEBUG_HOST: "127.0.0.1",
        DEBUG_PORT: String(await freePort()),
        RUNTIME_ROOT: dir,
        RUNTIME_WATCH_ROOT: "false",
        LOG_LEVEL: "info",
      });
      try {
        await waitFor(
          () => p.output().includes("ratelimit started"),
          "the service to listen",
          20_000,
        );
        expect(p.output()).toContain(
          "bad.yaml: invalid rate limit unit 'fortnight'",
        );
        const res = await fetch(`http://127.0.0.1:${http}/json`, {
          method: "POST",
          body: '{"domain":"d","descriptors":[{"entries":[{"key":"a","value":"b"}]}]}',
        });
        expect(res.status).toBe(503);
        await writeFile(
          join(dir, "config", "bad.yaml"),
          "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
        );
        await waitFor(
          async () =>
            (
              await fetch(`http://127.0.0.1:${http}/json`, {
                method: "POST",
                body: '{"domain":"d","descriptors":[{"entries":[{"key":"a","value":"b"}]}]}',
              })
            ).status === 200,
          "the fixed config to load",
        );
      } finally {
        p.child.kill("SIGTERM");
        await p.exited;
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
