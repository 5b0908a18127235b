import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runConfigCheckCommand } from "../../src/cli/config-check.js";
import { RateLimitService } from "../../src/proto.js";
import { FakeClock } from "../helpers/fake-clock.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";
import { repoRoot, runToEnd } from "../helpers/spawn-service.js";

// `ratelimit-config-check -canary` against a running service: the checked directory is sent
// inline with StartCanary, `-canary-report` and `-canary-stop` print the report, in process and
// through bin/ratelimit-config-check (after `make build`).

const live = `domain: rl
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 5 }
  - key: path
    rate_limit: { unit: minute, requests_per_unit: 2 }
`;

const candidate = `domain: rl
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: path
    rate_limit: { unit: minute, requests_per_unit: 4 }
`;

async function check(...argv: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runConfigCheckCommand(
    argv,
    (l) => out.push(l),
    (l) => err.push(l),
  );
  return { code, out, err };
}

describe("ratelimit-config-check -canary", () => {
  let t: TestApp;
  let dir: string;
  const clock = new FakeClock(1_700_000_040);
  beforeAll(async () => {
    t = await startTestApp({ "rl.yaml": live }, {}, undefined, { clock });
    dir = await mkdtemp(join(tmpdir(), "rls-canary-cli-"));
    await writeFile(join(dir, "rl.yaml"), candidate);
  });
  afterAll(async () => {
    await t.stop();
    await rm(dir, { recursive: true, force: true });
  });

  async function send(entries: string, times: number): Promise<void> {
    const client = createClient(
      RateLimitService,
      createGrpcTransport({ baseUrl: `http://${t.addresses.grpc}` }),
    );
    const [key = "", value = ""] = entries.split("=");
    for (let i = 0; i < times; i++)
      await client.shouldRateLimit({
        domain: "rl",
        descriptors: [{ entries: [{ key, value }] }],
      });
  }

  it("checks the directory, starts the canary with its files and prints the report", async () => {
    const debug = t.addresses.debug;
    const started = await check("-config_dir", dir, "-canary", debug);
    expect(started.code).toBe(0);
    expect(started.out.slice(0, 4)).toEqual([
      "checking rate limit configs...",
      `loading config directory: ${dir}`,
      `opening config file: ${join(dir, "rl.yaml")}`,
      "all rate limit configs ok",
    ]);
    expect(started.out[4]).toBe(
      `config canary started on ${debug} at 2023-11-14T22:14:00.000Z: domains rl`,
    );
    expect(started.out[5]).toBe(
      `report: ratelimit-config-check -canary ${debug} -canary-report`,
    );

    await send("user=alice", 6);
    await send("path=/a", 4);
    const report = await check("-canary", debug, "-canary-report");
    expect(report.code).toBe(0);
    expect(report.out).toEqual([
      `config canary on ${debug}: running, started 2023-11-14T22:14:00.000Z, candidate inline`,
      "requests 10, answered differently 4 (would refuse 2, would admit 2)",
      "",
      "rule     domain  would refuse  would admit",
      "rl.path  rl                 0            2",
      "rl.user  rl                 2            0",
      "",
      "rl.path: top values",
      "  descriptor  changed  would refuse",
      "  path=/a           2             0",
      "",
      "rl.user: top values",
      "  descriptor  changed  would refuse",
      "  user=alice        2             2",
    ]);

    const json = await check("-canary", debug, "-canary-report", "-json");
    expect(JSON.parse(json.out[0] ?? "")).toMatchObject({
      active: true,
      requests: "10",
      changedRequests: "4",
      source: "inline",
    });

    const stopped = await check("-canary", debug, "-canary-stop");
    expect(stopped.code).toBe(0);
    expect(stopped.out[0]).toContain("stopped, started");
    const again = await check("-canary", debug, "-canary-stop");
    expect(again.code).toBe(1);
    expect(again.out).toEqual([
      `error from the config canary at ${debug}: FAILED_PRECONDITION: no config canary is running`,
    ]);
  });

  it("does not start a canary when the check fails, and needs -canary for the report flags", async () => {
    const bad = await mkdtemp(join(tmpdir(), "rls-canary-cli-bad-"));
    try {
      await writeFile(
        join(bad, "rl.yaml"),
        "domain: rl\ndescriptors:\n  - key: user\n    rate_limit: { unit: minute, request_per_unit: 3 }\n",
      );
      const r = await check("-config_dir", bad, "-canary", t.addresses.debug);
      expect(r.code).toBe(1);
      expect(r.out.at(-1)).toMatch(/^error loading rate limit configs: /);
      expect(r.out.join("\n")).not.toContain("config canary started");
    } finally {
      await rm(bad, { recursive: true, force: true });
    }
    const flags = await check("-canary-report");
    expect(flags.code).toBe(2);
    expect(flags.err[0]).toBe(
      "flag -canary-report needs -canary <debug host:port>",
    );
    const unreachable = await check("-canary", "127.0.0.1:1", "-canary-report");
    expect(unreachable.code).toBe(1);
    expect(unreachable.out[0]).toMatch(
      /^error from the config canary at 127\.0\.0\.1:1: UNAVAILABLE: /,
    );
  });

  it("runs as bin/ratelimit-config-check", async () => {
    const r = await runToEnd(
      join(repoRoot, "bin", "ratelimit-config-check"),
      ["-config_dir", dir, "-canary", t.addresses.debug],
      { env: { PATH: process.env["PATH"] ?? "" } },
    );
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`config canary started on ${t.addresses.debug}`);
    const report = await runToEnd(
      join(repoRoot, "bin", "ratelimit-config-check"),
      ["-canary", t.addresses.debug, "-canary-report"],
      { env: { PATH: process.env["PATH"] ?? "" } },
    );
    expect(report.code).toBe(0);
    expect(report.stdout).toContain(
      "requests 0, answered differently 0 (would refuse 0, would admit 0)",
    );
    expect(report.stdout).toContain(
      "no request would have been answered differently",
    );
  });
});
