import { spawn, type ChildProcess } from "node:child_process";
import { createServer } from "node:net";
import { join } from "node:path";

/** Root of the repository. */
export const repoRoot = join(import.meta.dirname, "..", "..");

/** Returns a TCP port on `host` (loopback by default) that was free a moment ago. */
export function freePort(host = "127.0.0.1"): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, host, () => {
      const address = server.address();
      const port =
        typeof address === "object" && address !== null ? address.port : 0;
      server.close(() => {
        resolve(port);
      });
    });
  });
}

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
