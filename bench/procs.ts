// Processes for `make bench`: start and stop targets, wait for them, run load tools (bounded),
// and read CPU time and resident memory of a target's whole process tree from /proc.
import { spawn, type ChildProcess } from "node:child_process";
import {
  closeSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  statSync,
} from "node:fs";
import { connect, createServer } from "node:net";

const children = new Set<ChildProcess>();

/** Kills every process started with {@link startProcess} (SIGKILL); for the final clean-up. */
export function killAll(): void {
  for (const child of children)
    if (child.exitCode === null && child.signalCode === null)
      child.kill("SIGKILL");
}

/** Returns a TCP port on 127.0.0.1 that was free a moment ago. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port =
        typeof address === "object" && address !== null ? address.port : 0;
      server.close(() => {
        resolve(port);
      });
    });
  });
}

/** A started process with the tail of its output. */
export interface Started {
  readonly child: ChildProcess;
  readonly pid: number;
  /** The last 8,000 bytes of stdout + stderr. */
  output(): string;
  /** SIGTERM, SIGKILL after 10 s; resolves once it has exited. */
  stop(): Promise<void>;
}

/**
 * Spawns `command` with `env` added to this process's environment. Its stdout and stderr go to
 * `logFile` (not through a pipe to this process, whose reading would cost CPU on the machine
 * under test: both services write a statistics line per call when no sink is configured).
 */
export function startProcess(
  command: string,
  args: readonly string[],
  env: Record<string, string>,
  logFile: string,
): Started {
  const fd = openSync(logFile, "w");
  const child = spawn(command, args, {
    env: { ...process.env, ...env },
    stdio: ["ignore", fd, fd],
  });
  closeSync(fd);
  children.add(child);
  const exited = new Promise<void>((resolve) => {
    child.once("exit", () => {
      children.delete(child);
      resolve();
    });
  });
  if (child.pid === undefined) throw new Error(`could not start ${command}`);
  return {
    child,
    pid: child.pid,
    output: () => {
      try {
        const size = statSync(logFile).size;
        const tail = Buffer.alloc(Math.min(size, 8000));
        const read = openSync(logFile, "r");
        try {
          readSync(read, tail, 0, tail.length, size - tail.length);
        } finally {
          closeSync(read);
        }
        return tail.toString();
      } catch {
        return "";
      }
    },
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Resolves once something accepts TCP connections on 127.0.0.1:`port`. */
export async function waitForPort(
  port: number,
  started: Started,
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const up = await new Promise<boolean>((resolve) => {
      const socket = connect(port, "127.0.0.1");
      socket.once("connect", () => {
        socket.destroy();
        resolve(true);
      });
      socket.once("error", () => {
        resolve(false);
      });
    });
    if (up) return;
    if (started.child.exitCode !== null)
      throw new Error(`process exited before listening:\n${started.output()}`);
    if (Date.now() > deadline)
      throw new Error(
        `nothing listens on 127.0.0.1:${port}:\n${started.output()}`,
      );
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Resolves once `url` answers 200 (a health check). */
export async function waitForHttp200(
  url: string,
  started: Started,
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const response = await fetch(url);
      await response.arrayBuffer();
      if (response.status === 200) return;
    } catch {
      // Not listening yet.
    }
    if (started.child.exitCode !== null)
      throw new Error(
        `process exited before it was healthy:\n${started.output()}`,
      );
    if (Date.now() > deadline)
      throw new Error(`${url} did not answer 200:\n${started.output()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The result of {@link runTool}. */
export interface ToolResult {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Runs a load tool as a child process (never synchronously: the bench process may host
 * nothing, but the event loop stays free) and collects its output; killed after `timeoutMs`.
 */
export function runTool(
  command: string,
  args: readonly string[],
  timeoutMs: number,
  input?: string,
): Promise<ToolResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      stdio: [input === undefined ? "ignore" : "pipe", "pipe", "pipe"],
    });
    children.add(child);
    const stdout: Buffer[] = [];
    let stderr = "";
    child.stdout?.on("data", (d: Buffer) => stdout.push(d));
    child.stderr?.on("data", (d: Buffer) => {
      stderr = (stderr + d.toString()).slice(-8000);
    });
    if (input !== undefined) child.stdin?.end(input);
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.once("error", (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.once("close", (code) => {
      clearTimeout(timer);
      children.delete(child);
      resolve({ code, stdout: Buffer.concat(stdout).toString(), stderr });
    });
  });
}

/** `pid`'s parent, or undefined when the process has gone. */
function parentOf(pid: string): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
  } catch {
    return undefined;
  }
}

/** `pid` and all its descendants (e.g. the worker processes of WORKERS > 1). */
export function processTree(pid: number): number[] {
  const byParent = new Map<number, number[]>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const parent = parentOf(entry);
    if (parent === undefined) continue;
    const siblings = byParent.get(parent) ?? [];
    siblings.push(Number(entry));
    byParent.set(parent, siblings);
  }
  const tree: number[] = [];
  const queue = [pid];
  while (queue.length > 0) {
    const next = queue.shift()!;
    tree.push(next);
    queue.push(...(byParent.get(next) ?? []));
  }
  return tree;
}

const clockTicksPerSecond = 100;

/** CPU seconds (user + system) used so far by one process, 0 once it has gone. */
function processCpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    // Fields 14 and 15 of /proc/<pid>/stat (utime, stime), counted from "state" (field 3).
    return (Number(fields[11]) + Number(fields[12])) / clockTicksPerSecond;
  } catch {
    return 0;
  }
}

/** CPU seconds (user + system) used so far by `pid` and its descendants. */
export function treeCpuSeconds(pid: number): number {
  let total = 0;
  for (const p of processTree(pid)) total += processCpuSeconds(p);
  return total;
}

/** Resident memory of `pid`'s tree, in KiB: current and peak (VmRSS, VmHWM) per process. */
export interface TreeMemory {
  /** Sum of the processes' current RSS. */
  readonly rssKiB: number;
  /** Sum of the processes' peak RSS. */
  readonly peakKiB: number;
  /** The largest single process's peak RSS. */
  readonly maxProcessPeakKiB: number;
  readonly processes: number;
}

/** Reads {@link TreeMemory} from /proc/<pid>/status of every process in the tree. */
export function treeMemory(pid: number): TreeMemory {
  let rssKiB = 0;
  let peakKiB = 0;
  let maxProcessPeakKiB = 0;
  let processes = 0;
  for (const p of processTree(pid)) {
    let status: string;
    try {
      status = readFileSync(`/proc/${p}/status`, "utf8");
    } catch {
      continue;
    }
    const rss = Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1] ?? 0);
    const peak = Number(/VmHWM:\s+(\d+) kB/.exec(status)?.[1] ?? 0);
    rssKiB += rss;
    peakKiB += peak;
    maxProcessPeakKiB = Math.max(maxProcessPeakKiB, peak);
    processes += 1;
  }
  return { rssKiB, peakKiB, maxProcessPeakKiB, processes };
}
