/**
 * One persistent, pipelined connection to a memcached node speaking the binary protocol, for
 * the three commands the backend sends: a multi-get (GETKQ… NOOP), quiet increments with an
 * initial value and expiration (INCREMENTQ… NOOP) and a NOOP probe.
 *
 * Ours rather than memjs's (the backend's client until now) because memjs 1.3 (the latest
 * release) cannot carry what the backend needs through its public API:
 * - TLS: its `Server` always opens the socket with `net.connect`; there is no option or hook
 *   to hand it a TLS socket.
 * - A dropped connection: when the node closes the connection (crash, restart) without a
 *   socket error, memjs forgets the socket but neither calls nor times out the pending
 *   operations, so requests waiting on them hang.
 * - Batching: it has no multi-get and no quiet commands, so each key would cost its own
 *   request and reply.
 * Using it anyway meant subclassing `Server` and writing its private fields, which a memjs
 * patch release could break silently. The part owned here is small: request framing, reply
 * framing (24-byte header + body), matching replies to the batch they answer (memcached
 * answers a connection's requests in order; the opaque is checked), a reply deadline, and
 * failing every pending operation once when the connection closes. memjs stays in the tests,
 * through its public API, as an independent client reading what the backend stored. Parity:
 * memcached `protocol_binary.h` and the binary protocol description in its wiki.
 */
import { connect as netConnect, isIP, type Socket } from "node:net";
import { connect as tlsConnect, type ConnectionOptions } from "node:tls";
import type { McNodeAddress } from "./mc-options.js";

/** One background counter increment. */
export interface McIncrement {
  /** The cache key (legal, see `mcKeyProblem`). */
  readonly key: string;
  /** Amount to add, ≥ 0; also the value of a counter that does not exist yet. */
  readonly hits: number;
  /** Expiration field of a created counter, see `toMcExpiration`. */
  readonly expiration: number;
}

/** Options of {@link McConnection}. */
export interface McConnectionOptions {
  /**
   * Milliseconds a batch may wait for its last reply once written; past it the connection is
   * dropped and every pending operation fails.
   */
  readonly timeoutMs: number;
  /** Milliseconds a connect (plus TLS handshake) may take. */
  readonly connectTimeoutMs: number;
  /** `tls.connect` options, or undefined for plain TCP. */
  readonly tls: ConnectionOptions | undefined;
}

// Binary protocol magic bytes, opcodes and sizes (memcached `protocol_binary.h`).
const requestMagic = 0x80;
const responseMagic = 0x81;
const opNoop = 0x0a;
const opGetKQ = 0x0d;
const opIncrementQ = 0x15;
const headerBytes = 24;
const incrementExtrasBytes = 20;
const twoTo32 = 4_294_967_296;

/** One reply; key and value are views into the received bytes (never reused by Node). */
interface Reply {
  readonly opcode: number;
  readonly status: number;
  readonly key: Buffer;
  readonly value: Buffer;
}

/** A batch written (or waiting for the connection) whose closing NOOP has not answered yet. */
interface Pending {
  /** Opaque of every request of the batch; memcached echoes it in each reply. */
  readonly opaque: number;
  /** The batch's bytes, until they are written. */
  frame: Buffer | undefined;
  /** `performance.now()` past which the batch times out; set when written. */
  deadline: number;
  readonly onReply: (reply: Reply) => void;
  readonly onDone: (err: Error | undefined) => void;
}

/**
 * One persistent, pipelined binary-protocol connection to a memcached node (plain TCP or
 * TLS), opened on first use and again on the first use after it closed. Every operation is a
 * batch closed by a NOOP, whose reply ends it. Operations never throw; each reports exactly
 * once through its callback: with the replies, or with the error that closed the connection
 * (refused, closed by the node, connect or reply timeout, protocol error). Batches written in
 * the same event-loop tick leave in one system call.
 */
export class McConnection {
  /** The node's name in the ordered list. */
  readonly address: string;
  private readonly host: string;
  private readonly port: number;
  private readonly timeoutMs: number;
  private readonly connectTimeoutMs: number;
  private readonly tlsOptions: ConnectionOptions | undefined;
  private socket: Socket | undefined;
  private connected = false;
  /**
   * Pending batches in the order written. memcached answers the requests of a connection in
   * order, so replies always belong to the first, which also has the earliest deadline.
   */
  private pending: Pending[] = [];
  /** Reply bytes not yet parsed (an incomplete reply). */
  private buffered: Buffer | undefined;
  private replyTimer: NodeJS.Timeout | undefined;
  private lastOpaque = 0;
  private drained: (() => void)[] = [];
  private closed = false;
  private corked = false;

  constructor(node: McNodeAddress, options: McConnectionOptions) {
    this.address = node.address;
    this.host = node.host;
    this.port = node.port;
    this.timeoutMs = options.timeoutMs;
    this.connectTimeoutMs = options.connectTimeoutMs;
    this.tlsOptions = options.tls;
  }

  /**
   * Reads `keys` in one round trip; `done` gets the values found (raw bytes by key), or the
   * error that failed the whole batch.
   */
  getMulti(
    keys: readonly string[],
    done: (err: Error | undefined, found: Map<string, Buffer>) => void,
  ): void {
    let size = headerBytes;
    for (const key of keys) size += headerBytes + Buffer.byteLength(key);
    const opaque = this.nextOpaque();
    const frame = Buffer.allocUnsafe(size);
    let offset = 0;
    for (const key of keys)
      offset = writeFrame(frame, offset, opGetKQ, key, 0, opaque);
    writeFrame(frame, offset, opNoop, "", 0, opaque);
    const found = new Map<string, Buffer>();
    let replyError: Error | undefined;
    this.send(
      opaque,
      frame,
      (reply) => {
        // GETKQ answers only hits and errors; a miss is silent.
        if (reply.status === 0) {
          found.set(reply.key.toString(), reply.value);
        } else {
          replyError ??= statusError("get", reply);
        }
      },
      (err) => {
        done(err ?? replyError, found);
      },
    );
  }

  /**
   * Adds `hits` to each counter in one round trip; a missing counter is created with the
   * value `hits` and its expiration, atomically on the server (the binary protocol's
   * increment with initial value, so there is no add race). `done` gets how many increments
   * failed, and the first error.
   */
  incrementMulti(
    increments: readonly McIncrement[],
    done: (err: Error | undefined, failed: number) => void,
  ): void {
    let size = headerBytes;
    for (const increment of increments) {
      size +=
        headerBytes + incrementExtrasBytes + Buffer.byteLength(increment.key);
    }
    const opaque = this.nextOpaque();
    const frame = Buffer.allocUnsafe(size);
    let offset = 0;
    for (const increment of increments) {
      // Extras: amount (uint64), initial value (uint64), expiration (uint32), big-endian.
      const extras = offset + headerBytes;
      offset = writeFrame(
        frame,
        offset,
        opIncrementQ,
        increment.key,
        incrementExtrasBytes,
        opaque,
      );
      const high = Math.floor(increment.hits / twoTo32);
      const low = increment.hits % twoTo32;
      frame.writeUInt32BE(high, extras);
      frame.writeUInt32BE(low, extras + 4);
      frame.writeUInt32BE(high, extras + 8);
      frame.writeUInt32BE(low, extras + 12);
      frame.writeUInt32BE(increment.expiration, extras + 16);
    }
    writeFrame(frame, offset, opNoop, "", 0, opaque);
    // Quiet increments answer only on failure; the NOOP reply closes the batch.
    let failed = 0;
    let replyError: Error | undefined;
    this.send(
      opaque,
      frame,
      (reply) => {
        failed++;
        replyError ??= statusError("increment", reply);
      },
      (err) => {
        if (err !== undefined) done(err, increments.length);
        else done(replyError, failed);
      },
    );
  }

  /** Sends a NOOP; `done` gets the error when the node does not answer. */
  noop(done: (err: Error | undefined) => void): void {
    const opaque = this.nextOpaque();
    const frame = Buffer.allocUnsafe(headerBytes);
    writeFrame(frame, 0, opNoop, "", 0, opaque);
    this.send(opaque, frame, () => undefined, done);
  }

  /**
   * Stops new operations (they fail at once), waits up to `graceMs` for pending ones, then
   * closes the connection; idempotent.
   */
  async shutdown(graceMs: number): Promise<void> {
    this.closed = true;
    if (this.pending.length > 0) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, graceMs);
        timer.unref();
        this.drained.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    const socket = this.socket;
    if (socket === undefined) return;
    await new Promise<void>((resolve) => {
      socket.once("close", () => {
        resolve();
      });
      socket.end();
      // A peer that never acknowledges the close must not hold shutdown.
      setTimeout(() => socket.destroy(), graceMs).unref();
    });
  }

  private nextOpaque(): number {
    this.lastOpaque = (this.lastOpaque + 1) >>> 0;
    return this.lastOpaque;
  }

  /**
   * Writes one batch that ends in a NOOP with the same opaque, connecting first if needed:
   * `onReply` gets each reply before the NOOP's, then `onDone` is called once (with the error
   * if the batch failed as a whole).
   */
  private send(
    opaque: number,
    frame: Buffer,
    onReply: (reply: Reply) => void,
    onDone: (err: Error | undefined) => void,
  ): void {
    if (this.closed) {
      onDone(new Error(`memcached node ${this.address} is closed`));
      return;
    }
    const batch: Pending = { opaque, frame, deadline: 0, onReply, onDone };
    this.pending.push(batch);
    const socket = this.socket ?? this.connect();
    if (this.connected) this.write(socket, batch);
  }

  /** Writes a batch on the connected socket and starts its reply deadline. */
  private write(socket: Socket, batch: Pending): void {
    const frame = batch.frame;
    if (frame === undefined) return;
    batch.frame = undefined;
    batch.deadline = performance.now() + this.timeoutMs;
    if (!this.corked) {
      // Batches written in the same tick (concurrent requests) leave in one system call.
      this.corked = true;
      socket.cork();
      process.nextTick(() => {
        this.corked = false;
        socket.uncork();
      });
    }
    socket.write(frame);
    this.replyTimer ??= setTimeout(() => {
      this.checkDeadlines();
    }, this.timeoutMs).unref();
  }

  /**
   * Drops the connection when the oldest pending batch is past its deadline (failing every
   * pending batch), otherwise waits for that deadline.
   */
  private checkDeadlines(): void {
    this.replyTimer = undefined;
    const socket = this.socket;
    if (socket === undefined) return;
    const oldest = this.pending[0];
    // Nothing pending, or not written yet (still connecting): no reply is due.
    if (oldest === undefined || oldest.frame !== undefined) return;
    const left = oldest.deadline - performance.now();
    if (left <= 0) {
      socket.destroy(
        new Error(
          `memcached node ${this.address} did not answer within ${this.timeoutMs} ms`,
        ),
      );
      return;
    }
    this.replyTimer = setTimeout(() => {
      this.checkDeadlines();
    }, Math.ceil(left)).unref();
  }

  /** Opens the connection (plain TCP or TLS) and wires its events. */
  private connect(): Socket {
    const { host, port } = this;
    const tlsOptions = this.tlsOptions;
    const socket: Socket =
      tlsOptions === undefined
        ? netConnect({ host, port })
        : tlsConnect({
            ...tlsOptions,
            host,
            port,
            // SNI takes a host name only.
            ...(isIP(host) === 0 ? { servername: host } : {}),
          });
    this.socket = socket;
    this.connected = false;
    this.buffered = undefined;
    socket.setNoDelay(true);
    socket.setKeepAlive(true, 30_000);
    const connectTimer = setTimeout(() => {
      socket.destroy(
        new Error(
          `connecting to memcached node ${this.address} timed out after ${this.connectTimeoutMs} ms`,
        ),
      );
    }, this.connectTimeoutMs);
    connectTimer.unref();
    socket.once(tlsOptions === undefined ? "connect" : "secureConnect", () => {
      clearTimeout(connectTimer);
      if (socket !== this.socket) return;
      this.connected = true;
      for (const batch of this.pending) this.write(socket, batch);
    });
    socket.on("data", (chunk: Buffer) => {
      this.received(socket, chunk);
    });
    let lastError: Error | undefined;
    socket.on("error", (err) => {
      lastError = err;
    });
    // After our end() (shutdown), do not wait for the peer to finish its side.
    socket.on("finish", () => socket.destroy());
    socket.on("close", () => {
      clearTimeout(connectTimer);
      this.closedConnection(
        socket,
        lastError ??
          new Error(`memcached node ${this.address} closed the connection`),
      );
    });
    return socket;
  }

  /** Parses every complete reply in the received bytes and routes it to its batch. */
  private received(socket: Socket, chunk: Buffer): void {
    if (socket !== this.socket) return;
    const data =
      this.buffered === undefined
        ? chunk
        : Buffer.concat([this.buffered, chunk]);
    let offset = 0;
    while (data.length - offset >= headerBytes) {
      if (data[offset] !== responseMagic) {
        socket.destroy(
          new Error(
            `memcached node ${this.address} sent a reply that is not binary protocol (byte 0x${data[offset]!.toString(16)})`,
          ),
        );
        return;
      }
      const bodyBytes = data.readUInt32BE(offset + 8);
      const end = offset + headerBytes + bodyBytes;
      if (data.length < end) break;
      const opcode = data[offset + 1]!;
      const opaque = data.readUInt32BE(offset + 12);
      const batch = this.pending[0];
      if (batch?.opaque !== opaque) {
        socket.destroy(
          new Error(
            `memcached node ${this.address} sent a reply to a request it was not sent (opaque ${opaque})`,
          ),
        );
        return;
      }
      if (opcode === opNoop) {
        this.pending.shift();
        this.finished(batch, undefined);
      } else {
        const keyAt = offset + headerBytes + data[offset + 4]!;
        const keyEnd = keyAt + data.readUInt16BE(offset + 2);
        batch.onReply({
          opcode,
          status: data.readUInt16BE(offset + 6),
          key: data.subarray(keyAt, keyEnd),
          value: data.subarray(keyEnd, end),
        });
      }
      offset = end;
      // A callback may have dropped the connection.
      if (socket !== this.socket) return;
    }
    // The reply timer stays armed; it finds nothing pending and stops (cheaper than clearing
    // and re-arming it on every round trip).
    this.buffered = offset === data.length ? undefined : data.subarray(offset);
  }

  /** Forgets a closed socket and fails every batch pending on it. */
  private closedConnection(socket: Socket, err: Error): void {
    if (socket !== this.socket) return;
    this.socket = undefined;
    this.connected = false;
    this.buffered = undefined;
    clearTimeout(this.replyTimer);
    this.replyTimer = undefined;
    const failed = this.pending;
    this.pending = [];
    for (const batch of failed) this.finished(batch, err);
  }

  private finished(batch: Pending, err: Error | undefined): void {
    if (this.pending.length === 0 && this.drained.length > 0) {
      const waiting = this.drained;
      this.drained = [];
      for (const resolve of waiting) resolve();
    }
    batch.onDone(err);
  }
}

/** Writes one request header plus key at `offset`, leaving room for extras; returns the end. */
function writeFrame(
  frame: Buffer,
  offset: number,
  opcode: number,
  key: string,
  extrasBytes: number,
  opaque: number,
): number {
  const keyBytes = key === "" ? 0 : Buffer.byteLength(key);
  frame.writeUInt8(requestMagic, offset);
  frame.writeUInt8(opcode, offset + 1);
  frame.writeUInt16BE(keyBytes, offset + 2);
  frame.writeUInt8(extrasBytes, offset + 4);
  frame.writeUInt8(0, offset + 5); // data type
  frame.writeUInt16BE(0, offset + 6); // vbucket
  frame.writeUInt32BE(extrasBytes + keyBytes, offset + 8); // total body
  frame.writeUInt32BE(opaque, offset + 12);
  frame.fill(0, offset + 16, offset + 24); // cas
  const keyAt = offset + headerBytes + extrasBytes;
  if (keyBytes > 0) frame.write(key, keyAt, "utf8");
  return keyAt + keyBytes;
}

function statusError(operation: string, reply: Reply): Error {
  const text = reply.value.toString();
  return new Error(
    `memcached ${operation} failed with status 0x${reply.status.toString(16)}${text !== "" ? `: ${text}` : ""}`,
  );
}
