import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";
import {
  repoRoot,
  runToEnd,
  type RunResult,
} from "../helpers/spawn-service.js";

// The three launchers of bin/ in the source checkout: --version, arguments they refuse, and
// the client's GRPC_HOST/GRPC_PORT default and rule windows against a real gRPC listener.

const { version } = JSON.parse(
  readFileSync(join(repoRoot, "package.json"), "utf8"),
) as { version: string };

type Run = RunResult;

/** Runs `bin/<command>` with only PATH and `env` in its environment. */
function runBin(
  command: string,
  args: readonly string[],
  env: Record<string, string> = {},
): Promise<Run> {
  return runToEnd(join(repoRoot, "bin", command), args, {
    env: { PATH: process.env["PATH"] ?? "", ...env },
  });
}

describe("--version", () => {
  it.each([
    ["ratelimit", "--version"],
    ["ratelimit", "-version"],
    ["ratelimit-client", "-version"],
    ["ratelimit-client", "--version"],
    ["ratelimit-config-check", "-version"],
    ["ratelimit-config-check", "--version"],
  ])(
    "%s %s prints package.json's version and exits 0",
    async (command, flag) => {
      // Ports that would fail to bind if the service started instead of answering.
      const r = await runBin(command, [flag], { PORT: "1", GRPC_PORT: "1" });
      expect(r).toEqual({
        code: 0,
        stdout: `${command} ${version}\n`,
        stderr: "",
      });
    },
  );
});

describe("unknown arguments", () => {
  it("ratelimit refuses one with the usage and exit code 2, starting nothing", async () => {
    const r = await runBin("ratelimit", ["--port=9000"], {
      PORT: "1",
      GRPC_PORT: "1",
    });
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr).toContain('ratelimit: unknown argument "--port=9000"');
    expect(r.stderr).toContain("usage: ratelimit [--help | --version]");
  });

  it("ratelimit refuses an argument after --version", async () => {
    const r = await runBin("ratelimit", ["--version", "now"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('unknown argument "now"');
  });

  it("ratelimit --help still prints the settings table", async () => {
    const r = await runBin("ratelimit", ["--help"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("usage: ratelimit [--help | --version]");
    expect(r.stdout).toContain("GRPC_PORT");
  });

  it.each([
    ["ratelimit-client", ["-domain", "rl", "stray"]],
    ["ratelimit-config-check", ["-config_dir", "examples/config", "stray"]],
  ])(
    "%s refuses a non-flag argument with its usage and exit code 2",
    async (command, args) => {
      const r = await runBin(command, args);
      expect(r.code).toBe(2);
      expect(r.stderr).toContain('unexpected argument: "stray"');
      expect(r.stderr).toContain(`usage of ${command}:`);
    },
  );

  it.each(["ratelimit-client", "ratelimit-config-check"])(
    "%s refuses an unknown flag with exit code 2",
    async (command) => {
      const r = await runBin(command, ["-nope"]);
      expect(r.code).toBe(2);
      expect(r.stderr).toContain("flag provided but not defined: -nope");
    },
  );
});

const windowsConfig = `domain: win
descriptors:
  - key: tenths
    rate_limit: { unit: second, unit_multiplier: 10, requests_per_unit: 3 }
  - key: slide
    rate_limit: { unit: minute, requests_per_unit: 10, algorithm: sliding_window }
`;

describe("ratelimit-client against a service", () => {
  let explainOn: TestApp;
  let explainOff: TestApp;
  beforeAll(async () => {
    explainOn = await startTestApp(
      { "win.yaml": windowsConfig },
      { EXPLAIN_ENABLED: "true" },
    );
    explainOff = await startTestApp({ "win.yaml": windowsConfig });
  });
  afterAll(async () => {
    await explainOn.stop();
    await explainOff.stop();
  });

  const portOf = (address: string): string =>
    address.slice(address.lastIndexOf(":") + 1);

  it("dials GRPC_HOST:GRPC_PORT without -dial_string and prints the real windows", async () => {
    const r = await runBin(
      "ratelimit-client",
      ["-domain", "win", "-descriptors", "tenths=a", "-descriptors", "slide=b"],
      { GRPC_HOST: "127.0.0.1", GRPC_PORT: portOf(explainOn.addresses.grpc) },
    );
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(
      /^descriptor tenths=a: OK, limit 3 per 10 SECOND \(10s window\), 2 remaining, resets in \d+s$/m,
    );
    expect(r.stdout).toMatch(
      /^descriptor slide=b: OK, limit 10 per MINUTE, sliding window, 9 remaining, count falls by one in \d+s$/m,
    );
    expect(r.stdout).not.toContain("note:");
  });

  it("a wildcard GRPC_HOST dials localhost", async () => {
    const r = await runBin(
      "ratelimit-client",
      ["-domain", "win", "-descriptors", "tenths=c"],
      { GRPC_HOST: "0.0.0.0", GRPC_PORT: portOf(explainOn.addresses.grpc) },
    );
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(
      "descriptor tenths=c: OK, limit 3 per 10 SECOND",
    );
  });

  it("without the server's Explain API, prints the unit and says the window is unknown", async () => {
    const r = await runBin(
      "ratelimit-client",
      ["-domain", "win", "-descriptors", "tenths=a"],
      { GRPC_PORT: portOf(explainOff.addresses.grpc), GRPC_HOST: "127.0.0.1" },
    );
    expect(r.code).toBe(0);
    expect(r.stderr).toBe("");
    expect(r.stdout).toMatch(
      /^descriptor tenths=a: OK, limit 3 per SECOND, 2 remaining/m,
    );
    expect(r.stdout).toContain("note: window shown as the unit alone");
  });
});
