import { lstat, unlink } from "node:fs/promises";
import type { Server as HttpServer } from "node:http";
import type { Http2SecureServer, Http2Server, Http2Session } from "node:http2";
import type { AddressInfo, Server as NetServer, Socket } from "node:net";

/** A bound listener with its actual address and a graceful close. */
export interface Listening {
  /** `host:port` actually bound (port resolved when 0 was asked for), or `unix:<path>`. */
  readonly address: string;
  /** Port actually bound; 0 for a unix socket. */
  readonly port: number;
  /**
   * Stops accepting, lets in-flight requests finish for up to `graceMs`, then destroys what
   * is left (and removes a unix socket file); idempotent.
   */
  close(graceMs?: number): Promise<void>;
}

/** Where to listen: a TCP host and port, or a unix socket path. */
export type ListenTarget =
  { readonly host: string; readonly port: number } | { readonly path: string };

/** What {@link listen}'s close does besides the server's own close. */
export interface ListenHooks {
  /**
   * Called when close starts, after the server stopped accepting: start draining the open
   * connections of a server that is not node:http (e.g. send GOAWAY).
   */
  readonly onClose?: () => void;
}

/** Joins a host and port as `host:port`, or `[v6]:port` for IPv6 hosts. */
export function joinHostPort(host: string, port: number): string {
  return host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
}

/** Removes a leftover unix socket file (never a regular file or directory). */
async function removeStaleSocket(path: string): Promise<void> {
  try {
    if ((await lstat(path)).isSocket()) await unlink(path);
  } catch {
    // Nothing there (or not ours to remove): listen reports any real problem.
  }
}

/**
 * Listens on a TCP address or a unix socket and tracks connections (HTTP/1.1 sockets or
 * HTTP/2 sessions) so close can drain them. A stale unix socket file left by a crashed
 * process is removed first.
 *
 * @throws the listen error (e.g. EADDRINUSE) when the address cannot be bound
 */
export async function listen(
  server: HttpServer | Http2Server | Http2SecureServer | NetServer,
  target: ListenTarget,
  hooks: ListenHooks = {},
): Promise<Listening> {
  const sockets = new Set<Socket>();
  const sessions = new Set<Http2Session>();
  server.on("connection", (socket: Socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  server.on("secureConnection", (socket: Socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  server.on("session", (session: Http2Session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
  });
  if ("path" in target) await removeStaleSocket(target.path);
  await new Promise<void>((resolve, reject) => {
    const onError = (err: Error): void => {
      reject(err);
    };
    server.once("error", onError);
    const done = (): void => {
      server.off("error", onError);
      resolve();
    };
    if ("path" in target) server.listen({ path: target.path }, done);
    else server.listen({ host: target.host, port: target.port }, done);
  });
  let address: string;
  let port = 0;
  if ("path" in target) {
    address = `unix:${target.path}`;
  } else {
    port = (server.address() as AddressInfo).port;
    address = joinHostPort(target.host, port);
  }
  let closing: Promise<void> | undefined;
  return {
    address,
    port,
    close(graceMs = 5000) {
      closing ??= new Promise<void>((resolve) => {
        server.close(() => {
          resolve();
        });
        // HTTP/2: GOAWAY lets in-flight streams finish; HTTP/1.1: idle keep-alive sockets go.
        for (const session of sessions) session.close();
        hooks.onClose?.();
        if ("closeIdleConnections" in server) server.closeIdleConnections();
        const timer = setTimeout(() => {
          for (const session of sessions) session.destroy();
          for (const socket of sockets) socket.destroy();
        }, graceMs);
        timer.unref();
      }).then(async () => {
        if ("path" in target) await removeStaleSocket(target.path);
      });
      return closing;
    },
  };
}
