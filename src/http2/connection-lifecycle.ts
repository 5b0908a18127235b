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
  FrameType,
  SettingId,
} from "./frames.js";
import type { H2Stream } from "./h2-stream.js";
import { type Http2Event, http2LimitDefaults } from "./limits.js";
import { OutputQueue, type OutputOwner } from "./output-queue.js";
import { StreamTable } from "./stream-table.js";

// How a server-side HTTP/2 connection starts (our SETTINGS, the handshake deadline), holds its
// streams (memory budget, concurrency slots, resets, the idle deadline) and ends (GOAWAY and
// drain, connection errors, internal errors, socket close). Reading frames is the subclass's
// part: connection.ts.

/**
 * Ids of streams we reset, remembered so that frames still in flight are ignored (§5.1); as
 * many of the streams the peer reset. @internal
 */
export const recentlyResetCapacity = 256;

/** A header block being collected across HEADERS and CONTINUATION frames. @internal */
export interface PendingBlock {
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
 * The part of {@link Http2Connection} that is not frame reading: socket, options, streams and
 * their budget, deadlines, abuse meter, output queue, and every way the connection ends.
 */
export abstract class ConnectionLifecycle implements OutputOwner {
  /** Our SETTINGS_INITIAL_WINDOW_SIZE, in bytes. @internal */
  readonly initialWindow: number;
  /** The peer's SETTINGS_INITIAL_WINDOW_SIZE, in bytes. @internal */
  peerInitialWindow = defaultWindowBytes;
  /** The write side: frames, batching, send windows. @internal */
  readonly output: OutputQueue;

  protected readonly socket: Socket;
  protected readonly options: Http2ConnectionOptions;
  protected readonly logger: Logger;
  /** Open streams by id (not a Map: see StreamTable). */
  protected readonly streams = new StreamTable<H2Stream>();
  protected readonly maxConcurrentStreams: number;
  protected readonly maxHeaderListBytes: number;
  protected readonly maxMemoryBytes: number;
  /** Header list and body bytes held by the streams still open (see maxConnectionMemoryBytes). */
  protected memoryBytes = 0;
  /** The header list part of memoryBytes. */
  protected headerMemoryBytes = 0;
  /** Streams reset by the peer whose work is not done (they keep a concurrency slot). */
  protected abandonedStreams = 0;
  private readonly handshakeTimeoutMs: number;
  private readonly idleTimeoutMs: number;
  protected readonly headerBlockTimeoutMs: number;
  /** Flood score, reset token bucket, PING strikes. */
  protected readonly meter: AbuseMeter;
  protected readonly onEvent: ((event: Http2Event) => void) | undefined;
  /** When the connection started (ms, nowMs clock): the handshake deadline counts from it. */
  private readonly startedAtMs: number;
  /** Our SETTINGS were acknowledged (with the peer's preface and SETTINGS: handshake done). */
  protected settingsAcked = false;
  /** When the last stream closed (ms); the idle time counts from it while none is open. */
  private idleSinceMs: number;
  /** When the header block in progress started (ms). */
  protected blockStartedAtMs = 0;
  /** The one timer of the connection (handshake, header block, idle), re-armed lazily. */
  private timer: NodeJS.Timeout | undefined = undefined;
  private timerAtMs = Number.POSITIVE_INFINITY;
  /** An internal error was logged already (once per connection). */
  private failed = false;
  private readonly onTimer = (): void => {
    this.timer = undefined;
    this.timerAtMs = Number.POSITIVE_INFINITY;
    try {
      this.checkDeadlines();
    } catch (err) {
      this.internalError(err);
    }
  };
  /** Receive window of the whole connection we grant, in bytes. */
  protected readonly connectionWindow: number;
  protected readonly nowMs: () => number;

  /** Bytes of the client preface still expected (24 → 0). */
  protected prefaceLeft = clientPreface.length;
  protected settingsReceived = false;
  /** Received bytes not parsed yet (an incomplete frame, or kept while yielding). */
  protected pending: Buffer | undefined = undefined;
  protected block: PendingBlock | undefined = undefined;
  /** Highest stream id the peer used (ids must increase, §5.1.1). */
  protected lastPeerStreamId = 0;
  /** Highest stream id we accepted for processing: the GOAWAY's last stream id. */
  protected lastAcceptedStreamId = 0;
  private readonly recentlyReset: number[] = [];
  protected connRecvWindow: number;
  /** GOAWAY sent: no new streams; the connection ends once the open ones are done. */
  protected draining = false;
  /** A connection error or close: nothing more is read or written. */
  protected dead = false;
  private endTimer: NodeJS.Timeout | undefined = undefined;

  /**
   * Starts serving `socket`: sends our SETTINGS (and the connection window's raise) and arms
   * the handshake deadline; received bytes go to {@link receive}.
   */
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
        keepaliveMinTimeMs: options.keepaliveMinTimeMs ?? l.keepaliveMinTimeMs,
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

  /** Feeds received socket bytes to the frame state machine. @internal */
  abstract receive(chunk: Buffer): void;

  /** The batch was handed to the socket: a new event-loop turn's budget. @internal */
  abstract onFlushed(): void;

  /** The socket has closed: tells the owner (`onClose`). */
  protected abstract onClosed(): void;

  /** Whether the socket is TLS. */
  get encrypted(): boolean {
    return "encrypted" in this.socket && this.socket.encrypted === true;
  }

  /** The connection's socket, for what TLS learned of the peer (its certificate). */
  get peerSocket(): Socket {
    return this.socket;
  }

  /** Number of open streams. */
  get openStreams(): number {
    return this.streams.size;
  }

  /** Whether the connection is closed, or closing after an error or a drain. */
  isClosed(): boolean {
    return this.dead;
  }

  protected isAlive(): boolean {
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
  protected calm(reason: string): void {
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
  protected flood(points: number): void {
    if (this.meter.flood(points))
      this.calm("too many frames that make no progress");
  }

  /** Makes the connection's timer fire at `atMs` (nowMs clock) unless it fires sooner. */
  protected armTimer(atMs: number): void {
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

  /** Whether we reset `streamId` lately (its frames may still be in flight). */
  protected wasRecentlyReset(streamId: number): boolean {
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

  /** Resets stream `streamId`, open or not (RST_STREAM `code`); tells an open one's sink. */
  protected streamError(streamId: number, code: number): void {
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

  /** Closes `stream`: frees its memory and concurrency slot (unless working), arms idleness. */
  protected closeStream(stream: H2Stream): void {
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
  protected connectionError(code: number, reason: string): void {
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
    this.onClosed();
  }

  private onDrain(): void {
    if (!this.output.drained()) return;
    this.socket.resume();
    for (const stream of this.streams.values())
      if (stream.queuedBytes === 0) stream.releaseWaiter();
  }

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

  /** RST_STREAM, with the id remembered (frames still in flight are ignored, §5.1). */
  protected writeRstStream(streamId: number, code: number): void {
    const reset = this.recentlyReset;
    if (reset.length >= recentlyResetCapacity) reset.shift();
    reset.push(streamId);
    this.output.writeRstStream(streamId, code);
  }
}
