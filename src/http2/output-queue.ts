import type { Socket } from "node:net";
import {
  defaultWindowBytes,
  Flag,
  frameHeaderBytes,
  FrameType,
  maxWindowBytes,
  minMaxFrameBytes,
  writeFrameHeader,
} from "./frames.js";
import type { H2Stream } from "./h2-stream.js";

// The write side of one HTTP/2 connection: frames are encoded into one batch buffer and handed
// to the socket with one write per event-loop turn (so all answers decided in one turn share
// one syscall); response bodies are sent as DATA within the peer's flow-control windows and
// frame size, and what does not fit waits for WINDOW_UPDATE.

/** Sent frames are buffered here and written once per event-loop turn. */
const outputInitialBytes = 16 * 1024;

/** What an {@link OutputQueue} needs of the connection it writes for. */
export interface OutputOwner {
  /** Whether the connection is dead (an error or close): no frame is written any more. */
  isClosed(): boolean;
  /** END_STREAM was sent on `stream` (its last DATA frame or its trailers). */
  localEnd(stream: H2Stream): void;
  /** The batch was handed to the socket: a new event-loop turn's input budget starts. */
  onFlushed(): void;
}

/**
 * Frame writing, batching and send-side flow control of one connection (RFC 9113 §6.9): the
 * connection's send window, the peer's SETTINGS_MAX_FRAME_SIZE, the streams waiting for the
 * connection window, and congestion of the socket (reading pauses while the peer does not
 * read what we send).
 */
export class OutputQueue {
  /** Whether socket writes are backed up beyond the limit (reading is paused). */
  congested = false;
  /** The peer's SETTINGS_MAX_FRAME_SIZE, in bytes. */
  peerMaxFrameBytes = minMaxFrameBytes;
  /** A response HEADERS frame was sent since the last PING (see the PING strikes). */
  respondedSincePing = false;

  private readonly socket: Socket;
  private readonly owner: OutputOwner;
  private readonly maxQueuedOutputBytes: number;
  /** Send window of the connection, in bytes (WINDOW_UPDATE on stream 0 raises it). */
  private connSendWindow = defaultWindowBytes;
  /** Streams with data waiting for the connection window, in arrival order. */
  private readonly blocked = new Set<H2Stream>();
  private out = Buffer.allocUnsafe(outputInitialBytes);
  private outPos = 0;
  private flushScheduled = false;
  private readonly flushNow = (): void => {
    this.flush();
  };

  /**
   * @param maxQueuedOutputBytes socket bytes queued beyond which reading from the peer is
   *   paused until the socket drains
   */
  constructor(
    socket: Socket,
    owner: OutputOwner,
    maxQueuedOutputBytes: number,
  ) {
    this.socket = socket;
    this.owner = owner;
    this.maxQueuedOutputBytes = maxQueuedOutputBytes;
  }

  /**
   * Adds a WINDOW_UPDATE on stream 0 to the connection's send window and sends what the
   * streams blocked on it have queued. @returns false when the window overflows 2^31-1 (a
   * connection error for the caller)
   */
  addConnectionWindow(increment: number): boolean {
    this.connSendWindow += increment;
    if (this.connSendWindow > maxWindowBytes) return false;
    for (const stream of this.blocked) {
      this.blocked.delete(stream);
      this.pump(stream);
      if (this.connSendWindow <= 0) break;
    }
    return true;
  }

  /** Forgets `stream` (closed): it no longer waits for the connection window. */
  forget(stream: H2Stream): void {
    this.blocked.delete(stream);
  }

  /** Forgets every stream (the connection is going). */
  forgetAll(): void {
    this.blocked.clear();
  }

  /** The socket drained: @returns whether it was congested (reading may resume). */
  drained(): boolean {
    if (!this.congested) return false;
    this.congested = false;
    return true;
  }

  /**
   * Sends `data` as one DATA frame at once when the windows and frame size allow it (the
   * common small answer); `false` when it must be queued.
   */
  tryWriteData(stream: H2Stream, data: Buffer): boolean {
    const size = data.length;
    if (
      size > stream.sendWindow ||
      size > this.connSendWindow ||
      size > this.peerMaxFrameBytes
    )
      return false;
    this.writeFrame(FrameType.data, 0, stream.id, data, 0, size);
    stream.sendWindow -= size;
    this.connSendWindow -= size;
    return true;
  }

  /**
   * Sends what `stream` has queued, as far as the windows and frame size allow; then its
   * trailers or END_STREAM once the queue is empty.
   */
  pump(stream: H2Stream): void {
    if (stream.state === "closed" || this.owner.isClosed()) return;
    if (!stream.headersSent) return;
    const queue = stream.queue;
    if (queue !== undefined) {
      for (let head = queue[0]; head !== undefined; head = queue[0]) {
        const left = head.length - stream.queueOffset;
        const allowed = Math.min(
          left,
          stream.sendWindow,
          this.connSendWindow,
          this.peerMaxFrameBytes,
        );
        if (allowed <= 0) {
          if (this.connSendWindow <= 0 && stream.sendWindow > 0)
            this.blocked.add(stream);
          return;
        }
        const last =
          allowed === left &&
          queue.length === 1 &&
          stream.endPending &&
          stream.trailersPending === undefined;
        this.writeFrame(
          FrameType.data,
          last ? Flag.endStream : 0,
          stream.id,
          head,
          stream.queueOffset,
          stream.queueOffset + allowed,
        );
        stream.sendWindow -= allowed;
        this.connSendWindow -= allowed;
        stream.queuedBytes -= allowed;
        if (allowed === left) {
          queue.shift();
          stream.queueOffset = 0;
        } else {
          stream.queueOffset += allowed;
        }
        if (last) {
          this.owner.localEnd(stream);
          return;
        }
      }
    }
    if (stream.endPending) {
      const trailers = stream.trailersPending;
      if (trailers !== undefined) {
        stream.trailersPending = undefined;
        this.writeHeaderBlock(stream.id, trailers, true);
      } else {
        this.writeFrame(
          FrameType.data,
          Flag.endStream,
          stream.id,
          undefined,
          0,
          0,
        );
      }
      this.owner.localEnd(stream);
      return;
    }
    if (!this.congested) stream.releaseWaiter();
  }

  /** Queues a WINDOW_UPDATE frame (`streamId` 0: the connection). */
  writeWindowUpdate(streamId: number, increment: number): void {
    this.reserve(frameHeaderBytes + 4);
    writeFrameHeader(
      this.out,
      this.outPos,
      4,
      FrameType.windowUpdate,
      0,
      streamId,
    );
    this.out.writeUInt32BE(increment, this.outPos + frameHeaderBytes);
    this.outPos += frameHeaderBytes + 4;
    this.scheduleFlush();
  }

  /** Queues a RST_STREAM frame with error code `code`. */
  writeRstStream(streamId: number, code: number): void {
    this.reserve(frameHeaderBytes + 4);
    writeFrameHeader(
      this.out,
      this.outPos,
      4,
      FrameType.rstStream,
      0,
      streamId,
    );
    this.out.writeUInt32BE(code, this.outPos + frameHeaderBytes);
    this.outPos += frameHeaderBytes + 4;
    this.scheduleFlush();
  }

  /** Queues a GOAWAY frame; `debug` is its debug data (ASCII). */
  writeGoaway(lastStreamId: number, code: number, debug = ""): void {
    const debugBytes = Buffer.byteLength(debug);
    this.reserve(frameHeaderBytes + 8 + debugBytes);
    writeFrameHeader(
      this.out,
      this.outPos,
      8 + debugBytes,
      FrameType.goaway,
      0,
      0,
    );
    const p = this.outPos + frameHeaderBytes;
    this.out.writeUInt32BE(lastStreamId, p);
    this.out.writeUInt32BE(code, p + 4);
    this.out.write(debug, p + 8);
    this.outPos = p + 8 + debugBytes;
    this.scheduleFlush();
  }

  /** Queues HEADERS, split into CONTINUATION frames beyond the peer's frame size. */
  writeHeaderBlock(streamId: number, block: Buffer, endStream: boolean): void {
    this.respondedSincePing = true;
    const max = this.peerMaxFrameBytes;
    const endFlag = endStream ? Flag.endStream : 0;
    if (block.length <= max) {
      this.writeFrame(
        FrameType.headers,
        endFlag | Flag.endHeaders,
        streamId,
        block,
        0,
        block.length,
      );
      return;
    }
    this.writeFrame(FrameType.headers, endFlag, streamId, block, 0, max);
    for (let p = max; p < block.length; p += max) {
      const q = Math.min(block.length, p + max);
      this.writeFrame(
        FrameType.continuation,
        q === block.length ? Flag.endHeaders : 0,
        streamId,
        block,
        p,
        q,
      );
    }
  }

  /**
   * Queues one frame whose payload is `payload[start, end)` (none when `payload` is
   * undefined); nothing once the connection is dead.
   */
  writeFrame(
    type: number,
    flags: number,
    streamId: number,
    payload: Uint8Array | undefined,
    start: number,
    end: number,
  ): void {
    if (this.owner.isClosed()) return;
    const size = end - start;
    this.reserve(frameHeaderBytes + size);
    writeFrameHeader(this.out, this.outPos, size, type, flags, streamId);
    this.outPos += frameHeaderBytes;
    if (payload !== undefined && size > 0) {
      this.out.set(payload.subarray(start, end), this.outPos);
      this.outPos += size;
    }
    this.scheduleFlush();
  }

  private reserve(bytes: number): void {
    if (this.outPos + bytes <= this.out.length) return;
    const grown = Buffer.allocUnsafe(
      Math.max(this.out.length * 2, this.outPos + bytes),
    );
    this.out.copy(grown, 0, 0, this.outPos);
    this.out = grown;
  }

  private scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(this.flushNow);
  }

  /** Writes everything buffered with one socket write. */
  flush(): void {
    this.flushScheduled = false;
    // Once per event-loop turn in which something was sent: a new turn's budget.
    this.owner.onFlushed();
    const size = this.outPos;
    if (size === 0 || this.socket.destroyed) {
      this.outPos = 0;
      return;
    }
    // The socket may hold the chunk until written: hand it a copy and keep the buffer.
    const chunk = Buffer.allocUnsafe(size);
    this.out.copy(chunk, 0, 0, size);
    this.outPos = 0;
    if (this.out.length > 4 * outputInitialBytes)
      this.out = Buffer.allocUnsafe(outputInitialBytes);
    this.socket.write(chunk);
    if (
      !this.congested &&
      this.socket.writableLength > this.maxQueuedOutputBytes
    ) {
      // The peer does not read: stop reading its requests until it catches up.
      this.congested = true;
      this.socket.pause();
    }
  }
}
