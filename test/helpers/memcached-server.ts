import { readFileSync } from "node:fs";
import { TestPki } from "./certs.js";
import { freePort } from "./spawn-service.js";
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { connect } from "node:net";

/** TLS files of a memcached started with TLS (paths). */
export interface MemcachedTlsFiles {
  readonly cert: string;
  readonly key: string;
  /** CA the server checks client certificates against (clients must present one). */
  readonly ca: string;
}

/** A Debian `memcached` process on a free loopback port. */
export interface MemcachedServer {
  readonly host: string;
  readonly port: number;
  /** `<host>:<port>`. */
  readonly address: string;
  /** Whether the process runs. */
  readonly running: boolean;
  /** SIGKILLs the process (as a crash would) and waits for it to exit. */
  kill(): Promise<void>;
  /**
   * SIGSTOPs the process and resolves once it is stopped: connections stay open and requests
   * get no reply (a hung node) until {@link kill}.
   */
  pause(): Promise<void>;
  /** SIGCONTs a paused process: it goes on with what its connections received meanwhile. */
  resume(): void;
  /** Starts it again on the same port (empty, as after a crash) and waits until it accepts. */
  restart(): Promise<void>;
  /** Kills it if it runs; idempotent. */
  stop(): Promise<void>;
}

// Safety net: a test that fails between start and stop must not leave memcached running.
const children = new Set<ChildProcess>();
process.once("exit", () => {
  for (const child of children) child.kill("SIGKILL");
});

export { freePort };

async function waitUntilAccepting(
  host: string,
  port: number,
  deadlineMs: number,
): Promise<void> {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const socket = connect({ host, port });
      socket.once("connect", () => {
        socket.destroy();
        resolve(true);
      });
      socket.once("error", () => {
        resolve(false);
      });
    });
    if (ok) return;
    if (Date.now() > deadline) {
      throw new Error(`memcached on port ${port} did not start`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * Starts `memcached` on a free port of a loopback address (one worker thread unless
 * `options.threads`, 16 MB),
 * optionally with TLS requiring client certificates, and waits until it accepts connections.
 *
 * @param options.threads - worker threads (`-t`); memcached's own default is 4, and only
 *   with more than one do two connections' commands on one key race. @defaultValue 1
 * @param options.host - loopback address to bind, e.g. `127.0.0.2` to tell nodes apart by
 *   host (Linux routes all of 127.0.0.0/8 to the loopback interface). @defaultValue 127.0.0.1
 */
export async function startMemcached(
  options: { host?: string; tls?: MemcachedTlsFiles; threads?: number } = {},
): Promise<MemcachedServer> {
  const host = options.host ?? "127.0.0.1";
  const port = await freePort(host);
  const args = [
    "-l",
    host,
    "-p",
    String(port),
    "-U",
    "0",
    "-t",
    String(options.threads ?? 1),
    "-m",
    "16",
  ];
  // memcached refuses to run as root unless told which user to be.
  if (process.getuid?.() === 0) args.push("-u", "root");
  if (options.tls !== undefined) {
    const { cert, key, ca } = options.tls;
    args.push(
      "-Z",
      "-o",
      `ssl_chain_cert=${cert},ssl_key=${key},ssl_ca_cert=${ca},ssl_verify_mode=2`,
    );
  }
  let child: ChildProcess | undefined;
  const launch = async (): Promise<void> => {
    const started = spawn("memcached", args, { stdio: "ignore" });
    child = started;
    children.add(started);
    started.once("exit", () => {
      children.delete(started);
      if (child === started) child = undefined;
    });
    try {
      await waitUntilAccepting(host, port, 5000);
    } catch (err) {
      started.kill("SIGKILL");
      throw err;
    }
  };
  const kill = async (): Promise<void> => {
    const running = child;
    if (running === undefined) return;
    const exited = once(running, "exit");
    running.kill("SIGKILL");
    await exited;
  };
  await launch();
  return {
    host,
    port,
    address: `${host}:${port}`,
    get running() {
      return child !== undefined;
    },
    kill,
    pause: async () => {
      const running = child;
      if (running?.pid === undefined) return;
      running.kill("SIGSTOP");
      // The stop is asynchronous: wait until the kernel shows the process stopped (state T), so
      // that no request sent after this resolves gets an answer (a loaded machine once let one
      // through).
      const deadline = Date.now() + 5000;
      while (Date.now() < deadline) {
        const stat = readFileSync(`/proc/${String(running.pid)}/stat`, "utf8");
        const state = stat.slice(
          stat.lastIndexOf(")") + 2,
          stat.lastIndexOf(")") + 3,
        );
        if (state === "T") return;
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
      throw new Error("memcached did not stop within 5 s of SIGSTOP");
    },
    resume: () => {
      child?.kill("SIGCONT");
    },
    restart: launch,
    stop: kill,
  };
}

/**
 * Writes a throwaway CA, a server certificate for `serverName` (DNS SAN only, so connecting to
 * 127.0.0.1 fails hostname verification) and a client certificate into `dir`, with openssl.
 */
export function writeTestCertificates(
  dir: string,
  serverName = "memcached.test",
): {
  ca: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
} {
  const pki = new TestPki(dir);
  const ca = pki.ca("ca");
  const server = pki.leaf("server", ca, `DNS:${serverName}`, "server");
  const client = pki.leaf("client", ca, undefined, "client");
  return {
    ca: ca.cert,
    serverCert: server.cert,
    serverKey: server.key,
    clientCert: client.cert,
    clientKey: client.key,
  };
}
