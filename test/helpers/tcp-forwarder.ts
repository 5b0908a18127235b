// A loopback TCP forwarder that stands for a DNS name of a managed store: every connection it
// accepts is relayed to the port it points at when the connection opens. Moving it
// ({@link TcpForwarder.moveTo}) changes where new connections go and leaves the open ones
// where they are, as a DNS change does (a client's open connection stays on the old primary).

import { connect, createServer, type Socket } from "node:net";
import { freePort } from "./spawn-service.js";

/** A running forwarder (see the file header). */
export interface TcpForwarder {
  /** The port it listens on (loopback). */
  readonly port: number;
  /** `127.0.0.1:<port>` */
  readonly address: string;
  /** The loopback port new connections are relayed to. */
  readonly target: number;
  /** Relays new connections to `port` from now on; open connections are not touched. */
  moveTo(port: number): void;
  /** Connections accepted so far, by the target port each was relayed to. */
  accepted(): ReadonlyMap<number, number>;
  /** Closes the listener and every relayed connection. */
  close(): Promise<void>;
}

/** Starts a forwarder on a free loopback port, relaying to `127.0.0.1:<target>`. */
export async function startTcpForwarder(target: number): Promise<TcpForwarder> {
  let current = target;
  const counts = new Map<number, number>();
  const sockets = new Set<Socket>();
  const track = (socket: Socket): void => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  };
  const server = createServer((client) => {
    const to = current;
    counts.set(to, (counts.get(to) ?? 0) + 1);
    const upstream = connect(to, "127.0.0.1");
    track(client);
    track(upstream);
    // Either side's end or failure ends the other: the client sees what it would see on a
    // direct connection (the store closing it, or refusing it).
    client.pipe(upstream);
    upstream.pipe(client);
    const destroyBoth = (): void => {
      client.destroy();
      upstream.destroy();
    };
    client.once("error", destroyBoth);
    upstream.once("error", destroyBoth);
    client.once("close", destroyBoth);
    upstream.once("close", destroyBoth);
  });
  const port = await freePort();
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => {
      server.off("error", reject);
      resolve();
    });
  });
  return {
    port,
    address: `127.0.0.1:${port}`,
    get target() {
      return current;
    },
    moveTo(next) {
      current = next;
    },
    accepted: () => counts,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => {
          resolve();
        });
      }),
  };
}
