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

/**
 * Calls `onRequest(opcode, opaque, request)` for every complete request the peer receives
 * (`request`: its bytes, header included).
 */
function onRequests(
  socket: Socket,
  onRequest: (opcode: number, opaque: number, request: Buffer) => void,
): void {
  let buffered = Buffer.alloc(0);
  socket.on("data", (chunk: Buffer) => {
    buffered = Buffer.concat([buffered, chunk]);
    while (buffered.length >= 24) {
      const end = 24 + buffered.readUInt32BE(8);
      if (buffered.length < end) return;
      onRequest(
        buffered[1]!,
        buffered.readUInt32BE(12),
        buffered.subarray(0, end),
      );
      buffered = buffered.subarray(end);
    }
  });
}

/** A counter command as the peer received it. */
interface CounterRequest {
  readonly opcode: number;
  readonly key: string;
  readonly amount: number;
  readonly initial: number;
  readonly expiration: number;
}

function counterRequest(request: Buffer): CounterRequest {
  const extras = request[4]!;
  expect(extras).toBe(20);
  const keyBytes = request.readUInt16BE(2);
  return {
    opcode: request[1]!,
    key: request.toString("utf8", 24 + extras, 24 + extras + keyBytes),
    amount: Number(request.readBigUInt64BE(24)),
    initial: Number(request.readBigUInt64BE(32)),
    expiration: request.readUInt32BE(40),
  };
}

/** An 8-byte big-endian counter value, as an increment reply carries it. */
function counterValue(value: bigint): Buffer {
  const bytes = Buffer.alloc(8);
  bytes.writeBigUInt64BE(value);
  return bytes;
}

/** A binary-protocol reply. */
function reply(
  opcode: number,
  opaque: number,
  key = "",
  value: string | Buffer = "",
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
    const received: CounterRequest[] = [];
    const connection = await connectTo((socket) => {
      onRequests(socket, (opcode, opaque, request) => {
        if (opcode === 0x0a) {
          socket.write(reply(0x0a, opaque));
          return;
        }
        received.push(counterRequest(request));
        // Status 0x06: "Incr/Decr on non-numeric value".
        socket.write(reply(opcode, opaque, "", "non-numeric", 0x06));
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
    // The quiet increment (0x15), initial value = the hits.
    expect(received).toEqual([
      { opcode: 0x15, key: "a", amount: 1, initial: 1, expiration: 60 },
      { opcode: 0x15, key: "b", amount: 2, initial: 2, expiration: 60 },
    ]);
    await connection.shutdown(100);
    const { err } = await getMulti(connection, ["k"]);
    expect(err?.message).toMatch(/is closed/);
  });

  it("increments answering with the counters' values, in the order sent", async () => {
    const received: CounterRequest[] = [];
    const connection = await connectTo((socket) => {
      onRequests(socket, (opcode, opaque, request) => {
        if (opcode === 0x0a) {
          socket.write(reply(0x0a, opaque));
          return;
        }
        const counter = counterRequest(request);
        received.push(counter);
        // "b" holds a non-numeric value; "big" is past 2^32.
        const bytes =
          counter.key === "b"
            ? reply(opcode, opaque, "", "non-numeric", 0x06)
            : reply(
                opcode,
                opaque,
                "",
                counterValue(counter.key === "big" ? 2n ** 32n + 7n : 3n),
              );
        // Split across packets, to exercise reassembly.
        socket.write(bytes.subarray(0, 30));
        socket.write(bytes.subarray(30));
      });
    });
    const [err, values] = await new Promise<
      [Error | undefined, (number | undefined)[]]
    >((resolve) => {
      connection.incrementMultiValues(
        [
          { key: "a", hits: 3, expiration: 60 },
          { key: "b", hits: 1, expiration: 60 },
          { key: "big", hits: 2 ** 32 + 1, expiration: 1_800_000_000 },
        ],
        (e, v) => {
          resolve([e, v]);
        },
      );
    });
    expect(values).toEqual([3, undefined, 2 ** 32 + 7]);
    expect(err?.message).toMatch(/increment failed with status 0x6/);
    // The non-quiet increment (0x05) with the initial value = the hits and the expiration.
    expect(received).toEqual([
      { opcode: 0x05, key: "a", amount: 3, initial: 3, expiration: 60 },
      { opcode: 0x05, key: "b", amount: 1, initial: 1, expiration: 60 },
      {
        opcode: 0x05,
        key: "big",
        amount: 2 ** 32 + 1,
        initial: 2 ** 32 + 1,
        expiration: 1_800_000_000,
      },
    ]);
  });

  it("reports no value when the node answers fewer increments than sent", async () => {
    const connection = await connectTo((socket) => {
      let answered = false;
      onRequests(socket, (opcode, opaque) => {
        if (opcode === 0x0a) socket.write(reply(0x0a, opaque));
        else if (!answered) {
          answered = true;
          socket.write(reply(opcode, opaque, "", counterValue(1n)));
        }
      });
    });
    const [err, values] = await new Promise<
      [Error | undefined, (number | undefined)[]]
    >((resolve) => {
      connection.incrementMultiValues(
        [
          { key: "a", hits: 1, expiration: 60 },
          { key: "b", hits: 1, expiration: 60 },
        ],
        (e, v) => {
          resolve([e, v]);
        },
      );
    });
    expect(values).toEqual([undefined, undefined]);
    expect(err?.message).toMatch(/answered 1 of 2 increments/);
  });

  it("sends quiet decrements that never create a counter; a missing counter is no failure", async () => {
    const received: CounterRequest[] = [];
    const connection = await connectTo((socket) => {
      onRequests(socket, (opcode, opaque, request) => {
        if (opcode === 0x0a) {
          socket.write(reply(0x0a, opaque));
          return;
        }
        const counter = counterRequest(request);
        received.push(counter);
        // Quiet: silent on success; "gone" expired (0x01), "junk" is non-numeric (0x06).
        if (counter.key === "gone")
          socket.write(reply(opcode, opaque, "", "Not found", 0x01));
        if (counter.key === "junk")
          socket.write(reply(opcode, opaque, "", "non-numeric", 0x06));
      });
    });
    const [err, failed] = await new Promise<[Error | undefined, number]>(
      (resolve) => {
        connection.decrementMulti(
          [
            { key: "a", hits: 2 },
            { key: "gone", hits: 1 },
            { key: "junk", hits: 1 },
          ],
          (e, f) => {
            resolve([e, f]);
          },
        );
      },
    );
    expect(failed).toBe(1);
    expect(err?.message).toMatch(/decrement failed with status 0x6/);
    // DECREMENTQ (0x16) with an expiration of all ones: "do not create".
    expect(
      received.map((r) => [r.opcode, r.key, r.amount, r.expiration]),
    ).toEqual([
      [0x16, "a", 2, 0xffff_ffff],
      [0x16, "gone", 1, 0xffff_ffff],
      [0x16, "junk", 1, 0xffff_ffff],
    ]);
  });
});
