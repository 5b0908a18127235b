// The last failed config reload as operators see it, on the built service with a file provider:
// the `/healthcheck` body (status unchanged), `/rlconfig?format=json`, the
// `ratelimit.service.config_last_load_failed` gauge on `/stats`, and the start-up warning when a
// broken initial config leaves health serving (docs/configuration.md#errors).
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
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { freePort, spawnNode, type Spawned } from "../helpers/spawn-service.js";
import { waitFor } from "../helpers/wait-for.js";
import type { ConfigReloadStatus } from "../../src/config/reload-status.js";

/** The JSON form of `/rlconfig` (the contract the web console reads). */
/** The JSON form of `/rlconfig` (src/server/debug-server.ts `rlconfigJson`). */
interface RlconfigJson extends ConfigReloadStatus {
  readonly domains: string[];
  readonly config: string;
}

const rfc3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;
const gauge = "ratelimit.service.config_last_load_failed";

const goodConfig = (requestsPerUnit: number): string =>
  `domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: ${requestsPerUnit}\n`;
// Line 6 holds the misspelt key.
const badConfig =
  "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requets_per_unit: 5\n";

describe("the last failed config reload", () => {
  let base: string;
  let service: Spawned | undefined;
  let ports: { http: number; debug: number };
  let version = 0;

  beforeEach(async () => {
    base = await mkdtemp(join(tmpdir(), "rls-reload-status-"));
    ports = { http: await freePort(), debug: await freePort() };
  });
  afterEach(async () => {
    if (service !== undefined) {
      service.child.kill("SIGTERM");
      await service.exited;
      service = undefined;
    }
    await rm(base, { recursive: true, force: true });
  });

  /** Writes `config/a.yaml` into a new version directory and points `current` at it atomically. */
  async function publish(text: string): Promise<void> {
    version += 1;
    const dir = join(base, `v${version}`);
    const file = join(dir, "rl", "config", "a.yaml");
    await mkdir(dirname(file), { recursive: true });
    await writeFile(file, text);
    const link = join(base, "current");
    await symlink(dir, `${link}.tmp`);
    await rename(`${link}.tmp`, link);
  }

  async function start(extra: Record<string, string> = {}): Promise<Spawned> {
    const spawned = spawnNode("dist/src/main.js", [], {
      BACKEND_TYPE: "memory",
      HOST: "127.0.0.1",
      PORT: String(ports.http),
      GRPC_HOST: "127.0.0.1",
      GRPC_PORT: String(await freePort()),
      DEBUG_HOST: "127.0.0.1",
      DEBUG_PORT: String(ports.debug),
      RUNTIME_ROOT: join(base, "current"),
      RUNTIME_SUBDIRECTORY: "rl",
      RUNTIME_WATCH_ROOT: "true",
      USE_PUSHSTATS: "false",
      LOG_LEVEL: "info",
      ...extra,
    });
    service = spawned;
    await waitFor(
      () => spawned.output().includes("listening for gRPC"),
      "the service to listen",
      20_000,
    );
    return spawned;
  }

  async function rlconfig(accept?: string): Promise<RlconfigJson> {
    const res = await fetch(
      accept === undefined
        ? `http://127.0.0.1:${ports.debug}/rlconfig?format=json`
        : `http://127.0.0.1:${ports.debug}/rlconfig`,
      accept === undefined ? {} : { headers: { accept } },
    );
    expect(res.headers.get("content-type")).toBe("application/json");
    return (await res.json()) as RlconfigJson;
  }

  async function healthcheck(): Promise<{ status: number; body: string }> {
    const res = await fetch(`http://127.0.0.1:${ports.http}/healthcheck`);
    return { status: res.status, body: await res.text() };
  }

  /** The gauge's value on `/stats`, or undefined while it does not exist. */
  async function lastLoadFailed(): Promise<string | undefined> {
    const text = await (
      await fetch(`http://127.0.0.1:${ports.debug}/stats`)
    ).text();
    return text
      .split("\n")
      .find((line) => line.startsWith(`${gauge}: `))
      ?.slice(gauge.length + 2);
  }

  it("is shown after a bad reload and cleared by the next good one", async () => {
    await publish(goodConfig(3));
    const spawned = await start();
    const plainBefore = await (
      await fetch(`http://127.0.0.1:${ports.debug}/rlconfig`)
    ).text();
    expect(plainBefore).toBe(
      "d.k: unit=MINUTE requests_per_unit=3, shadow_mode: false, quota_mode: false\n",
    );
    const loaded = await rlconfig();
    expect(loaded).toMatchObject({
      domains: ["d"],
      config: plainBefore,
      lastFailedReload: null,
    });
    expect(loaded.loadedAt).toMatch(rfc3339);
    expect(await healthcheck()).toEqual({ status: 200, body: "OK" });
    // A process whose loads all succeed has only the reference's statistics.
    expect(await lastLoadFailed()).toBeUndefined();

    await publish(badConfig);
    const failed = await waitFor(
      async () => (await rlconfig()).lastFailedReload ?? undefined,
      "the failed reload to show",
    );
    expect(failed).toMatchObject({
      file: "config.a.yaml",
      line: 6,
      fieldPath: "descriptors[0].rate_limit.requets_per_unit",
      message:
        "config error, unknown key 'requets_per_unit' (did you mean 'requests_per_unit'?); " +
        "field descriptors[0].rate_limit.requets_per_unit",
    });
    expect(failed.time).toMatch(rfc3339);
    // The previous config keeps serving, and its load time stays.
    const after = await rlconfig("text/html, application/json;q=0.9");
    expect(after.config).toBe(plainBefore);
    expect(after.loadedAt).toBe(loaded.loadedAt);
    expect(
      await (await fetch(`http://127.0.0.1:${ports.debug}/rlconfig`)).text(),
    ).toBe(plainBefore);
    expect(await healthcheck()).toEqual({
      status: 200,
      body: `OK\nlast config reload failed at ${failed.time}: config.a.yaml:6: ${failed.message}`,
    });
    expect(await lastLoadFailed()).toBe("1");
    expect(spawned.output()).toContain(
      "error loading new configuration: config.a.yaml: config error, unknown key 'requets_per_unit' " +
        "(did you mean 'requests_per_unit'?); line 6, field descriptors[0].rate_limit.requets_per_unit",
    );

    await publish(goodConfig(4));
    await waitFor(
      async () => (await rlconfig()).lastFailedReload === null,
      "the good reload to clear the failure",
    );
    const fixed = await rlconfig();
    expect(fixed.config).toContain("requests_per_unit=4");
    expect(await healthcheck()).toEqual({ status: 200, body: "OK" });
    expect(await lastLoadFailed()).toBe("0");
  });

  it("warns at start when a broken config leaves health serving, and keeps the reference's answer", async () => {
    await publish(badConfig);
    const spawned = await start();
    const health = await healthcheck();
    expect(health.status).toBe(200);
    expect(health.body).toMatch(
      /^OK\nlast config reload failed at \S+: config\.a\.yaml:6: config error, unknown key 'requets_per_unit'/,
    );
    expect(spawned.output()).toContain(
      "set HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true",
    );
    const status = await rlconfig();
    expect(status).toMatchObject({
      domains: [],
      config: "",
      loadedAt: null,
    });
    expect(status.lastFailedReload?.line).toBe(6);
  });

  it("does not warn when health follows the config", async () => {
    await publish(badConfig);
    const spawned = await start({
      HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: "true",
    });
    const health = await healthcheck();
    expect(health.status).toBe(500);
    expect(health.body).toMatch(
      /^unhealthy: config\nlast config reload failed at /,
    );
    expect(spawned.output()).not.toContain(
      "set HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true",
    );
  });
});
