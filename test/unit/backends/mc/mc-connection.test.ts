import { createServer, type Server, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { McConnection } from "../../../../src/backends/mc/mc-connection.js";

// The framing and failure handling of our binary-protocol connection, against a scripted peer
// on a loopback port: the cases real memcached cannot be made to produce on demand (a clean
// close with a request pending, a reply split across packets, garbage). The commands
// themselves are tested against real memcached in test/integration/mc-*.test.ts.

/** A peer that hands each accepted connection to `onConnection`. */
async function peer(
  onConnection: (socket: Socket) => void,
): Promise<{ server: Server; port: number }> {
  const server = createServer((socket) => {
    peerSockets.add(socket);
    onConnection(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (address === null || typeof address === "string")
    throw new Error("no port");
  return { server, port: address.port };
}

/** Calls `onRequest(opcode, opaque)` for every complete request the peer receives. */
function onRequests(
  socket: Socket,
  onRequest: (opcode: number, opaque: number) => void,
): void {
  let buffered = Buffer.alloc(0);
  socket.on("data", (chunk: Buffer) => {
    buffered = Buffer.concat([buffered, chunk]);
    while (buffered.length >= 24) {
      const end = 24 + buffered.readUInt32BE(8);
      if (buffered.length < end) return;
      onRequest(buffered[1]!, buffered.readUInt32BE(12));
      buffered = buffered.subarray(end);
    }
  });
}

/** A binary-protocol reply. */
function reply(
  opcode: number,
  opaque: number,
  key = "",
  value = "",
  status = 0,
): Buffer {
  const keyBytes = Buffer.from(key);
  const valueBytes = Buffer.from(value);
  const header = Buffer.alloc(24);
  header[0] = 0x81;
  header[1] = opcode;
  header.writeUInt16BE(keyBytes.length, 2);
  header.writeUInt16BE(status, 6);
  header.writeUInt32BE(keyBytes.length + valueBytes.length, 8);
  header.writeUInt32BE(opaque, 12);
  return Buffer.concat([header, keyBytes, valueBytes]);
}

const servers: Server[] = [];
const peerSockets = new Set<Socket>();
const connections: McConnection[] = [];

afterEach(async () => {
  await Promise.all(connections.splice(0).map((c) => c.shutdown(100)));
  for (const socket of peerSockets) socket.destroy();
  peerSockets.clear();
  await Promise.all(
    servers
      .splice(0)
      .map((server) => new Promise((resolve) => server.close(resolve))),
  );
});

async function connectTo(
  onConnection: (socket: Socket) => void,
  timeoutMs = 600_000,
): Promise<McConnection> {
  const { server, port } = await peer(onConnection);
  servers.push(server);
  const connection = new McConnection(
    { address: `127.0.0.1:${port}`, host: "127.0.0.1", port },
    { timeoutMs, connectTimeoutMs: 5000, tls: undefined },
  );
  connections.push(connection);
  return connection;
}

function getMulti(
  connection: McConnection,
  keys: string[],
): Promise<{ err: Error | undefined; found: Map<string, string> }> {
  return new Promise((resolve) => {
    connection.getMulti(keys, (err, found) => {
      const text = new Map([...found].map(([k, v]) => [k, v.toString()]));
      resolve({ err, found: text });
    });
  });
}

describe("McConnection", () => {
  it("reassembles replies split across packets and routes them to their batches", async () => {
    const connection = await connectTo((socket) => {
      onRequests(socket, (opcode, opaque) => {
        // A hit for the first key of every batch, then the NOOP closing it, one byte a write.
        const bytes =
          opcode === 0x0a
            ? reply(0x0a, opaque)
            : opaque % 2 === 1
              ? reply(0x0d, opaque, `k${opaque}`, `${opaque * 10}`)
              : Buffer.alloc(0);
        for (const byte of bytes) socket.write(Buffer.from([byte]));
      });
    });
    const results = await Promise.all([
      getMulti(connection, ["k1", "missing"]),
      getMulti(connection, ["k2"]),
      getMulti(connection, ["k3"]),
    ]);
    // Opaques are 1, 2, 3: the odd ones got a hit.
    expect(results).toEqual([
      { err: undefined, found: new Map([["k1", "10"]]) },
      { err: undefined, found: new Map() },
      { err: undefined, found: new Map([["k3", "30"]]) },
    ]);
  });

  it("fails the pending batches at once when the node closes the connection cleanly", async () => {
    // The node ends the connection (FIN, no socket error) without answering: memjs left such
    // requests pending forever. The reply timeout is far beyond the test's.
    const connection = await connectTo((socket) => {
      onRequests(socket, () => socket.end());
    });
    const { err } = await getMulti(connection, ["k"]);
    expect(err?.message).toMatch(/closed the connection/);
    // The next operation opens a new connection.
    const again = await getMulti(connection, ["k"]);
    expect(again.err?.message).toMatch(/closed the connection/);
  });

  it("drops the connection and fails its batches when no reply comes in time", async () => {
    const connection = await connectTo(() => undefined, 50);
    const [first, second] = await Promise.all([
      getMulti(connection, ["a"]),
      new Promise<Error | undefined>((resolve) => {
        connection.noop(resolve);
      }),
    ]);
    expect(first.err?.message).toMatch(/did not answer within 50 ms/);
    expect(second?.message).toMatch(/did not answer within 50 ms/);
  });

  it("fails the batch on a reply that is not binary protocol or answers no request", async () => {
    const garbage = await connectTo((socket) => {
      onRequests(socket, () => socket.write("ERROR\r\n".repeat(4)));
    });
    expect((await getMulti(garbage, ["k"])).err?.message).toMatch(
      /not binary protocol/,
    );
    const stray = await connectTo((socket) => {
      onRequests(socket, (opcode, opaque) => {
        socket.write(reply(opcode, opaque + 1000));
      });
    });
    expect((await getMulti(stray, ["k"])).err?.message).toMatch(
      /reply to a request it was not sent/,
    );
  });

  it("reports counter increments memcached refused, and fails new operations after shutdown", async () => {
    const connection = await connectTo((socket) => {
      onRequests(socket, (opcode, opaque) => {
        if (opcode === 0x0a) socket.write(reply(0x0a, opaque));
        // Status 0x06: "Incr/Decr on non-numeric value".
        else socket.write(reply(opcode, opaque, "", "non-numeric", 0x06));
      });
    });
    const result = await new Promise<[Error | undefined, number]>((resolve) => {
      connection.incrementMulti(
        [
          { key: "a", hits: 1, expiration: 60 },
          { key: "b", hits: 2, expiration: 60 },
        ],
        (err, failed) => {
          resolve([err, failed]);
        },
      );
    });
    expect(result[1]).toBe(2);
    expect(result[0]?.message).toMatch(/status 0x6: non-numeric/);
    await connection.shutdown(100);
    const { err } = await getMulti(connection, ["k"]);
    expect(err?.message).toMatch(/is closed/);
  });
});
