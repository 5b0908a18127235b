import { Server, type Response } from "memjs";
import { connect as netConnect, isIP, type Socket } from "node:net";
import { connect as tlsConnect, type ConnectionOptions } from "node:tls";
import type { McNodeAddress } from "./mc-options.js";

/** Longest key the memcached protocol accepts, in bytes (upstream gomemcache `legalKey`). */
export const maxMcKeyBytes = 250;

/**
 * Longest expiration memcached takes as relative seconds: 30 days. Larger values are read as
 * an absolute Unix time (memcached `protocol.txt`, "Expiration times").
 */
export const maxRelativeExpirationSeconds = 2_592_000;

/** Why a key cannot be stored in memcached, if it cannot. */
export type McKeyProblem = "too-long" | "illegal-character";

/**
 * Returns why `key` is not a legal memcached key, or `undefined` when it is: longer than
 * {@link maxMcKeyBytes} bytes of UTF-8, or containing a byte ≤ 0x20 (space, control
 * characters) or 0x7f. Same rule as upstream's client (gomemcache `legalKey`), which the text
 * protocol needs; we apply it too so both services store the same keys.
 */
export function mcKeyProblem(key: string): McKeyProblem | undefined {
  if (key.length > maxMcKeyBytes) return "too-long";
  let ascii = true;
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    if (c <= 0x20 || c === 0x7f) return "illegal-character";
    if (c >= 0x80) ascii = false;
  }
  // Non-ASCII characters take 2–4 bytes in UTF-8; only then can bytes exceed characters.
  if (!ascii && Buffer.byteLength(key) > maxMcKeyBytes) return "too-long";
  return undefined;
}

/**
 * Whether `text` holds a character memcached keys cannot: whitespace or a control character
 * (code ≤ 0x20 or 0x7f). Used to name the culprit of an illegal key, and to check
 * `CACHE_KEY_PREFIX` at startup.
 */
export function hasIllegalKeyCharacter(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c <= 0x20 || c === 0x7f) return true;
  }
  return false;
}

/**
 * Returns the expiration field to send for a counter that should live `expirationSeconds`:
 * the seconds themselves up to 30 days, otherwise the absolute Unix time `nowSeconds +
 * expirationSeconds`, because memcached reads values over 30 days as a timestamp. (The
 * reference sends the relative value, so its MONTH and YEAR counters expire at once;
 * behavior.md §9.3 and "Where we deliberately differ" item 3.)
 *
 * @param expirationSeconds - lifetime in seconds, ≥ 0
 * @param nowSeconds - seconds since the Unix epoch
 */
export function toMcExpiration(
  expirationSeconds: number,
  nowSeconds: number,
): number {
  return expirationSeconds > maxRelativeExpirationSeconds
    ? nowSeconds + expirationSeconds
    : expirationSeconds;
}

/** One background counter increment. */
export interface McIncrement {
  /** The cache key (legal, see {@link mcKeyProblem}). */
  readonly key: string;
  /** Amount to add, ≥ 0; also the value of a counter that does not exist yet. */
  readonly hits: number;
  /** Expiration field of a created counter, see {@link toMcExpiration}. */
  readonly expiration: number;
}

/** Options of {@link McConnection}. */
export interface McConnectionOptions {
  /** Milliseconds a reply may take before the connection is dropped. */
  readonly timeoutMs: number;
  /** Milliseconds a connect (plus TLS handshake) may take. */
  readonly connectTimeoutMs: number;
  /** `tls.connect` options, or undefined for plain TCP. */
  readonly tls: ConnectionOptions | undefined;
}

// Binary protocol opcodes and sizes (memcached `protocol_binary.h`).
const opNoop = 0x0a;
const opGetKQ = 0x0d;
const opIncrementQ = 0x15;
const headerBytes = 24;
const incrementExtrasBytes = 20;
const twoTo32 = 4_294_967_296;

/**
 * The fields of memjs 1.3's `Server` that {@link McConnection} manages itself, because memjs
 * cannot open TLS connections and does not fail pending requests when the server closes the
 * connection. Internal to memjs (read from `lib/memjs/server.js` 1.3.2); the integration
 * tests exercise every use of them, so a memjs upgrade that changes them fails there.
 */
interface MemjsServerState {
  _socket: Socket | undefined;
  connected: boolean;
  connectCallbacks: ((socket: Socket) => void)[];
  responseBuffer: Buffer;
}

/** A memjs response handler that stays registered across replies until an empty one. */
type QuietHandler = ((response: Response) => void) & { quiet?: boolean };

/**
 * One persistent, pipelined binary-protocol connection to a memcached node, built on memjs's
 * `Server` (framing of replies, matching replies to requests by opaque, reply timeouts).
 * It adds what the backend needs and memjs 1.3.2 lacks: TLS, failing every pending operation
 * when the connection closes, a multi-get (GETKQ… NOOP), batched quiet increments with an
 * initial value and expiration, and a NOOP probe. Operations never throw; each reports once
 * through its callback.
 */
export class McConnection extends Server {
  /** The node's name in the ordered list. */
  readonly address: string;
  private readonly connectTimeoutMs: number;
  private readonly tlsOptions: ConnectionOptions | undefined;
  private readonly state: MemjsServerState;
  private lastOpaque = 0;
  private inFlight = 0;
  private drained: (() => void)[] = [];
  private closed = false;
  private corked = false;

  constructor(node: McNodeAddress, options: McConnectionOptions) {
    super(node.host, node.port, undefined, undefined, {
      timeout: options.timeoutMs / 1000,
      conntimeout: options.connectTimeoutMs / 1000,
    });
    this.address = node.address;
    this.connectTimeoutMs = options.connectTimeoutMs;
    this.tlsOptions = options.tls;
    this.state = this as unknown as MemjsServerState;
  }

  /**
   * Reads `keys` in one round trip; `done` gets the values found (raw bytes by key), or the
   * error that failed the whole batch (connection refused, closed, timed out).
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
      (response) => {
        const status = response.header.status;
        if (status === 0) found.set(response.key.toString(), response.val);
        else replyError ??= statusError("get", status, response);
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
      (response) => {
        failed++;
        replyError ??= statusError(
          "increment",
          response.header.status,
          response,
        );
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
   * Stops new operations, waits up to `graceMs` for pending ones, then closes the
   * connection; idempotent.
   */
  async shutdown(graceMs: number): Promise<void> {
    this.closed = true;
    if (this.inFlight > 0) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, graceMs);
        timer.unref();
        this.drained.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    const socket = this.state._socket;
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

  /**
   * Opens the connection memjs asks for (plain TCP or TLS) and fails every pending operation
   * when it closes; memjs 1.3.2 does neither (`server.js` `sock`).
   */
  override sock(_sasl: boolean, go: (socket: Socket) => void): void {
    const state = this.state;
    const current = state._socket;
    if (current !== undefined && state.connected) {
      // Batches written in the same tick (concurrent requests) leave in one system call.
      if (!this.corked) {
        this.corked = true;
        current.cork();
        process.nextTick(() => {
          this.corked = false;
          current.uncork();
        });
      }
      go(current);
      return;
    }
    state.connectCallbacks.push(go);
    if (current !== undefined) return; // still connecting
    const host = this.host;
    const port = this.port;
    const socket: Socket =
      this.tlsOptions === undefined
        ? netConnect({ host, port })
        : tlsConnect({
            ...this.tlsOptions,
            host,
            port,
            ...(isIP(host) === 0 ? { servername: host } : {}),
          });
    state._socket = socket;
    state.connected = false;
    // Bytes left over from a broken connection must not be parsed as replies on the new one.
    state.responseBuffer = Buffer.alloc(0);
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
    socket.once(
      this.tlsOptions === undefined ? "connect" : "secureConnect",
      () => {
        clearTimeout(connectTimer);
        if (state._socket !== socket) return;
        state.connected = true;
        const waiting = state.connectCallbacks;
        state.connectCallbacks = [];
        for (const callback of waiting) callback(socket);
      },
    );
    socket.on("data", (data: Buffer) => {
      // Late bytes of a connection memjs gave up on (reply timeout) must not mix with the
      // replies of the current one.
      if (state._socket === socket) this.responseHandler(data);
    });
    let lastError: Error | undefined;
    socket.on("error", (err) => {
      lastError = err;
    });
    // After memjs's reply timeout ends the socket, or after shutdown, do not wait for the peer.
    socket.on("finish", () => socket.destroy());
    socket.on("close", () => {
      clearTimeout(connectTimer);
      if (state._socket !== socket) return;
      state._socket = undefined;
      state.connected = false;
      // memjs's error() fails every registered operation and forgets the socket.
      this.error(
        lastError ??
          new Error(`memcached node ${this.address} closed the connection`),
      );
    });
  }

  /**
   * Keeps the bytes of replies not yet complete; memjs copies every chunk into a new buffer,
   * here a chunk is used as it is when nothing is pending (the usual case).
   */
  override appendToBuffer(data: Buffer): Buffer {
    const state = this.state;
    state.responseBuffer =
      state.responseBuffer.length === 0
        ? data
        : Buffer.concat([state.responseBuffer, data]);
    return state.responseBuffer;
  }

  private nextOpaque(): number {
    this.lastOpaque = (this.lastOpaque + 1) >>> 0;
    return this.lastOpaque;
  }

  /**
   * Writes one batch that ends in a NOOP and routes its replies: `onReply` for each reply
   * before the NOOP's, then `onDone` once (with the error if the batch failed as a whole).
   */
  private send(
    opaque: number,
    frame: Buffer,
    onReply: (response: Response) => void,
    onDone: (err: Error | undefined) => void,
  ): void {
    if (this.closed) {
      onDone(new Error(`memcached node ${this.address} is closed`));
      return;
    }
    this.inFlight++;
    let finished = false;
    const finish = (err: Error | undefined): void => {
      if (finished) return;
      finished = true;
      if (--this.inFlight === 0 && this.drained.length > 0) {
        const waiting = this.drained;
        this.drained = [];
        for (const resolve of waiting) resolve();
      }
      onDone(err);
    };
    const handler: QuietHandler = (response) => {
      // memjs retires a quiet handler on the first reply without a body: our NOOP (or an
      // unexpected bodiless reply, after which the NOOP's reply would go unrouted).
      if (response.header.totalBodyLength === 0) {
        if (response.header.opcode !== opNoop) onReply(response);
        finish(undefined);
      } else {
        onReply(response);
      }
    };
    handler.quiet = true;
    this.onResponse(opaque, handler);
    this.onError(opaque, (err) => {
      finish(err instanceof Error ? err : new Error(String(err)));
    });
    this.write(frame);
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
  frame.writeUInt8(0x80, offset); // request magic
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

function statusError(
  operation: string,
  status: number,
  response: Response,
): Error {
  const text = response.val.toString();
  return new Error(
    `memcached ${operation} failed with status 0x${status.toString(16)}${text !== "" ? `: ${text}` : ""}`,
  );
}
