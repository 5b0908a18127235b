/**
 * One persistent, pipelined connection to a memcached node speaking the binary protocol, for
 * the commands the backend sends: a multi-get (GETKQ… NOOP), increments with an initial value
 * and expiration, quiet (INCREMENTQ… NOOP) or answering with the new values (INCREMENT…
 * NOOP, all-or-nothing charging), quiet compensating decrements (DECREMENTQ… NOOP), the
 * compare-and-swap steps of token buckets (GET with its CAS token, SET with a CAS token, ADD;
 * the text protocol's `gets`, `cas` and `add`) and a NOOP probe.
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
import type { ConnectionOptions } from "node:tls";
import type { McNodeAddress } from "./mc-options.js";
import { nodeTls } from "../../util/lazy-tls.js";

/** One counter increment. */
export interface McIncrement {
  /** The cache key (legal, see `mcKeyProblem`). */
  readonly key: string;
  /** Amount to add, ≥ 0; also the value of a counter that does not exist yet. */
  readonly hits: number;
  /** Expiration field of a created counter, see `toMcExpiration`. */
  readonly expiration: number;
}

/** One compensating counter decrement. */
export interface McDecrement {
  /** The cache key (legal, see `mcKeyProblem`). */
  readonly key: string;
  /** Amount to subtract, ≥ 0 (memcached floors the counter at 0). */
  readonly hits: number;
}

/** A value read with its compare-and-swap token ({@link McConnection.gets}). */
export interface McCasValue {
  /** The stored bytes (a view into the received bytes). */
  readonly value: Buffer;
  /** The item's CAS token, never 0 (see {@link McConnection.gets}). */
  readonly cas: bigint;
}

/**
 * How a conditional store ended: `stored`, or lost to another writer: `exists` (ADD: the key
 * exists; CAS: the item changed since it was read), `not-found` (CAS: the item expired or was
 * deleted since it was read).
 */
export type McStoreOutcome = "stored" | "exists" | "not-found";

/**
 * The node did not answer a written batch within the reply timeout, and the connection was
 * given up on for it (half-closed: the node had not closed it, and still gets what was
 * written). A node that is only slow or frozen applies those batches when it thaws.
 */
export class McSilenceError extends Error {
  override readonly name = "McSilenceError";
}

/**
 * The node answered, but not what the command needs (an error status, a reply to another
 * command, no CAS token): the connection stays up and the node counts as answering.
 */
export class McReplyError extends Error {
  override readonly name = "McReplyError";
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
const opGet = 0x00;
const opSet = 0x01;
const opAdd = 0x02;
const opIncrement = 0x05;
const opNoop = 0x0a;
const opGetKQ = 0x0d;
const opDecrementQ = 0x16;
/** Reply status "key not found". */
const statusKeyNotFound = 0x01;
/** Reply status "key exists" (ADD of an existing key, CAS of a changed item). */
const statusKeyExists = 0x02;
/**
 * Reply status "item not stored": an increment with initial value whose create lost to
 * another connection's create of the same key.
 */
const statusNotStored = 0x05;
/** How many times an increment answered {@link statusNotStored} is sent again. */
const notStoredRetries = 3;
/** Expiration of a decrement that must not create a missing counter. */
const noCreate = 0xffff_ffff;
const headerBytes = 24;
/** How long a connection given up on for silence may linger half-closed (ms). */
const lingerMs = 30_000;
const incrementExtrasBytes = 20;
/** SET and ADD extras: flags (uint32, 0 here), expiration (uint32). */
const storeExtrasBytes = 8;
/** The CAS field of replies whose batch does not read it. */
const noCas = 0n;
const twoTo32 = 4_294_967_296;

/** One reply; key and value are views into the received bytes (never reused by Node). */
interface Reply {
  readonly opcode: number;
  readonly status: number;
  readonly key: Buffer;
  readonly value: Buffer;
  /** The header's CAS field when the batch reads it ({@link Pending.readsCas}), else 0. */
  readonly cas: bigint;
}

/** A batch written (or waiting for the connection) whose closing NOOP has not answered yet. */
interface Pending {
  /** Opaque of every request of the batch; memcached echoes it in each reply. */
  readonly opaque: number;
  /** The batch's bytes, until they are written. */
  frame: Buffer | undefined;
  /** `performance.now()` past which the batch times out; set when written. */
  deadline: number;
  /** Whether replies carry the header's CAS field (gets only; others skip reading it). */
  readonly readsCas: boolean;
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
  /** Connections given up on for silence, half-closed until the node closes its side. */
  private readonly lingering = new Set<Socket>();
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
   * value `hits` and its expiration (the binary protocol's increment with initial value). Each
   * increment answers (the non-quiet increment), so `done` gets the counters' values after
   * it, parallel to `increments`: undefined where the increment failed (and for every
   * increment when the batch failed, or when the node answered a different number of
   * increments than sent), with the first error.
   *
   * The create is not race-free on the server: when two connections create the same missing
   * counter at once, memcached (1.6) answers the loser `NOT_STORED` (status 0x05), having
   * counted nothing for it. Those increments are sent again (the counter exists by then, so
   * the retry is a plain increment), at most {@link notStoredRetries} times, before `done` is
   * called: so every increment that answers a value counted exactly once.
   */
  incrementMultiValues(
    increments: readonly McIncrement[],
    done: (err: Error | undefined, values: (number | undefined)[]) => void,
  ): void {
    this.incrementRound(increments, notStoredRetries, done);
  }

  private incrementRound(
    increments: readonly McIncrement[],
    retriesLeft: number,
    done: (err: Error | undefined, values: (number | undefined)[]) => void,
  ): void {
    const opaque = this.nextOpaque();
    const frame = counterFrame(opIncrement, increments, opaque);
    const values = new Array<number | undefined>(increments.length);
    // memcached answers a connection's requests in order (the reply carries no key).
    let replies = 0;
    let replyError: Error | undefined;
    let lost: number[] | undefined;
    this.send(
      opaque,
      frame,
      (reply) => {
        const at = replies++;
        if (reply.status === 0 && reply.value.length === 8) {
          values[at] =
            reply.value.readUInt32BE(0) * twoTo32 + reply.value.readUInt32BE(4);
        } else if (reply.status === statusNotStored && retriesLeft > 0) {
          (lost ??= []).push(at);
        } else {
          replyError ??= statusError("increment", reply);
        }
      },
      (err) => {
        if (err === undefined && replies !== increments.length) {
          err = new Error(
            `memcached node ${this.address} answered ${replies} of ${increments.length} increments`,
          );
        }
        if (err !== undefined) {
          done(err, new Array<number | undefined>(increments.length));
        } else if (lost === undefined) {
          done(replyError, values);
        } else {
          const again = lost;
          this.incrementRound(
            again.map((at) => increments[at]!),
            retriesLeft - 1,
            (retryError, retried) => {
              for (let i = 0; i < again.length; i++)
                values[again[i]!] = retried[i];
              done(replyError ?? retryError, values);
            },
          );
        }
      },
    );
  }

  /**
   * Subtracts `hits` from each counter in one round trip (quiet decrements), never creating
   * one: a counter that no longer exists (expired or evicted) is left missing and not
   * reported. memcached floors a decrement at 0. `done` gets how many decrements failed
   * otherwise, and the first error.
   */
  decrementMulti(
    decrements: readonly McDecrement[],
    done: (err: Error | undefined, failed: number) => void,
  ): void {
    const opaque = this.nextOpaque();
    // An expiration of all ones makes the server answer "key not found" rather than create.
    const frame = counterFrame(
      opDecrementQ,
      decrements.map(({ key, hits }) => ({ key, hits, expiration: noCreate })),
      opaque,
    );
    let failed = 0;
    let replyError: Error | undefined;
    this.send(
      opaque,
      frame,
      (reply) => {
        if (reply.status === statusKeyNotFound) return;
        failed++;
        replyError ??= statusError("decrement", reply);
      },
      (err) => {
        if (err !== undefined) done(err, decrements.length);
        else done(replyError, failed);
      },
    );
  }

  /**
   * Reads one key with its CAS token (GET, the text protocol's `gets`); `done` gets the value
   * and token, or undefined when the key is missing. Fails (with {@link McReplyError}) on an
   * error status, on a reply that is not one GET's, and on a CAS token of 0: memcached started
   * without CAS (`-C`) answers 0 and then stores a SET with token 0 unconditionally, which
   * would break the compare-and-swap loop silently.
   */
  gets(
    key: string,
    done: (err: Error | undefined, found: McCasValue | undefined) => void,
  ): void {
    const opaque = this.nextOpaque();
    const frame = Buffer.allocUnsafe(2 * headerBytes + Buffer.byteLength(key));
    writeFrame(
      frame,
      writeFrame(frame, 0, opGet, key, 0, opaque),
      opNoop,
      "",
      0,
      opaque,
    );
    let replies = 0;
    let found: McCasValue | undefined;
    let replyError: Error | undefined;
    this.send(
      opaque,
      frame,
      (reply) => {
        replies++;
        if (reply.opcode !== opGet) {
          replyError ??= unexpectedOpcode("get", reply);
        } else if (reply.status === statusKeyNotFound) {
          found = undefined;
        } else if (reply.status !== 0) {
          replyError ??= statusError("get", reply);
        } else if (reply.cas === noCas) {
          replyError ??= new McReplyError(
            `memcached node ${this.address} answered a get without a CAS token (is it started with -C?); token buckets need compare-and-swap`,
          );
        } else {
          found = { value: reply.value, cas: reply.cas };
        }
      },
      (err) => {
        if (err === undefined && replyError === undefined && replies !== 1) {
          replyError = new McReplyError(
            `memcached node ${this.address} answered ${replies} replies to one get`,
          );
        }
        const failure = err ?? replyError;
        done(failure, failure === undefined ? found : undefined);
      },
      true,
    );
  }

  /**
   * Stores `value` at `key` only if the item still has the CAS token `cas` (SET with a CAS
   * token, the text protocol's `cas`), with the expiration field `expiration` (see
   * `toMcExpiration`); `done` gets the outcome: `stored`, `exists` (changed since read) or
   * `not-found` (gone since read). A token of 0 is refused (it would store unconditionally).
   */
  cas(
    key: string,
    value: string,
    expiration: number,
    cas: bigint,
    done: (err: Error | undefined, outcome: McStoreOutcome | undefined) => void,
  ): void {
    if (cas === noCas) {
      done(
        new RangeError("a CAS token of 0 would store unconditionally"),
        undefined,
      );
      return;
    }
    this.store(opSet, "cas", key, value, expiration, cas, done);
  }

  /**
   * Stores `value` at `key` only if the key is missing (ADD), with the expiration field
   * `expiration` (see `toMcExpiration`); `done` gets the outcome: `stored`, or `exists`.
   */
  add(
    key: string,
    value: string,
    expiration: number,
    done: (err: Error | undefined, outcome: McStoreOutcome | undefined) => void,
  ): void {
    this.store(opAdd, "add", key, value, expiration, noCas, done);
  }

  /** Sends one SET or ADD (with its CAS token, 0 for none) and reads its outcome. */
  private store(
    opcode: number,
    operation: string,
    key: string,
    value: string,
    expiration: number,
    cas: bigint,
    done: (err: Error | undefined, outcome: McStoreOutcome | undefined) => void,
  ): void {
    const opaque = this.nextOpaque();
    const keyBytes = Buffer.byteLength(key);
    const valueBytes = Buffer.byteLength(value);
    const frame = Buffer.allocUnsafe(
      2 * headerBytes + storeExtrasBytes + keyBytes + valueBytes,
    );
    const extras = headerBytes;
    const valueAt = writeFrame(frame, 0, opcode, key, storeExtrasBytes, opaque);
    frame.writeUInt32BE(storeExtrasBytes + keyBytes + valueBytes, 8); // body with the value
    frame.writeBigUInt64BE(cas, 16);
    frame.writeUInt32BE(0, extras); // flags
    frame.writeUInt32BE(expiration, extras + 4);
    frame.write(value, valueAt, "utf8");
    writeFrame(frame, valueAt + valueBytes, opNoop, "", 0, opaque);
    let replies = 0;
    let outcome: McStoreOutcome | undefined;
    let replyError: Error | undefined;
    this.send(
      opaque,
      frame,
      (reply) => {
        replies++;
        if (reply.opcode !== opcode)
          replyError ??= unexpectedOpcode(operation, reply);
        else if (reply.status === 0) outcome = "stored";
        else if (reply.status === statusKeyExists) outcome = "exists";
        else if (reply.status === statusKeyNotFound) outcome = "not-found";
        else replyError ??= statusError(operation, reply);
      },
      (err) => {
        if (err === undefined && replyError === undefined && replies !== 1) {
          replyError = new McReplyError(
            `memcached node ${this.address} answered ${replies} replies to one ${operation}`,
          );
        }
        const failure = err ?? replyError;
        done(failure, failure === undefined ? outcome : undefined);
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
    for (const lingering of this.lingering) lingering.destroy();
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
    readsCas = false,
  ): void {
    if (this.closed) {
      onDone(new Error(`memcached node ${this.address} is closed`));
      return;
    }
    const batch: Pending = {
      opaque,
      frame,
      deadline: 0,
      readsCas,
      onReply,
      onDone,
    };
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
      // The connection is given up on, but only half-closed: what was written still reaches
      // the node, and a node that is frozen rather than gone applies all of it when it thaws
      // (a full close would answer its first reply with a reset, and it would drop the rest).
      // The pending batches fail now; the socket lingers, reading and ignoring, until the
      // node closes its side or `lingerMs` pass.
      this.closedConnection(
        socket,
        new McSilenceError(
          `memcached node ${this.address} did not answer within ${this.timeoutMs} ms`,
        ),
      );
      this.lingering.add(socket);
      socket.end();
      setTimeout(() => socket.destroy(), lingerMs).unref();
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
        : nodeTls().connect({
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
    socket.on("finish", () => {
      if (!this.lingering.has(socket)) socket.destroy();
    });
    socket.on("close", () => {
      clearTimeout(connectTimer);
      this.lingering.delete(socket);
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
          cas: batch.readsCas ? data.readBigUInt64BE(offset + 16) : noCas,
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

/**
 * Builds a batch of counter commands (increment or decrement by `hits`) closed by a NOOP.
 * Extras: amount (uint64), initial value (uint64, = the amount), expiration (uint32),
 * big-endian.
 */
function counterFrame(
  opcode: number,
  items: readonly McIncrement[],
  opaque: number,
): Buffer {
  let size = headerBytes;
  for (const item of items) {
    size += headerBytes + incrementExtrasBytes + Buffer.byteLength(item.key);
  }
  const frame = Buffer.allocUnsafe(size);
  let offset = 0;
  for (const item of items) {
    const extras = offset + headerBytes;
    offset = writeFrame(
      frame,
      offset,
      opcode,
      item.key,
      incrementExtrasBytes,
      opaque,
    );
    const high = Math.floor(item.hits / twoTo32);
    const low = item.hits % twoTo32;
    frame.writeUInt32BE(high, extras);
    frame.writeUInt32BE(low, extras + 4);
    frame.writeUInt32BE(high, extras + 8);
    frame.writeUInt32BE(low, extras + 12);
    frame.writeUInt32BE(item.expiration, extras + 16);
  }
  writeFrame(frame, offset, opNoop, "", 0, opaque);
  return frame;
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

function unexpectedOpcode(operation: string, reply: Reply): McReplyError {
  return new McReplyError(
    `memcached answered the ${operation} with a reply to opcode 0x${reply.opcode.toString(16)}`,
  );
}

function statusError(operation: string, reply: Reply): Error {
  const text = reply.value.toString();
  return new McReplyError(
    `memcached ${operation} failed with status 0x${reply.status.toString(16)}${text !== "" ? `: ${text}` : ""}`,
  );
}
