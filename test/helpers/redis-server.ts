// Real redis-server processes for integration tests: Debian's redis-server / redis-cli bound to
// loopback on free ports, no persistence, each in its own temporary directory. Every process
// started here is killed by stopAllRedisServers() (call it in afterAll) and, as a safety net,
// when the test process exits.

import { TestPki } from "./certs.js";
import { freePort } from "./spawn-service.js";
import { spawn, execFile, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, connect as netConnect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { Redis } from "ioredis";

const execFileAsync = promisify(execFile);

const running = new Set<ChildProcess>();
const servers = new Set<{ stop(): Promise<void> }>();
process.once("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

export { freePort };

async function isFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => {
      resolve(false);
    });
    server.listen(port, "127.0.0.1", () => {
      server.close(() => {
        resolve(true);
      });
    });
  });
}

/** A free port whose cluster bus port (port + 10000) is free too. */
async function freeClusterPort(): Promise<number> {
  for (;;) {
    const port = 20000 + Math.floor(Math.random() * 20000);
    if ((await isFree(port)) && (await isFree(port + 10000))) return port;
  }
}

/** Resolves once something answers a raw `PING` on the port (any reply, even NOAUTH). */
async function waitForPing(port: number, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const answered = await new Promise<boolean>((resolve) => {
      const socket = netConnect(port, "127.0.0.1");
      const finish = (ok: boolean): void => {
        socket.destroy();
        resolve(ok);
      };
      socket.setTimeout(500, () => {
        finish(false);
      });
      socket.once("error", () => {
        finish(false);
      });
      socket.once("connect", () => socket.write("PING\r\n"));
      socket.once("data", (data) => {
        // "-LOADING" means not ready yet; anything else is an answer.
        finish(!data.toString().startsWith("-LOADING"));
      });
    });
    if (answered) return;
    if (Date.now() > deadline)
      throw new Error(`redis on port ${port} did not answer PING`);
    await new Promise((r) => setTimeout(r, 30));
  }
}

/** Options of {@link startRedisServer}. */
export interface RedisServerOptions {
  /** Plain TCP port. @defaultValue a free one */
  readonly port?: number;
  /** Extra `redis-server` arguments, e.g. `["--requirepass", "secret"]`. */
  readonly args?: readonly string[];
  /** Also listen on a unix socket in the server's directory. */
  readonly unixSocket?: boolean;
  /** Also listen with TLS on a free port, with these PEM files. */
  readonly tls?: {
    readonly certFile: string;
    readonly keyFile: string;
    readonly caFile: string;
    /** Whether clients must present a certificate. @defaultValue "yes" */
    readonly authClients?: "yes" | "no" | "optional";
  };
  /** Password for the admin client. */
  readonly password?: string;
  /** Start as a sentinel (`redis-server <conf> --sentinel`) with this config text. */
  readonly sentinelConfig?: string;
}

/** A running redis-server (or sentinel) process. */
export interface RedisServer {
  readonly port: number;
  /** `127.0.0.1:<port>` */
  readonly address: string;
  readonly tlsPort: number | undefined;
  readonly socketPath: string | undefined;
  readonly dir: string;
  /** A new plain admin client (password applied); the caller disconnects it. */
  client(): Redis;
  /** Kills the process at once (SIGKILL) and waits for it to exit. */
  kill(): Promise<void>;
  /** Stops (SIGSTOP) or continues (SIGCONT) the process: a store that hangs. */
  pause(paused: boolean): void;
  /** Starts the process again with the same ports and arguments and waits for PING. */
  restart(): Promise<void>;
  /** Kills the process and removes its directory. */
  stop(): Promise<void>;
}

/** Starts `redis-server` on loopback without persistence and waits until it answers PING. */
export async function startRedisServer(
  options: RedisServerOptions = {},
): Promise<RedisServer> {
  const port = options.port ?? (await freePort());
  const tlsPort = options.tls !== undefined ? await freePort() : undefined;
  const dir = mkdtempSync(join(tmpdir(), "rls-redis-"));
  const socketPath = options.unixSocket ? join(dir, "redis.sock") : undefined;
  const args: string[] = [];
  if (options.sentinelConfig !== undefined) {
    const conf = join(dir, "sentinel.conf");
    writeFileSync(
      conf,
      `port ${port}\nbind 127.0.0.1\n${options.sentinelConfig}\n`,
    );
    args.push(conf, "--sentinel");
  } else {
    args.push(
      "--port",
      String(port),
      "--bind",
      "127.0.0.1",
      "--save",
      "",
      "--appendonly",
      "no",
      "--dir",
      dir,
    );
  }
  if (socketPath !== undefined)
    args.push("--unixsocket", socketPath, "--unixsocketperm", "700");
  if (options.tls !== undefined) {
    args.push(
      "--tls-port",
      String(tlsPort),
      "--tls-cert-file",
      options.tls.certFile,
      "--tls-key-file",
      options.tls.keyFile,
      "--tls-ca-cert-file",
      options.tls.caFile,
      "--tls-auth-clients",
      options.tls.authClients ?? "yes",
    );
  }
  args.push(...(options.args ?? []));

  let child: ChildProcess | undefined;
  const launch = async (): Promise<void> => {
    const started = spawn("redis-server", args, {
      cwd: dir,
      stdio: ["ignore", "pipe", "ignore"],
    });
    running.add(started);
    let output = "";
    started.stdout.on("data", (chunk: Buffer) => {
      // Keep only the tail: enough to explain a failed start.
      output = (output + chunk.toString()).slice(-2000);
    });
    started.once("exit", () => running.delete(started));
    child = started;
    const exited = new Promise<never>((_, reject) => {
      started.once("exit", (code) => {
        reject(new Error(`redis-server exited (${String(code)}): ${output}`));
      });
    });
    exited.catch(() => undefined);
    await Promise.race([waitForPing(port), exited]);
  };
  const kill = async (): Promise<void> => {
    const current = child;
    child = undefined;
    if (current?.exitCode !== null) return;
    const exited = new Promise((r) => current.once("exit", r));
    current.kill("SIGKILL");
    await exited;
  };
  const server: RedisServer = {
    port,
    address: `127.0.0.1:${port}`,
    tlsPort,
    socketPath,
    dir,
    client: () =>
      new Redis({
        host: "127.0.0.1",
        port,
        ...(options.password !== undefined
          ? { password: options.password }
          : {}),
        maxRetriesPerRequest: 1,
        retryStrategy: () => null,
      }),
    kill,
    pause(paused) {
      child?.kill(paused ? "SIGSTOP" : "SIGCONT");
    },
    restart: launch,
    async stop() {
      await kill();
      rmSync(dir, { recursive: true, force: true });
      servers.delete(server);
    },
  };
  // Registered before it runs, so stopAllRedisServers() also cleans up after a failed start.
  servers.add(server);
  try {
    await launch();
  } catch (err) {
    await server.stop();
    throw err;
  }
  return server;
}

/** Remembers a cluster (its servers are remembered anyway) for {@link stopAllRedisServers}. */
export function track<T extends { stop(): Promise<void> }>(server: T): T {
  servers.add(server);
  return server;
}

/**
 * Stops every server started here (and every cluster given to {@link track}), removing their
 * directories, and kills any other leftover process.
 */
export async function stopAllRedisServers(): Promise<void> {
  await Promise.all([...servers].map((s) => s.stop()));
  servers.clear();
  for (const child of running) child.kill("SIGKILL");
}

/** A 3-master cluster without replicas. */
export interface RedisCluster {
  readonly nodes: readonly RedisServer[];
  /** `127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3` */
  readonly url: string;
  stop(): Promise<void>;
}

/** Starts `count` cluster-enabled servers and joins them with `redis-cli --cluster create`. */
export async function startRedisCluster(count = 3): Promise<RedisCluster> {
  const nodes: RedisServer[] = [];
  for (let i = 0; i < count; i++) {
    nodes.push(
      await startRedisServer({
        port: await freeClusterPort(),
        args: [
          "--cluster-enabled",
          "yes",
          "--cluster-config-file",
          "nodes.conf",
          "--cluster-node-timeout",
          "2000",
        ],
      }),
    );
  }
  await execFileAsync("redis-cli", [
    "--cluster",
    "create",
    ...nodes.map((n) => n.address),
    "--cluster-replicas",
    "0",
    "--cluster-yes",
  ]);
  const deadline = Date.now() + 10_000;
  for (const node of nodes) {
    const client = node.client();
    try {
      for (;;) {
        const info = await client.cluster("INFO");
        if (info.includes("cluster_state:ok")) break;
        if (Date.now() > deadline) throw new Error("cluster did not become ok");
        await new Promise((r) => setTimeout(r, 100));
      }
    } finally {
      client.disconnect();
    }
  }
  return {
    nodes,
    url: nodes.map((n) => n.address).join(","),
    async stop() {
      await Promise.all(nodes.map((n) => n.stop()));
    },
  };
}

/** PEM files of a test CA, a server certificate for 127.0.0.1, and a client certificate. */
export interface TestCertificates {
  readonly dir: string;
  readonly caFile: string;
  /** Server certificate valid for IP 127.0.0.1 and DNS localhost. */
  readonly serverCertFile: string;
  readonly serverKeyFile: string;
  /** Server certificate valid only for DNS other.invalid (for hostname checks). */
  readonly otherHostCertFile: string;
  readonly otherHostKeyFile: string;
  readonly clientCertFile: string;
  readonly clientKeyFile: string;
  remove(): void;
}

/** Generates a CA and certificates signed by it (see {@link TestPki}). */
export function makeTestCertificates(): TestCertificates {
  const pki = new TestPki(mkdtempSync(join(tmpdir(), "rls-tls-")));
  const ca = pki.ca("ca");
  const server = pki.leaf("server", ca, "IP:127.0.0.1,DNS:localhost", "server");
  const other = pki.leaf("other", ca, "DNS:other.invalid", "server");
  const client = pki.leaf("client", ca, undefined, "client");
  return {
    dir: pki.dir,
    caFile: ca.cert,
    serverCertFile: server.cert,
    serverKeyFile: server.key,
    otherHostCertFile: other.cert,
    otherHostKeyFile: other.key,
    clientCertFile: client.cert,
    clientKeyFile: client.key,
    remove() {
      pki.remove();
    },
  };
}

/** Returns how many times the server ran `command` (from `INFO commandstats`). */
export async function commandCalls(
  client: Redis,
  command: string,
): Promise<number> {
  const info = await client.info("commandstats");
  const match = new RegExp(
    `^cmdstat_${command.toLowerCase()}:calls=(\\d+)`,
    "m",
  ).exec(info);
  return match === null ? 0 : Number(match[1]);
}
