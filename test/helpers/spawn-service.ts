import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { freePort } from "../../src/conformance/processes.js";
import { waitFor } from "./wait-for.js";

export { freePort };

/** Root of the repository. */
export const repoRoot = join(import.meta.dirname, "..", "..");

/** A child process with its collected output. */
export interface Spawned {
  readonly child: ChildProcess;
  /** stdout + stderr so far. */
  output(): string;
  /** Resolves with the exit code (or signal name) once the process ends. */
  readonly exited: Promise<number | string>;
}

/** Spawns a built entry point (`dist/...`) with the current Node and the given env. */
export function spawnNode(
  script: string,
  args: readonly string[],
  env: Record<string, string>,
): Spawned {
  const child = spawn(process.execPath, [join(repoRoot, script), ...args], {
    env: { PATH: process.env["PATH"] ?? "", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout.on("data", (d: Buffer) => (out += d.toString()));
  child.stderr.on("data", (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | string>((resolve) => {
    child.on("exit", (code, signal) => {
      resolve(code ?? signal ?? -1);
    });
  });
  return { child, output: () => out, exited };
}

/**
 * Environment of a service spawned for HTTP/2 tests: memory backend, every listener on
 * loopback ports probed free, the config from `<root>/config` (not watched), statistics kept
 * but not pushed, JSON logs at `warn`; `extra` added last.
 *
 * @returns the environment and the gRPC port in it
 */
export async function memoryServiceEnv(
  engine: string,
  root: string,
  extra: Record<string, string> = {},
): Promise<{ env: Record<string, string>; grpcPort: number }> {
  const grpcPort = await freePort();
  return {
    grpcPort,
    env: {
      BACKEND_TYPE: "memory",
      HOST: "127.0.0.1",
      PORT: String(await freePort()),
      GRPC_HOST: "127.0.0.1",
      GRPC_PORT: String(grpcPort),
      GRPC_HTTP2_ENGINE: engine,
      DEBUG_HOST: "127.0.0.1",
      DEBUG_PORT: String(await freePort()),
      RUNTIME_ROOT: root,
      RUNTIME_SUBDIRECTORY: "",
      RUNTIME_APPDIRECTORY: "config",
      RUNTIME_WATCH_ROOT: "false",
      USE_PUSHSTATS: "false",
      LOG_LEVEL: "warn",
      LOG_FORMAT: "json",
      ...extra,
    },
  };
}

/** What a command run to its end printed, and how it ended. */
export interface RunResult {
  /** Exit code, or the signal's name. */
  readonly code: number | string;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Runs `command` to its end with `env` as its whole environment, collecting its output.
 *
 * @throws when the command cannot be started (the spawn error)
 */
export function runToEnd(
  command: string,
  args: readonly string[],
  options: { readonly env: NodeJS.ProcessEnv; readonly cwd?: string },
): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      ...(options.cwd !== undefined ? { cwd: options.cwd } : {}),
      env: options.env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    child.on("error", reject);
    child.on("exit", (code, signal) => {
      resolve({ code: code ?? signal ?? -1, stdout, stderr });
    });
  });
}

/** A service process started by {@link startReplica}. */
export interface Replica {
  /** `host:port` of its gRPC listener. */
  readonly grpc: string;
  /** `host:port` of its debug listener (`/stats`). */
  readonly debug: string;
  readonly spawned: Spawned;
}

/**
 * Starts one service replica (dist/src/main.js, built-in engine) with the env of
 * {@link memoryServiceEnv} plus `extra` (its backend settings, WORKERS...), and resolves once
 * its `/healthcheck` answers 200.
 *
 * @throws Error (from waitFor) when it is not healthy within 20 s, with its output
 */
export async function startReplica(
  root: string,
  extra: Readonly<Record<string, string>>,
): Promise<Replica> {
  const { env, grpcPort } = await memoryServiceEnv("builtin", root, extra);
  const http = env["PORT"]!;
  const spawned = spawnNode("dist/src/main.js", [], env);
  await waitFor(
    async () => {
      try {
        const res = await fetch(`http://127.0.0.1:${http}/healthcheck`);
        return res.status === 200 ? true : undefined;
      } catch {
        return undefined;
      }
    },
    `replica /healthcheck (output: ${spawned.output()})`,
    20_000,
  );
  return {
    grpc: `127.0.0.1:${grpcPort}`,
    debug: `127.0.0.1:${env["DEBUG_PORT"]!}`,
    spawned,
  };
}

/** A counter of a replica's `/stats` (0 when absent). */
export async function replicaStat(
  replica: Replica,
  name: string,
): Promise<number> {
  const text = await (await fetch(`http://${replica.debug}/stats`)).text();
  const line = text.split("\n").find((l) => l.startsWith(`${name}: `));
  return line === undefined ? 0 : Number(line.slice(name.length + 2));
}
