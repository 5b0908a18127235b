import { createServer, type Server, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import {
  McConnection,
  McReplyError,
  McSilenceError,
  type McCasValue,
  type McIncrement,
  type McStoreOutcome,
} from "../../../../src/backends/mc/mc-connection.js";
import { mcReply } from "../../../helpers/mc-peer.js";
import { waitFor } from "../../../helpers/wait-for.js";

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

/** `incrementMultiValues` as a promise of its error and values. */
function incrementValues(
  connection: McConnection,
  increments: readonly McIncrement[],
): Promise<[Error | undefined, (number | undefined)[]]> {
  return new Promise((resolve) => {
    connection.incrementMultiValues(increments, (err, values) => {
      resolve([err, values]);
    });
  });
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

  it("half-closes a connection given up on for silence: the node still gets what was written", async () => {
    // A frozen node that thaws reads what was written and answers; had we reset the
    // connection, its answers would meet a reset and it would drop the rest. The peer reads
    // the batch, sees our FIN, and answers twice: the lingering socket takes both.
    let received = 0;
    let peerDone = false;
    let peerError: Error | undefined;
    const connection = await connectTo((socket) => {
      // Keep the peer's side open after our FIN, as a node still answering would.
      socket.allowHalfOpen = true;
      socket.on("data", (chunk: Buffer) => {
        received += chunk.length;
      });
      socket.on("error", (err) => {
        peerError = err;
      });
      socket.on("end", () => {
        socket.write(Buffer.alloc(24, 0x81));
        setTimeout(() => {
          socket.end(Buffer.alloc(24, 0x81), () => {
            peerDone = true;
          });
        }, 50);
      });
    }, 50);
    const err = await new Promise<Error | undefined>((resolve) => {
      connection.noop(resolve);
    });
    expect(err).toBeInstanceOf(McSilenceError);
    await waitFor(
      () => peerDone || peerError !== undefined,
      "the peer's answers",
    );
    expect(peerError).toBeUndefined();
    expect(received).toBe(24);
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
    const result = await incrementValues(connection, [
      { key: "a", hits: 1, expiration: 60 },
      { key: "b", hits: 2, expiration: 60 },
    ]);
    expect(result[1]).toEqual([undefined, undefined]);
    expect(result[0]?.message).toMatch(/status 0x6: non-numeric/);
    // The increment (0x05), initial value = the hits.
    expect(received).toEqual([
      { opcode: 0x05, key: "a", amount: 1, initial: 1, expiration: 60 },
      { opcode: 0x05, key: "b", amount: 2, initial: 2, expiration: 60 },
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
    const [err, values] = await incrementValues(connection, [
      { key: "a", hits: 3, expiration: 60 },
      { key: "b", hits: 1, expiration: 60 },
      { key: "big", hits: 2 ** 32 + 1, expiration: 1_800_000_000 },
    ]);
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

  it("sends again an increment answered NOT_STORED (a create lost to another connection's), then answers its value", async () => {
    const received: CounterRequest[] = [];
    // "race" loses its create twice (status 0x05), then counts; "never" always loses.
    const losses = new Map([
      ["race", 2],
      ["never", 99],
    ]);
    const connection = await connectTo((socket) => {
      onRequests(socket, (opcode, opaque, request) => {
        if (opcode === 0x0a) {
          socket.write(reply(0x0a, opaque));
          return;
        }
        const counter = counterRequest(request);
        received.push(counter);
        const left = losses.get(counter.key) ?? 0;
        if (left > 0) {
          losses.set(counter.key, left - 1);
          socket.write(reply(opcode, opaque, "", "Not stored.", 0x05));
        } else {
          socket.write(reply(opcode, opaque, "", counterValue(41n)));
        }
      });
    });
    const [err, values] = await incrementValues(connection, [
      { key: "a", hits: 1, expiration: 60 },
      { key: "race", hits: 2, expiration: 60 },
      { key: "never", hits: 3, expiration: 60 },
    ]);
    expect(values).toEqual([41, 41, undefined]);
    expect(err?.message).toMatch(/increment failed with status 0x5/);
    // One first round of three, then only the lost ones: "never" four times in all.
    expect(received.map((r) => r.key)).toEqual([
      "a",
      "race",
      "never",
      "race",
      "never",
      "race",
      "never",
      "never",
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
    const [err, values] = await incrementValues(connection, [
      { key: "a", hits: 1, expiration: 60 },
      { key: "b", hits: 1, expiration: 60 },
    ]);
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

/** A GET, SET or ADD as the peer received it. */
interface KeyRequest {
  readonly opcode: number;
  readonly key: string;
  readonly cas: bigint;
  /** SET and ADD: flags and expiration extras; undefined for GET. */
  readonly flags: number | undefined;
  readonly expiration: number | undefined;
  readonly value: string;
}

function keyRequest(request: Buffer): KeyRequest {
  const extras = request[4]!;
  const keyBytes = request.readUInt16BE(2);
  const keyAt = 24 + extras;
  return {
    opcode: request[1]!,
    key: request.toString("utf8", keyAt, keyAt + keyBytes),
    cas: request.readBigUInt64BE(16),
    flags: extras === 8 ? request.readUInt32BE(24) : undefined,
    expiration: extras === 8 ? request.readUInt32BE(28) : undefined,
    value: request.toString("utf8", keyAt + keyBytes),
  };
}

/**
 * A peer answering each GET, SET or ADD with `answer(request)` (one or more replies, or none),
 * then the NOOP; records the requests.
 */
async function keyPeer(
  answer: (request: KeyRequest, opaque: number) => Buffer[],
): Promise<{ connection: McConnection; received: KeyRequest[] }> {
  const received: KeyRequest[] = [];
  const connection = await connectTo((socket) => {
    onRequests(socket, (opcode, opaque, request) => {
      if (opcode === 0x0a) {
        socket.write(reply(0x0a, opaque));
        return;
      }
      const parsed = keyRequest(request);
      received.push(parsed);
      for (const bytes of answer(parsed, opaque)) socket.write(bytes);
    });
  });
  return { connection, received };
}

function gets(
  connection: McConnection,
  key: string,
): Promise<[Error | undefined, McCasValue | undefined]> {
  return new Promise((resolve) => {
    connection.gets(key, (err, found) => {
      resolve([err, found]);
    });
  });
}

function cas(
  connection: McConnection,
  key: string,
  value: string,
  expiration: number,
  token: bigint,
): Promise<[Error | undefined, McStoreOutcome | undefined]> {
  return new Promise((resolve) => {
    connection.cas(key, value, expiration, token, (err, outcome) => {
      resolve([err, outcome]);
    });
  });
}

function add(
  connection: McConnection,
  key: string,
  value: string,
  expiration: number,
): Promise<[Error | undefined, McStoreOutcome | undefined]> {
  return new Promise((resolve) => {
    connection.add(key, value, expiration, (err, outcome) => {
      resolve([err, outcome]);
    });
  });
}

describe("McConnection compare-and-swap commands", () => {
  it("gets reads a value with its CAS token, and a miss as undefined", async () => {
    const { connection, received } = await keyPeer((request, opaque) => [
      request.key === "hit"
        ? mcReply(0x00, opaque, {
            value: "1700000000000000",
            cas: 2n ** 40n + 3n,
            extras: 4,
          })
        : mcReply(0x00, opaque, { status: 0x01, value: "Not found" }),
    ]);
    const [err, found] = await gets(connection, "hit");
    expect(err).toBeUndefined();
    expect(found?.value.toString()).toBe("1700000000000000");
    expect(found?.cas).toBe(2n ** 40n + 3n);
    expect(await gets(connection, "miss")).toEqual([undefined, undefined]);
    // GET (0x00), no extras, no CAS.
    expect(received.map((r) => [r.opcode, r.key, r.cas, r.flags])).toEqual([
      [0x00, "hit", 0n, undefined],
      [0x00, "miss", 0n, undefined],
    ]);
  });

  it("gets refuses a hit without a CAS token (memcached -C), an error status and stray replies", async () => {
    const { connection } = await keyPeer((request, opaque) => {
      switch (request.key) {
        case "no-cas":
          return [mcReply(0x00, opaque, { value: "1", extras: 4 })];
        case "error":
          return [
            mcReply(0x00, opaque, { status: 0x82, value: "Out of memory" }),
          ];
        case "other-opcode":
          return [mcReply(0x01, opaque, { cas: 5n })];
        case "twice":
          return [
            mcReply(0x00, opaque, { value: "1", cas: 5n, extras: 4 }),
            mcReply(0x00, opaque, { value: "2", cas: 6n, extras: 4 }),
          ];
        default:
          return [];
      }
    });
    const cases: [string, RegExp][] = [
      ["no-cas", /without a CAS token \(is it started with -C\?\)/],
      ["error", /get failed with status 0x82: Out of memory/],
      ["other-opcode", /answered the get with a reply to opcode 0x1/],
      ["twice", /answered 2 replies to one get/],
      ["silent", /answered 0 replies to one get/],
    ];
    for (const [key, message] of cases) {
      const [err, found] = await gets(connection, key);
      expect(err, key).toBeInstanceOf(McReplyError);
      expect(err?.message, key).toMatch(message);
      expect(found, key).toBeUndefined();
    }
  });

  it("cas sends a SET with the token and reads stored, exists and not-found", async () => {
    const statuses: Record<string, number> = { a: 0x00, b: 0x02, c: 0x01 };
    const { connection, received } = await keyPeer((request, opaque) => [
      mcReply(0x01, opaque, { status: statuses[request.key] ?? 0x03 }),
    ]);
    expect(await cas(connection, "a", "1700000000500000", 61, 77n)).toEqual([
      undefined,
      "stored",
    ]);
    expect(await cas(connection, "b", "2", 1_800_000_000, 78n)).toEqual([
      undefined,
      "exists",
    ]);
    expect(await cas(connection, "c", "3", 1, 79n)).toEqual([
      undefined,
      "not-found",
    ]);
    // Status 0x03: "value too large".
    const [err, outcome] = await cas(connection, "d", "4", 1, 80n);
    expect(err).toBeInstanceOf(McReplyError);
    expect(err?.message).toMatch(/cas failed with status 0x3/);
    expect(outcome).toBeUndefined();
    expect(received[0]).toEqual({
      opcode: 0x01,
      key: "a",
      cas: 77n,
      flags: 0,
      expiration: 61,
      value: "1700000000500000",
    });
    expect(received.map((r) => [r.key, r.cas, r.expiration])).toEqual([
      ["a", 77n, 61],
      ["b", 78n, 1_800_000_000],
      ["c", 79n, 1],
      ["d", 80n, 1],
    ]);
  });

  it("cas refuses a token of 0 without sending anything", async () => {
    const { connection, received } = await keyPeer(() => []);
    const [err, outcome] = await cas(connection, "a", "1", 1, 0n);
    expect(err).toBeInstanceOf(RangeError);
    expect(outcome).toBeUndefined();
    expect(received).toEqual([]);
  });

  it("add sends an ADD without a token and reads stored and exists", async () => {
    const { connection, received } = await keyPeer((request, opaque) =>
      request.key === "twice"
        ? [mcReply(0x02, opaque, {}), mcReply(0x02, opaque, {})]
        : request.key === "other-opcode"
          ? [mcReply(0x00, opaque, {})]
          : [
              mcReply(0x02, opaque, {
                status: request.key === "new" ? 0x00 : 0x02,
              }),
            ],
    );
    expect(await add(connection, "new", "1700000000000001", 2)).toEqual([
      undefined,
      "stored",
    ]);
    expect(await add(connection, "taken", "5", 2)).toEqual([
      undefined,
      "exists",
    ]);
    const [twice] = await add(connection, "twice", "5", 2);
    expect(twice?.message).toMatch(/answered 2 replies to one add/);
    const [other] = await add(connection, "other-opcode", "5", 2);
    expect(other?.message).toMatch(
      /answered the add with a reply to opcode 0x0/,
    );
    expect(received[0]).toEqual({
      opcode: 0x02,
      key: "new",
      cas: 0n,
      flags: 0,
      expiration: 2,
      value: "1700000000000001",
    });
  });
});
