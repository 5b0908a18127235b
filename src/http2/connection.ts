import type { Socket } from "node:net";
import type { Http2ConnectionOptions } from "./connection-options.js";
import {
  ConnectionLifecycle,
  recentlyResetCapacity,
} from "./connection-lifecycle.js";
import {
  clientPreface,
  ErrorCode,
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
import { headerShareOfMemory, http2LimitDefaults } from "./limits.js";
import {
  isValidTrailers,
  parseRequestHeaders,
  type RequestPseudoHeaders,
} from "./request-headers.js";

// One HTTP/2 connection, server side (RFC 9113): the frame state machine (preface, frames,
// header blocks, the stream states, receive-side flow control, the abuse limits a frame can
// hit). Lifecycle and stream bookkeeping are connection-lifecycle.ts, the write side
// output-queue.ts, the streams' API h2-stream.ts. What the streams carry is someone else's
// business: each new request is handed to `onStream`, which attaches a `StreamSink`.

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

/**
 * A server-side HTTP/2 connection over a connected socket (cleartext or TLS). It starts by
 * sending its SETTINGS, expects the client preface, and serves until the socket closes, a
 * connection error ends it (GOAWAY with the error, then close), or {@link shutdown} drains it.
 *
 * Output: frames are appended to one buffer and written with one socket write per
 * event-loop turn (`setImmediate`), so all answers decided in one turn share one syscall
 * (output-queue.ts).
 */
export class Http2Connection extends ConnectionLifecycle {
  private readonly decoder = new HpackDecoder();
  private readonly maxContinuationFrames: number;
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
  /** Ids of streams the peer reset (RST_STREAM), remembered as the ones we reset. */
  private readonly resetByPeer: number[] = [];
  private connRecvUnacked = 0;

  /**
   * Serves `socket`, connected (and TLS-handshaken, if TLS) with a client that speaks HTTP/2
   * with prior knowledge or negotiated `h2`.
   */
  constructor(socket: Socket, options: Http2ConnectionOptions) {
    super(socket, options);
    this.maxContinuationFrames =
      options.maxContinuationFrames ?? http2LimitDefaults.maxContinuationFrames;
  }

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

  /** The batch was handed to the socket: a new event-loop turn's budget. @internal */
  onFlushed(): void {
    this.turnBytes = 0;
    this.turnStreams = 0;
  }

  protected onClosed(): void {
    this.options.onClose?.(this);
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
