import type { Server as HttpServer } from "node:http";
import type { Http2Server, Http2Session } from "node:http2";
import type { AddressInfo, Socket } from "node:net";

/** A bound listener with its actual address and a graceful close. */
export interface Listening {
  /** `host:port` actually bound (port resolved when 0 was asked for). */
  readonly address: string;
  /** Port actually bound. */
  readonly port: number;
  /**
   * Stops accepting, lets in-flight requests finish for up to `graceMs`, then destroys what
   * is left; idempotent.
   */
  close(graceMs?: number): Promise<void>;
}

/** Joins a host and port as `host:port`, or `[v6]:port` for IPv6 hosts. */
export function joinHostPort(host: string, port: number): string {
  return host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
}

/**
 * Listens on `host:port` and tracks connections (HTTP/1.1 sockets or HTTP/2 sessions) so
 * close can drain them.
 *
 * @throws the listen error (e.g. EADDRINUSE) when the port cannot be bound
 */
export async function listen(
  server: HttpServer | Http2Server,
  host: string,
  port: number,
): Promise<Listening> {
  const sockets = new Set<Socket>();
  const sessions = new Set<Http2Session>();
  server.on("connection", (socket: Socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  server.on("session", (session: Http2Session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
  });
  await new Promise<void>((resolve, reject) => {
    const onError = (err: Error): void => {
      reject(err);
    };
    server.once("error", onError);
    server.listen({ host, port }, () => {
      server.off("error", onError);
      resolve();
    });
  });
  const bound = server.address() as AddressInfo;
  let closing: Promise<void> | undefined;
  return {
    address: joinHostPort(host, bound.port),
    port: bound.port,
    close(graceMs = 5000) {
      closing ??= new Promise<void>((resolve) => {
        server.close(() => {
          resolve();
        });
        // HTTP/2: GOAWAY lets in-flight streams finish; HTTP/1.1: idle keep-alive sockets go.
        for (const session of sessions) session.close();
        if ("closeIdleConnections" in server) server.closeIdleConnections();
        const timer = setTimeout(() => {
          for (const session of sessions) session.destroy();
          for (const socket of sockets) socket.destroy();
        }, graceMs);
        timer.unref();
      });
      return closing;
    },
  };
}
