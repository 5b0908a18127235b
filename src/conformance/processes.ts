// Child processes of launch mode: a redis-server or memcached on loopback, and the server
// under test started from the user's command. Every process is started in a process group of
// its own and stopped through that group only.
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { createConnection, createServer } from "node:net";

/** A process started by the suite. */
export interface Child {
  readonly pid: number;
  /** The last few KiB of its stdout and stderr. */
  output(): string;
  /** Resolves with the exit code or signal name once it ended. */
  readonly exited: Promise<number | string>;
  hasExited(): boolean;
  /** SIGTERM to its group, SIGKILL after `graceMs`; resolves once it ended. */
  stop(graceMs?: number): Promise<void>;
  /** Sends `signal` to its process group (nothing once it ended). */
  signal(signal: NodeJS.Signals): void;
}

const outputKeep = 8_192;

/**
 * Starts `command` through `/bin/sh -c` in a new process group, with `env` as its whole
 * environment.
 *
 * @throws Error when the shell cannot be started
 */
export function startChild(
  command: string,
  env: Readonly<Record<string, string>>,
  cwd?: string,
): Child {
  const child: ChildProcess = spawn("/bin/sh", ["-c", `exec ${command}`], {
    env,
    ...(cwd !== undefined ? { cwd } : {}),
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
  const pid = child.pid;
  if (pid === undefined) throw new Error(`could not start: ${command}`);
  let out = "";
  const keep = (d: Buffer): void => {
    out = (out + d.toString()).slice(-outputKeep);
  };
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);
  let ended = false;
  const exited = new Promise<number | string>((resolve) => {
    child.on("exit", (code, signal) => {
      ended = true;
      resolve(code ?? signal ?? -1);
    });
  });
  const signalGroup = (signal: NodeJS.Signals): void => {
    try {
      process.kill(-pid, signal);
    } catch {
      // Already gone.
    }
  };
  return {
    pid,
    output: () => out,
    exited,
    hasExited: () => ended,
    signal(signal) {
      if (!ended) signalGroup(signal);
    },
    async stop(graceMs = 5_000) {
      if (ended) return;
      signalGroup("SIGTERM");
      const timer = setTimeout(() => {
        signalGroup("SIGKILL");
      }, graceMs);
      await exited;
      clearTimeout(timer);
    },
  };
}

/**
 * Ports this process has handed out recently. A caller usually asks for several ports before
 * anything listens on the first (one service's HTTP, gRPC and debug ports), so the probe alone
 * could hand out the same free port twice: seen as EADDRINUSE between a service's own
 * listeners. Cleared when it holds a quarter of the range.
 */
const handedOut = new Set<number>();

/**
 * Returns a TCP port on `host` (loopback by default) that was free a moment ago, below the
 * kernel's ephemeral range, and not returned before by this process (until a quarter of the
 * range has been): the one free-port helper of the conformance suite and of the test suite.
 *
 * @param host - the address to probe (loopback by default)
 * @throws Error when 50 random ports in the range were all taken
 */
export async function freePort(host = "127.0.0.1"): Promise<number> {
  // Below the ephemeral range (Linux: /proc/sys/net/ipv4/ip_local_port_range, 32768–60999 by
  // default): a port the kernel hands out for `listen(0)` or an outgoing connect can be taken by
  // any client (redis clients, Envoy, other tests) between our probe and the child's own listen,
  // which shows as EADDRINUSE under parallel tests; and a store a test kills and restarts on the
  // same port while a client keeps reconnecting could lose it to a TCP self-connect (source port
  // = destination port when nothing listens).
  const high = Math.min(32_000, ephemeralLow()) - 1;
  const low = Math.max(1024, high - 12_000);
  if (handedOut.size >= (high - low) / 4) handedOut.clear();
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = low + Math.floor(Math.random() * (high - low));
    if (handedOut.has(port)) continue;
    if (await canListen(port, host)) {
      handedOut.add(port);
      return port;
    }
  }
  throw new Error(
    `no free port on ${host} in ${low}-${high - 1} after 50 tries`,
  );
}

function ephemeralLow(): number {
  try {
    const [first] = readFileSync(
      "/proc/sys/net/ipv4/ip_local_port_range",
      "utf8",
    )
      .trim()
      .split(/\s+/);
    const value = Number(first);
    return Number.isInteger(value) && value > 2000 ? value : 32768;
  } catch {
    // Not Linux: the IANA dynamic range starts at 49152.
    return 49152;
  }
}

function canListen(port: number, host: string): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => {
      resolve(false);
    });
    server.listen(port, host, () => {
      server.close(() => {
        resolve(true);
      });
    });
  });
}

/** True when something accepts TCP connections on `127.0.0.1:port`. */
export function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: "127.0.0.1", port });
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => {
      resolve(false);
    });
  });
}

/** Resolves after `ms` milliseconds. */
export function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** A counter store started for launch mode. */
export interface Store {
  readonly kind: "kv" | "mc";
  /** `127.0.0.1:<port>`. */
  readonly address: string;
  /** SIGSTOP: the store stops answering, connections stay open. */
  freeze(): void;
  /** SIGCONT after a freeze. */
  thaw(): void;
  stop(): Promise<void>;
}

/**
 * Starts a redis-server (`kv`) or memcached (`mc`) on a free loopback port, without
 * persistence, and waits until it accepts connections.
 *
 * @throws Error when it is not installed or does not listen within 10 s
 */
export async function startStore(
  kind: "kv" | "mc",
  env: Readonly<Record<string, string>>,
): Promise<Store> {
  const port = await freePort();
  const command =
    kind === "kv"
      ? `redis-server --port ${port} --bind 127.0.0.1 --save '' --appendonly no`
      : // memcached refuses to run as root unless told which user to be.
        `memcached -l 127.0.0.1 -p ${port} -U 0${process.getuid?.() === 0 ? " -u root" : ""}`;
  const child = startChild(command, env);
  const deadline = Date.now() + 10_000;
  while (!(await canConnect(port))) {
    if (child.hasExited() || Date.now() > deadline) {
      await child.stop();
      throw new Error(
        `${kind === "kv" ? "redis-server" : "memcached"} did not start on port ${port}: ${child.output().trim() || "no output (is it installed?)"}`,
      );
    }
    await delay(50);
  }
  return {
    kind,
    address: `127.0.0.1:${port}`,
    freeze: () => {
      child.signal("SIGSTOP");
    },
    thaw: () => {
      child.signal("SIGCONT");
    },
    stop: async () => {
      child.signal("SIGCONT");
      await child.stop();
    },
  };
}
