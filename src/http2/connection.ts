import type { Socket } from "node:net";
import type { Logger } from "pino";
import { AbuseMeter } from "./abuse-meter.js";
import {
  http2ConnectionDefaults,
  type Http2ConnectionOptions,
} from "./connection-options.js";
import {
  clientPreface,
  defaultWindowBytes,
  ErrorCode,
  errorCodeName,
  Flag,
  frameHeaderBytes,
  FrameType,
  maxMaxFrameBytes,
  maxWindowBytes,
  minMaxFrameBytes,
  SettingId,
} from "./frames.js";
import { H2Stream } from "./h2-stream.js";
import { HeaderListTooLargeError, HpackDecoder, HpackError } from "./hpack.js";
import {
  headerShareOfMemory,
  type Http2Event,
  http2LimitDefaults,
} from "./limits.js";
import { OutputQueue, type OutputOwner } from "./output-queue.js";
import {
  isValidTrailers,
  parseRequestHeaders,
  type RequestPseudoHeaders,
} from "./request-headers.js";
import { StreamTable } from "./stream-table.js";

// One HTTP/2 connection, server side (RFC 9113): frame parsing, the stream state machine,
// receive-side flow control and the abuse limits. The write side (batching, send windows) is
// output-queue.ts, the streams' own API h2-stream.ts. What the streams carry is someone
// else's business: each new request is handed to `onStream`, which attaches a `StreamSink`.

/** Largest compressed header block we collect across CONTINUATION frames, per list byte. */
const compressedBytesPerListByte = 4;

/**
 * Work one connection may do in one event-loop turn before it yields to the others (see
 * `yieldTurn`): requests (header blocks) and frame bytes. 100 requests of the fast path on the
 * memory backend take about 2 ms.
 */
const maxStreamsPerTurn = 100;
const maxBytesPerTurn = 256 * 1024;

const emptyChunk = Buffer.alloc(0);

/** Ids of streams we reset, remembered so that frames still in flight are ignored (§5.1). */
const recentlyResetCapacity = 256;

/** A header block being collected across HEADERS and CONTINUATION frames. */
interface PendingBlock {
  readonly streamId: number;
  /** Flags of the HEADERS frame (END_STREAM). */
  readonly flags: number;
  readonly fragments: Buffer[];
  size: number;
  /** CONTINUATION frames received so far. */
  continuations: number;
  /** The HEADERS frame depended on its own stream: a stream error once decoded. */
  readonly selfDependent: boolean;
}

/**
 * A server-side HTTP/2 connection over a connected socket (cleartext or TLS). It starts by
 * sending its SETTINGS, expects the client preface, and serves until the socket closes, a
 * connection error ends it (GOAWAY with the error, then close), or {@link shutdown} drains it.
 *
 * Output: frames are appended to one buffer and written with one socket write per
 * event-loop turn (`setImmediate`), so all answers decided in one turn share one syscall.
 */
export class Http2Connection implements OutputOwner {
  /** Our SETTINGS_INITIAL_WINDOW_SIZE, in bytes. @internal */
  readonly initialWindow: number;
  /** The peer's SETTINGS_INITIAL_WINDOW_SIZE, in bytes. @internal */
  peerInitialWindow = defaultWindowBytes;
  /** The write side: frames, batching, send windows. @internal */
  readonly output: OutputQueue;

  private readonly socket: Socket;
  private readonly options: Http2ConnectionOptions;
  private readonly logger: Logger;
  private readonly decoder = new HpackDecoder();
  /** Open streams by id (not a Map: see StreamTable). */
  private readonly streams = new StreamTable<H2Stream>();
  private readonly maxConcurrentStreams: number;
  private readonly maxHeaderListBytes: number;
  private readonly maxMemoryBytes: number;
  /** Header list and body bytes held by the streams still open (see maxConnectionMemoryBytes). */
  private memoryBytes = 0;
  /** The header list part of memoryBytes. */
  private headerMemoryBytes = 0;
  /** Streams reset by the peer whose work is not done (they keep a concurrency slot). */
  private abandonedStreams = 0;
  private readonly handshakeTimeoutMs: number;
  private readonly idleTimeoutMs: number;
  private readonly maxContinuationFrames: number;
  private readonly headerBlockTimeoutMs: number;
  /** Flood score, reset token bucket, PING strikes. */
  private readonly meter: AbuseMeter;
  private readonly onEvent: ((event: Http2Event) => void) | undefined;
  /** When the connection started (ms, nowMs clock): the handshake deadline counts from it. */
  private readonly startedAtMs: number;
  /** Our SETTINGS were acknowledged (with the peer's preface and SETTINGS: handshake done). */
  private settingsAcked = false;
  /** When the last stream closed (ms); the idle time counts from it while none is open. */
  private idleSinceMs: number;
  /** When the header block in progress started (ms). */
  private blockStartedAtMs = 0;
  /** The one timer of the connection (handshake, header block, idle), re-armed lazily. */
  private timer: NodeJS.Timeout | undefined = undefined;
  private timerAtMs = Number.POSITIVE_INFINITY;
  /** An internal error was logged already (once per connection). */
  private failed = false;
  /** Work done since the last turn ended (see yieldTurn). */
  private turnBytes = 0;
  private turnStreams = 0;
  /** Reading is paused until the check phase (see yieldTurn). */
  private yielding = false;
  private readonly afterYield = (): void => {
    this.yielding = false;
    this.turnBytes = 0;
    this.turnStreams = 0;
    if (this.dead) return;
    if (!this.output.congested) this.socket.resume();
    if (this.pending === undefined) return;
    try {
      this.receive(emptyChunk);
    } catch (err) {
      this.internalError(err);
    }
  };
  private readonly onTimer = (): void => {
    this.timer = undefined;
    this.timerAtMs = Number.POSITIVE_INFINITY;
    try {
      this.checkDeadlines();
    } catch (err) {
      this.internalError(err);
    }
  };
  private readonly connectionWindow: number;
  private readonly nowMs: () => number;

  /** Bytes of the client preface still expected (24 → 0). */
  private prefaceLeft = clientPreface.length;
  private settingsReceived = false;
  private pending: Buffer | undefined = undefined;
  private block: PendingBlock | undefined = undefined;
  /** Highest stream id the peer used (ids must increase, §5.1.1). */
  private lastPeerStreamId = 0;
  /** Highest stream id we accepted for processing: the GOAWAY's last stream id. */
  private lastAcceptedStreamId = 0;
  private readonly recentlyReset: number[] = [];
  /** Ids of streams the peer reset (RST_STREAM), remembered the same way. */
  private readonly resetByPeer: number[] = [];
  private connRecvWindow: number;
  private connRecvUnacked = 0;
  /** GOAWAY sent: no new streams; the connection ends once the open ones are done. */
  private draining = false;
  /** A connection error or close: nothing more is read or written. */
  private dead = false;
  private endTimer: NodeJS.Timeout | undefined = undefined;

  constructor(socket: Socket, options: Http2ConnectionOptions) {
    this.socket = socket;
    this.options = options;
    this.logger = options.logger;
    const d = http2ConnectionDefaults;
    this.maxConcurrentStreams =
      options.maxConcurrentStreams ?? d.maxConcurrentStreams;
    this.initialWindow = options.initialWindowBytes ?? d.initialWindowBytes;
    this.connectionWindow =
      options.connectionWindowBytes ?? d.connectionWindowBytes;
    this.maxHeaderListBytes =
      options.maxHeaderListBytes ?? d.maxHeaderListBytes;
    const l = http2LimitDefaults;
    this.maxMemoryBytes =
      options.maxConnectionMemoryBytes ?? l.maxConnectionMemoryBytes;
    this.handshakeTimeoutMs =
      options.handshakeTimeoutMs ?? l.handshakeTimeoutMs;
    this.idleTimeoutMs = options.idleTimeoutMs ?? l.maxConnectionIdleMs;
    this.maxContinuationFrames =
      options.maxContinuationFrames ?? l.maxContinuationFrames;
    this.headerBlockTimeoutMs =
      options.headerBlockTimeoutMs ?? l.headerBlockTimeoutMs;
    this.onEvent = options.onEvent;
    this.nowMs = options.nowMs ?? (() => performance.now());
    this.startedAtMs = this.nowMs();
    this.idleSinceMs = this.startedAtMs;
    this.meter = new AbuseMeter(
      {
        floodLimit: options.floodLimit ?? l.floodLimit,
        floodDecayPerSecond:
          options.floodDecayPerSecond ?? l.floodDecayPerSecond,
        streamResetLimit: options.streamResetLimit ?? l.streamResetLimit,
        keepaliveMinTimeMs:
          options.keepaliveMinTimeMs ?? l.keepaliveMinTimeMs,
      },
      this.nowMs,
      this.startedAtMs,
    );
    this.output = new OutputQueue(
      socket,
      this,
      options.maxQueuedOutputBytes ?? d.maxQueuedOutputBytes,
    );
    this.connRecvWindow = defaultWindowBytes;

    socket.setNoDelay(true);
    socket.on("data", (chunk: Buffer) => {
      try {
        this.receive(chunk);
      } catch (err) {
        this.internalError(err);
      }
    });
    socket.on("drain", () => {
      this.onDrain();
    });
    socket.on("error", (err: Error) => {
      this.logger.debug({ err }, "http2 socket error");
    });
    socket.on("close", () => {
      this.onSocketClose();
    });
    this.writeSettings();
    this.armTimer(
      this.startedAtMs +
        (this.idleTimeoutMs > 0
          ? Math.min(this.handshakeTimeoutMs, this.idleTimeoutMs)
          : this.handshakeTimeoutMs),
    );
  }

  /** Whether the socket is TLS. */
  get encrypted(): boolean {
    return "encrypted" in this.socket && this.socket.encrypted === true;
  }

  /** Number of open streams. */
  get openStreams(): number {
    return this.streams.size;
  }

  /** Whether the connection is closed, or closing after an error or a drain. */
  isClosed(): boolean {
    return this.dead;
  }

  private isAlive(): boolean {
    return !this.dead;
  }

  /**
   * Starts a graceful close: GOAWAY(NO_ERROR) with the last stream accepted, so the client
   * opens new calls elsewhere; open streams finish, then the socket is ended. Idempotent.
   */
  shutdown(): void {
    if (this.dead || this.draining) return;
    this.draining = true;
    this.output.writeGoaway(this.lastAcceptedStreamId, ErrorCode.noError);
    this.endIfDrained();
  }

  /** Closes the socket now; open streams are aborted. Idempotent. */
  destroy(): void {
    this.abortAll(ErrorCode.cancel);
    this.dead = true;
    this.clearTimer();
    this.socket.destroy();
  }

  /**
   * Contains an exception thrown while handling this connection or one of its streams: logs
   * it once with the peer, counts `internal_error`, and ends the connection with GOAWAY
   * INTERNAL_ERROR (then closes the socket). Never throws. @internal
   */
  internalError(err: unknown): void {
    try {
      if (!this.failed) {
        this.failed = true;
        this.logger.warn(
          {
            err,
            peer: `${this.socket.remoteAddress ?? "unix"}:${String(this.socket.remotePort ?? "")}`,
          },
          "http2 connection failed; closing it with GOAWAY INTERNAL_ERROR",
        );
        this.onEvent?.("internal_error");
      }
      this.connectionError(ErrorCode.internalError, "internal error");
    } catch {
      // Whatever state the connection is in, the socket goes.
      this.dead = true;
      this.socket.destroy();
    }
  }

  /** A stream reset while working has finished its work: its slot is free. @internal */
  releaseAbandoned(): void {
    if (this.abandonedStreams > 0) this.abandonedStreams--;
  }

  /** Ends the connection with GOAWAY ENHANCE_YOUR_CALM (a limit acted), counted. */
  private calm(reason: string): void {
    if (this.dead) return;
    this.logger.debug({ reason }, "http2 peer exceeded a limit");
    this.onEvent?.("enhance_your_calm");
    this.connectionError(ErrorCode.enhanceYourCalm, reason);
  }

  /**
   * Adds `points` to the flood score (frames that make no progress, refused and malformed
   * streams); the score decays with time and responses sent; beyond the limit the connection
   * is ended (see http2LimitDefaults.floodLimit).
   */
  private flood(points: number): void {
    if (this.meter.flood(points))
      this.calm("too many frames that make no progress");
  }

  /** Makes the connection's timer fire at `atMs` (nowMs clock) unless it fires sooner. */
  private armTimer(atMs: number): void {
    if (this.dead || atMs >= this.timerAtMs) return;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timerAtMs = atMs;
    this.timer = setTimeout(
      this.onTimer,
      Math.max(1, Math.ceil(atMs - this.nowMs())),
    );
    this.timer.unref();
  }

  private clearTimer(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    this.timerAtMs = Number.POSITIVE_INFINITY;
  }

  /** The timer fired: end what is overdue, re-arm for what is still pending. */
  private checkDeadlines(): void {
    if (this.dead) return;
    const now = this.nowMs();
    let next = Number.POSITIVE_INFINITY;
    if (!this.handshakeDone()) {
      const at = this.startedAtMs + this.handshakeTimeoutMs;
      if (now >= at) {
        this.onEvent?.("handshake_timeout");
        this.logger.debug(
          { preface: this.prefaceLeft === 0, settings: this.settingsReceived },
          "http2 handshake timed out",
        );
        if (this.prefaceLeft === 0 && this.settingsReceived)
          this.connectionError(
            ErrorCode.settingsTimeout,
            "SETTINGS not acknowledged in time",
          );
        else this.destroy();
        return;
      }
      next = at;
    }
    if (this.block !== undefined) {
      const at = this.blockStartedAtMs + this.headerBlockTimeoutMs;
      if (now >= at) {
        this.calm("header block not ended in time");
        return;
      }
      next = Math.min(next, at);
    }
    if (this.idleTimeoutMs > 0 && this.streams.size === 0 && !this.draining) {
      const at = this.idleSinceMs + this.idleTimeoutMs;
      if (now >= at) {
        this.onEvent?.("idle_timeout");
        this.shutdown();
        return;
      }
      next = Math.min(next, at);
    }
    if (next !== Number.POSITIVE_INFINITY) this.armTimer(next);
  }

  private handshakeDone(): boolean {
    return this.settingsAcked && this.settingsReceived;
  }

  // ---- input -------------------------------------------------------------------------------

  /** @internal exported for tests: feeds received socket bytes. */
  receive(chunk: Buffer): void {
    if (this.dead) return;
    if (this.yielding) {
      // Paused for fairness (see yieldTurn): keep the bytes for the next turn.
      this.pending =
        this.pending === undefined
          ? chunk
          : Buffer.concat([this.pending, chunk]);
      return;
    }
    let buf = chunk;
    if (this.pending !== undefined) {
      buf =
        chunk.length === 0
          ? this.pending
          : Buffer.concat([this.pending, chunk]);
      this.pending = undefined;
    }
    let off = 0;
    if (this.prefaceLeft > 0) {
      const at = clientPreface.length - this.prefaceLeft;
      const n = Math.min(this.prefaceLeft, buf.length);
      if (clientPreface.compare(buf, 0, n, at, at + n) !== 0) {
        this.connectionError(ErrorCode.protocolError, "bad client preface");
        return;
      }
      this.prefaceLeft -= n;
      off = n;
    }
    const length = buf.length;
    while (this.isAlive() && length - off >= frameHeaderBytes) {
      const size = buf.readUIntBE(off, 3);
      // We never raise SETTINGS_MAX_FRAME_SIZE above its initial 16,384 (§4.2).
      if (size > minMaxFrameBytes) {
        this.connectionError(ErrorCode.frameSizeError, "frame too large");
        return;
      }
      if (length - off < frameHeaderBytes + size) break;
      const type = buf.readUInt8(off + 3);
      const flags = buf.readUInt8(off + 4);
      const streamId = buf.readUInt32BE(off + 5) & 0x7fff_ffff;
      const start = off + frameHeaderBytes;
      off = start + size;
      this.handleFrame(type, flags, streamId, buf, start, off);
      this.turnBytes += frameHeaderBytes + size;
      if (
        (this.turnStreams >= maxStreamsPerTurn ||
          this.turnBytes >= maxBytesPerTurn) &&
        this.isAlive()
      ) {
        if (off < length) this.pending = buf.subarray(off);
        this.yieldTurn();
        return;
      }
    }
    if (this.isAlive() && off < length) this.pending = buf.subarray(off);
  }

  /**
   * Stops reading this connection until the event loop's check phase: one connection that
   * sends a lot (a flood of requests, resets or large header blocks) cannot keep the others
   * waiting for more than `maxStreamsPerTurn` requests or `maxBytesPerTurn` bytes of work at a
   * time. Legitimate connections, a few requests per turn, never reach it.
   */
  private yieldTurn(): void {
    this.yielding = true;
    this.socket.pause();
    setImmediate(this.afterYield);
  }

  private handleFrame(
    type: number,
    flags: number,
    streamId: number,
    buf: Buffer,
    start: number,
    end: number,
  ): void {
    if (!this.settingsReceived && type !== FrameType.settings) {
      // The preface's second half is a SETTINGS frame (§3.4).
      this.connectionError(
        ErrorCode.protocolError,
        "first frame is not SETTINGS",
      );
      return;
    }
    if (this.block !== undefined && type !== FrameType.continuation) {
      this.connectionError(ErrorCode.protocolError, "expected CONTINUATION");
      return;
    }
    switch (type) {
      case FrameType.data:
        this.onDataFrame(flags, streamId, buf, start, end);
        return;
      case FrameType.headers:
        this.onHeadersFrame(flags, streamId, buf, start, end);
        return;
      case FrameType.priority:
        this.onPriorityFrame(streamId, buf, start, end);
        return;
      case FrameType.rstStream:
        this.onRstStreamFrame(streamId, buf, start, end);
        return;
      case FrameType.settings:
        this.onSettingsFrame(flags, streamId, buf, start, end);
        return;
      case FrameType.pushPromise:
        // Clients cannot push (§8.4).
        this.connectionError(
          ErrorCode.protocolError,
          "PUSH_PROMISE from client",
        );
        return;
      case FrameType.ping:
        this.onPingFrame(flags, streamId, buf, start, end);
        return;
      case FrameType.goaway:
        this.onGoawayFrame(streamId, end - start);
        return;
      case FrameType.windowUpdate:
        this.onWindowUpdateFrame(streamId, buf, start, end);
        return;
      case FrameType.continuation:
        this.onContinuationFrame(flags, streamId, buf, start, end);
        return;
      default:
        // Unknown frame types are ignored (§4.1, §5.5), but they make no progress.
        this.flood(1);
        return;
    }
  }

  private onDataFrame(
    flags: number,
    streamId: number,
    buf: Buffer,
    start: number,
    end: number,
  ): void {
    if (streamId === 0) {
      this.connectionError(ErrorCode.protocolError, "DATA on stream 0");
      return;
    }
    // Flow control counts the whole payload, padding included (§6.1, §6.9).
    const size = end - start;
    if (size > this.connRecvWindow) {
      this.connectionError(
        ErrorCode.flowControlError,
        "connection window exceeded",
      );
      return;
    }
    this.connRecvWindow -= size;
    this.connRecvUnacked += size;
    if (this.connRecvUnacked >= this.connectionWindow >>> 1) {
      this.connRecvWindow += this.connRecvUnacked;
      this.output.writeWindowUpdate(0, this.connRecvUnacked);
      this.connRecvUnacked = 0;
    }
    let dataStart = start;
    let dataEnd = end;
    if ((flags & Flag.padded) !== 0) {
      const padBytes = size > 0 ? buf.readUInt8(start) : 0;
      if (size === 0 || padBytes >= size) {
        this.connectionError(ErrorCode.protocolError, "bad DATA padding");
        return;
      }
      dataStart = start + 1;
      dataEnd = end - padBytes;
    }
    const stream = this.streams.get(streamId);
    if (stream === undefined) {
      this.onFrameForUnknownStream(streamId, "DATA");
      return;
    }
    if (stream.state !== "open") {
      // half-closed (remote): the request had already ended (§5.1).
      this.resetStream(stream, ErrorCode.streamClosed, true);
      return;
    }
    if (size > stream.recvWindow) {
      this.resetStream(stream, ErrorCode.flowControlError, true);
      return;
    }
    stream.recvWindow -= size;
    // Padding is never delivered: give it back at once.
    const padding = size - (dataEnd - dataStart);
    if (padding > 0) stream.consumed(padding);
    const dataBytes = dataEnd - dataStart;
    stream.receivedBytes += dataBytes;
    this.memoryBytes += dataBytes;
    if (this.memoryBytes > this.maxMemoryBytes) {
      this.calm("requests of open streams hold too much memory");
      return;
    }
    if (size === 0 && (flags & Flag.endStream) === 0) {
      // An empty DATA frame that does not end the stream makes no progress.
      this.flood(1);
      if (this.dead) return;
    }
    if (
      stream.contentLength >= 0 &&
      stream.receivedBytes > stream.contentLength
    ) {
      // content-length disagrees with the DATA received: malformed (§8.1.1).
      this.resetStream(stream, ErrorCode.protocolError, true);
      return;
    }
    if (dataBytes > 0)
      stream.sink?.onData(stream, buf.subarray(dataStart, dataEnd));
    // (The sink may have answered and closed the stream meanwhile.)
    if ((flags & Flag.endStream) !== 0 && stream.isOpen())
      this.remoteEnd(stream);
  }

  private onHeadersFrame(
    flags: number,
    streamId: number,
    buf: Buffer,
    start: number,
    end: number,
  ): void {
    if (streamId === 0) {
      this.connectionError(ErrorCode.protocolError, "HEADERS on stream 0");
      return;
    }
    let p = start;
    let padBytes = 0;
    if ((flags & Flag.padded) !== 0) {
      if (end - p < 1) {
        this.connectionError(ErrorCode.frameSizeError, "short HEADERS");
        return;
      }
      padBytes = buf.readUInt8(p);
      p++;
    }
    let selfDependent = false;
    if ((flags & Flag.priority) !== 0) {
      if (end - p < 5) {
        this.connectionError(ErrorCode.frameSizeError, "short HEADERS");
        return;
      }
      selfDependent = (buf.readUInt32BE(p) & 0x7fff_ffff) === streamId;
      p += 5;
    }
    // Padding longer than what is left for the block is a connection error (§6.2).
    if (padBytes > end - p) {
      this.connectionError(ErrorCode.protocolError, "bad HEADERS padding");
      return;
    }
    const e = end - padBytes;
    const fragment = buf.subarray(p, e);
    if ((flags & Flag.endHeaders) !== 0) {
      this.onHeaderBlock(streamId, flags, fragment, selfDependent);
      return;
    }
    this.block = {
      streamId,
      flags,
      fragments: [fragment],
      size: fragment.length,
      continuations: 0,
      selfDependent,
    };
    this.blockStartedAtMs = this.nowMs();
    this.armTimer(this.blockStartedAtMs + this.headerBlockTimeoutMs);
    if (fragment.length === 0) this.flood(1);
  }

  private onContinuationFrame(
    flags: number,
    streamId: number,
    buf: Buffer,
    start: number,
    end: number,
  ): void {
    const block = this.block;
    if (block?.streamId !== streamId) {
      this.connectionError(ErrorCode.protocolError, "unexpected CONTINUATION");
      return;
    }
    if (++block.continuations > this.maxContinuationFrames) {
      // Many small (or empty) fragments cost memory and time without a byte bound (CVE-2024-28182).
      this.calm("too many CONTINUATION frames");
      return;
    }
    if (end === start && (flags & Flag.endHeaders) === 0) {
      this.flood(1);
      if (this.dead) return;
    }
    block.fragments.push(buf.subarray(start, end));
    block.size += end - start;
    if (block.size > this.maxHeaderListBytes * compressedBytesPerListByte) {
      // Cannot be decoded within the limit; the table state would be lost: end it (§10.5).
      this.connectionError(ErrorCode.enhanceYourCalm, "header block too large");
      return;
    }
    if ((flags & Flag.endHeaders) === 0) return;
    this.block = undefined;
    this.onHeaderBlock(
      streamId,
      block.flags,
      Buffer.concat(block.fragments, block.size),
      block.selfDependent,
    );
  }

  /** A complete header block: a new request, or the trailers of an open one. */
  private onHeaderBlock(
    streamId: number,
    flags: number,
    block: Buffer,
    selfDependent: boolean,
  ): void {
    this.turnStreams++;
    let fields: string[] | undefined;
    try {
      fields = this.decoder.decode(
        block,
        0,
        block.length,
        this.maxHeaderListBytes,
      );
    } catch (err) {
      if (err instanceof HeaderListTooLargeError) {
        fields = undefined;
      } else {
        // HpackError, or anything else the peer's bytes made the decoder throw: the block is
        // undecodable and the table state lost (RFC 9113 §4.3).
        this.connectionError(
          ErrorCode.compressionError,
          err instanceof HpackError ? err.message : "malformed header block",
        );
        return;
      }
    }
    const existing = this.streams.get(streamId);
    if (existing !== undefined) {
      this.onTrailers(existing, flags, fields, selfDependent);
      return;
    }
    if (streamId <= this.lastPeerStreamId) {
      if (this.wasRecentlyReset(streamId)) return;
      // A closed stream, or an id that went backwards (§5.1, §5.1.1).
      this.connectionError(
        ErrorCode.protocolError,
        `HEADERS on closed or lower stream ${streamId}`,
      );
      return;
    }
    if (streamId % 2 === 0) {
      this.connectionError(ErrorCode.protocolError, "even stream id");
      return;
    }
    this.lastPeerStreamId = streamId;
    // After our GOAWAY new streams are ignored; the client retries them elsewhere (§6.8).
    if (this.draining) return;
    if (selfDependent) {
      this.writeRstStream(streamId, ErrorCode.protocolError);
      return;
    }
    if (
      this.streams.size + this.abandonedStreams >=
      this.maxConcurrentStreams
    ) {
      this.writeRstStream(streamId, ErrorCode.refusedStream);
      this.flood(10);
      return;
    }
    this.lastAcceptedStreamId = streamId;
    const endStream = (flags & Flag.endStream) !== 0;
    if (fields === undefined) {
      // Too large: answer 431 rather than failing the whole connection.
      const stream = new H2Stream(this, streamId, [], emptyPseudo);
      this.streams.set(streamId, stream);
      if (endStream) stream.state = "halfClosedRemote";
      stream.respondWith([[":status", "431"]], true);
      return;
    }
    // The budget first: a refused list is not worth validating (what RFC 9113 §6.5.2 counts).
    let listBytes = 16 * fields.length;
    for (const text of fields) listBytes += text.length;
    if (
      this.memoryBytes + listBytes > this.maxMemoryBytes ||
      this.headerMemoryBytes + listBytes >
        this.maxMemoryBytes * headerShareOfMemory
    ) {
      // node:http2 refuses streams beyond maxSessionMemory the same way.
      this.writeRstStream(streamId, ErrorCode.enhanceYourCalm);
      this.flood(10);
      return;
    }
    const pseudo = parseRequestHeaders(fields);
    if (pseudo === undefined) {
      // Malformed (invalid field names or values, pseudo-header rules): a stream error (§8.1.1).
      this.writeRstStream(streamId, ErrorCode.protocolError);
      this.onEvent?.("malformed_request");
      this.flood(10);
      return;
    }
    const stream = new H2Stream(this, streamId, fields, pseudo);
    this.streams.set(streamId, stream);
    this.memoryBytes += pseudo.listBytes;
    this.headerMemoryBytes += pseudo.listBytes;
    if (endStream) {
      if (pseudo.contentLength > 0) {
        this.resetStream(stream, ErrorCode.protocolError, false);
        return;
      }
      stream.state = "halfClosedRemote";
    }
    this.options.onStream(stream);
    if (endStream && stream.state !== "closed") stream.sink?.onEnd(stream);
  }

  private onTrailers(
    stream: H2Stream,
    flags: number,
    fields: string[] | undefined,
    selfDependent: boolean,
  ): void {
    if (stream.state !== "open") {
      this.resetStream(stream, ErrorCode.streamClosed, true);
      return;
    }
    // Trailers end the stream and carry no pseudo-header fields (§8.1).
    if (
      selfDependent ||
      fields === undefined ||
      (flags & Flag.endStream) === 0 ||
      !isValidTrailers(fields)
    ) {
      this.resetStream(stream, ErrorCode.protocolError, true);
      return;
    }
    this.remoteEnd(stream);
  }

  private remoteEnd(stream: H2Stream): void {
    if (
      stream.contentLength >= 0 &&
      stream.receivedBytes !== stream.contentLength
    ) {
      this.resetStream(stream, ErrorCode.protocolError, true);
      return;
    }
    if (stream.localEnded) {
      this.closeStream(stream);
      return;
    }
    stream.state = "halfClosedRemote";
    stream.sink?.onEnd(stream);
  }

  private onPriorityFrame(
    streamId: number,
    buf: Buffer,
    start: number,
    end: number,
  ): void {
    if (streamId === 0) {
      this.connectionError(ErrorCode.protocolError, "PRIORITY on stream 0");
      return;
    }
    if (end - start !== 5) {
      this.streamError(streamId, ErrorCode.frameSizeError);
      return;
    }
    // Priorities are advisory and ignored, but a stream cannot depend on itself (§5.3.1).
    if ((buf.readUInt32BE(start) & 0x7fff_ffff) === streamId)
      this.streamError(streamId, ErrorCode.protocolError);
    this.flood(1);
  }

  private onRstStreamFrame(
    streamId: number,
    buf: Buffer,
    start: number,
    end: number,
  ): void {
    if (streamId === 0) {
      this.connectionError(ErrorCode.protocolError, "RST_STREAM on stream 0");
      return;
    }
    if (end - start !== 4) {
      this.connectionError(ErrorCode.frameSizeError, "bad RST_STREAM size");
      return;
    }
    if (streamId > this.lastPeerStreamId) {
      this.connectionError(
        ErrorCode.protocolError,
        "RST_STREAM on idle stream",
      );
      return;
    }
    if (!this.meter.takeResetToken()) {
      this.calm("too many stream resets");
      return;
    }
    const byPeer = this.resetByPeer;
    if (byPeer.length >= recentlyResetCapacity) byPeer.shift();
    byPeer.push(streamId);
    const stream = this.streams.get(streamId);
    if (stream === undefined) return;
    const code = buf.readUInt32BE(start);
    this.closeStream(stream);
    stream.sink?.onAbort(stream, code);
  }

  private onSettingsFrame(
    flags: number,
    streamId: number,
    buf: Buffer,
    start: number,
    end: number,
  ): void {
    if (streamId !== 0) {
      this.connectionError(ErrorCode.protocolError, "SETTINGS on a stream");
      return;
    }
    const size = end - start;
    if ((flags & Flag.ack) !== 0) {
      if (size !== 0)
        this.connectionError(
          ErrorCode.frameSizeError,
          "SETTINGS ACK with data",
        );
      else if (this.settingsAcked) this.flood(1);
      else this.settingsAcked = true;
      return;
    }
    if (size % 6 !== 0) {
      this.connectionError(ErrorCode.frameSizeError, "bad SETTINGS size");
      return;
    }
    if (this.settingsReceived) {
      this.flood(1);
      if (this.dead) return;
    }
    this.settingsReceived = true;
    let windowDelta = 0;
    for (let p = start; p < end; p += 6) {
      const id = buf.readUInt16BE(p);
      const value = buf.readUInt32BE(p + 2);
      switch (id) {
        case SettingId.enablePush:
          if (value > 1) {
            this.connectionError(ErrorCode.protocolError, "bad ENABLE_PUSH");
            return;
          }
          break;
        case SettingId.initialWindowSize:
          if (value > maxWindowBytes) {
            this.connectionError(
              ErrorCode.flowControlError,
              "bad INITIAL_WINDOW_SIZE",
            );
            return;
          }
          windowDelta += value - this.peerInitialWindow;
          this.peerInitialWindow = value;
          break;
        case SettingId.maxFrameSize:
          if (value < minMaxFrameBytes || value > maxMaxFrameBytes) {
            this.connectionError(ErrorCode.protocolError, "bad MAX_FRAME_SIZE");
            return;
          }
          this.output.peerMaxFrameBytes = value;
          break;
        default:
          // HEADER_TABLE_SIZE: our encoder never uses the dynamic table; MAX_CONCURRENT_STREAMS:
          // we never push; MAX_HEADER_LIST_SIZE: advisory; unknown ids are ignored (§6.5.2).
          break;
      }
    }
    // The delta applies to every open stream's send window (§6.9.2).
    if (windowDelta !== 0) {
      for (const stream of this.streams.values()) {
        stream.sendWindow += windowDelta;
        if (stream.sendWindow > maxWindowBytes) {
          this.connectionError(
            ErrorCode.flowControlError,
            "stream window overflow",
          );
          return;
        }
      }
    }
    this.output.writeFrame(FrameType.settings, Flag.ack, 0, undefined, 0, 0);
    if (windowDelta > 0)
      for (const stream of this.streams.values()) this.output.pump(stream);
  }

  private onPingFrame(
    flags: number,
    streamId: number,
    buf: Buffer,
    start: number,
    end: number,
  ): void {
    if (streamId !== 0) {
      this.connectionError(ErrorCode.protocolError, "PING on a stream");
      return;
    }
    if (end - start !== 8) {
      this.connectionError(ErrorCode.frameSizeError, "bad PING size");
      return;
    }
    this.flood(1);
    if (this.dead) return;
    // We send no PING of our own: an ACK is only counted above.
    if ((flags & Flag.ack) !== 0) return;
    // grpc-go's keepalive enforcement: too frequent PINGs with no response in between are
    // strikes; the third strike ends the connection.
    const responded = this.output.respondedSincePing;
    this.output.respondedSincePing = false;
    if (this.meter.tooManyPings(responded)) {
      this.calm("too_many_pings");
      return;
    }
    this.output.writeFrame(FrameType.ping, Flag.ack, 0, buf, start, end);
  }

  private onGoawayFrame(streamId: number, size: number): void {
    if (streamId !== 0) {
      this.connectionError(ErrorCode.protocolError, "GOAWAY on a stream");
      return;
    }
    if (size < 8) {
      this.connectionError(ErrorCode.frameSizeError, "short GOAWAY");
      return;
    }
    // The client is leaving: finish what is open, then close.
    this.shutdown();
  }

  private onWindowUpdateFrame(
    streamId: number,
    buf: Buffer,
    start: number,
    end: number,
  ): void {
    if (end - start !== 4) {
      this.connectionError(ErrorCode.frameSizeError, "bad WINDOW_UPDATE size");
      return;
    }
    this.flood(1);
    if (this.dead) return;
    const increment = buf.readUInt32BE(start) & 0x7fff_ffff;
    if (streamId === 0) {
      if (increment === 0) {
        this.connectionError(ErrorCode.protocolError, "zero WINDOW_UPDATE");
        return;
      }
      if (!this.output.addConnectionWindow(increment))
        this.connectionError(
          ErrorCode.flowControlError,
          "connection window overflow",
        );
      return;
    }
    const stream = this.streams.get(streamId);
    if (stream === undefined) {
      if (streamId > this.lastPeerStreamId)
        this.connectionError(
          ErrorCode.protocolError,
          "WINDOW_UPDATE on idle stream",
        );
      // A zero increment is an error even on a stream that has just closed (§6.9).
      else if (increment === 0)
        this.writeRstStream(streamId, ErrorCode.protocolError);
      return;
    }
    if (increment === 0) {
      this.resetStream(stream, ErrorCode.protocolError, true);
      return;
    }
    stream.sendWindow += increment;
    if (stream.sendWindow > maxWindowBytes) {
      this.resetStream(stream, ErrorCode.flowControlError, true);
      return;
    }
    this.output.pump(stream);
  }

  /** DATA (or similar) for a stream not open: idle, closed by us, or closed long ago. */
  private onFrameForUnknownStream(streamId: number, what: string): void {
    if (streamId > this.lastPeerStreamId) {
      this.connectionError(ErrorCode.protocolError, `${what} on idle stream`);
      return;
    }
    this.flood(1);
    if (this.dead) return;
    if (this.resetByPeer.includes(streamId)) {
      // The peer reset it itself, so it cannot have frames in flight (§5.1, "closed").
      this.connectionError(
        ErrorCode.streamClosed,
        `${what} on a stream the peer reset`,
      );
      return;
    }
    // Frames may still be in flight on a stream we reset or refused: ignore them (§5.1).
    if (this.wasRecentlyReset(streamId)) return;
    this.writeRstStream(streamId, ErrorCode.streamClosed);
  }

  private wasRecentlyReset(streamId: number): boolean {
    return this.recentlyReset.includes(streamId);
  }

  // ---- streams -----------------------------------------------------------------------------

  /** Resets `stream`; tells its sink when `notify`. @internal */
  resetStream(stream: H2Stream, code: number, notify: boolean): void {
    if (stream.state === "closed") return;
    this.writeRstStream(stream.id, code);
    this.closeStream(stream);
    if (notify) stream.sink?.onAbort(stream, code);
  }

  private streamError(streamId: number, code: number): void {
    const stream = this.streams.get(streamId);
    if (stream !== undefined) this.resetStream(stream, code, true);
    else this.writeRstStream(streamId, code);
  }

  /** We sent END_STREAM on `stream`. @internal */
  localEnd(stream: H2Stream): void {
    stream.localEnded = true;
    stream.endPending = false;
    // A response is progress: it pays for some of the flood score.
    this.meter.responded();
    if (stream.state === "halfClosedRemote") {
      this.closeStream(stream);
      return;
    }
    // Answered before the request ended: tell the client to stop sending (§8.1).
    this.writeRstStream(stream.id, ErrorCode.noError);
    this.closeStream(stream);
  }

  private closeStream(stream: H2Stream): void {
    stream.state = "closed";
    if (this.streams.delete(stream.id)) {
      this.memoryBytes -= stream.receivedBytes + stream.headerBytes;
      this.headerMemoryBytes -= stream.headerBytes;
      if (stream.working) {
        // Its work goes on: it keeps a concurrency slot until endWork.
        stream.abandoned = true;
        this.abandonedStreams++;
      }
      if (this.streams.size === 0) {
        this.idleSinceMs = this.nowMs();
        if (this.idleTimeoutMs > 0)
          this.armTimer(this.idleSinceMs + this.idleTimeoutMs);
      }
    }
    this.output.forget(stream);
    stream.queue = undefined;
    stream.queuedBytes = 0;
    stream.releaseWaiter();
    if (this.draining) this.endIfDrained();
  }

  private abortAll(code: number): void {
    const open = [...this.streams.values()];
    this.streams.clear();
    this.memoryBytes = 0;
    this.headerMemoryBytes = 0;
    this.output.forgetAll();
    for (const stream of open) {
      stream.state = "closed";
      stream.queue = undefined;
      stream.releaseWaiter();
      stream.sink?.onAbort(stream, code);
    }
  }

  private endIfDrained(): void {
    if (this.dead || this.streams.size > 0) return;
    this.dead = true;
    this.output.flush();
    this.socket.end();
    this.armEndTimer();
  }

  /** Connection error: GOAWAY with `code`, abort the streams, close (§5.4.1). */
  private connectionError(code: number, reason: string): void {
    if (this.dead) return;
    this.logger.debug(
      { code: errorCodeName(code), reason },
      "http2 connection error",
    );
    this.output.writeGoaway(this.lastPeerStreamId, code, reason);
    this.abortAll(code);
    this.dead = true;
    this.pending = undefined;
    this.block = undefined;
    this.output.flush();
    this.socket.end();
    // What the peer still sends is not read (a flooder would make us read it all).
    this.socket.pause();
    this.armEndTimer();
  }

  private armEndTimer(): void {
    // A peer that does not close its side is cut off after a second.
    this.endTimer ??= setTimeout(() => {
      this.socket.destroy();
    }, 1000);
    this.endTimer.unref();
  }

  private onSocketClose(): void {
    clearTimeout(this.endTimer);
    this.clearTimer();
    this.dead = true;
    this.abortAll(ErrorCode.cancel);
    this.options.onClose?.(this);
  }

  private onDrain(): void {
    if (!this.output.drained()) return;
    this.socket.resume();
    for (const stream of this.streams.values())
      if (stream.queuedBytes === 0) stream.releaseWaiter();
  }

  // ---- output ------------------------------------------------------------------------------

  private writeSettings(): void {
    const payload = Buffer.allocUnsafe(4 * 6);
    let p = 0;
    for (const [id, value] of [
      [SettingId.maxConcurrentStreams, this.maxConcurrentStreams],
      [SettingId.initialWindowSize, this.initialWindow],
      [SettingId.maxHeaderListSize, this.maxHeaderListBytes],
      [SettingId.enablePush, 0],
    ] as const) {
      payload.writeUInt16BE(id, p);
      payload.writeUInt32BE(value, p + 2);
      p += 6;
    }
    this.output.writeFrame(FrameType.settings, 0, 0, payload, 0, p);
    const raise = this.connectionWindow - defaultWindowBytes;
    if (raise > 0) {
      this.connRecvWindow += raise;
      this.output.writeWindowUpdate(0, raise);
    }
  }


  /** The batch was handed to the socket: a new event-loop turn's budget. @internal */
  onFlushed(): void {
    this.turnBytes = 0;
    this.turnStreams = 0;
  }

  /** RST_STREAM, with the id remembered (frames still in flight are ignored, §5.1). */
  private writeRstStream(streamId: number, code: number): void {
    const reset = this.recentlyReset;
    if (reset.length >= recentlyResetCapacity) reset.shift();
    reset.push(streamId);
    this.output.writeRstStream(streamId, code);
  }
}

const emptyPseudo: RequestPseudoHeaders = {
  method: "",
  path: "",
  scheme: "",
  authority: "",
  contentLength: -1,
  listBytes: 0,
};
