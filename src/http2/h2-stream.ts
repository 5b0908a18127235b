import type { Http2Connection } from "./connection.js";
import { ErrorCode } from "./frames.js";
import { encodeHeaderBlock } from "./hpack.js";
import type { OutputQueue } from "./output-queue.js";
import type { RequestPseudoHeaders } from "./request-headers.js";

// One request stream of an {@link Http2Connection} as the server that answers it sees it, and
// the sink through which the connection reports the request's body, end and abort.

/** What a request stream reports to whoever serves it (called as methods of the sink). */
export interface StreamSink {
  /**
   * A piece of the request body. `chunk` is a view into the received socket data (not
   * copied); it stays valid, but the receiver must call {@link H2Stream.consumed} once it no
   * longer holds bytes it has not processed, so that large bodies keep flowing.
   */
  onData(stream: H2Stream, chunk: Buffer): void;
  /** The request is complete (END_STREAM, after any trailers). */
  onEnd(stream: H2Stream): void;
  /**
   * The stream is gone before the response was complete: the peer reset it (RST_STREAM), the
   * connection closed, or a protocol error reset it. Nothing written afterwards is sent.
   */
  onAbort(stream: H2Stream, errorCode: number): void;
}

/** State of a stream (RFC 9113 §5.1), as far as a server-side request stream has one. */
export type StreamState = "open" | "halfClosedRemote" | "closed";

/**
 * One request stream (RFC 9113 §5.1, server side): created open (or half-closed (remote)
 * when the request had no body), closed once both sides ended or either reset it.
 *
 * The request's header fields are a flat list `[name0, value0, name1, value1, …]` with
 * lower-case names as HPACK decoded them; the pseudo-header fields are also on their own
 * properties.
 */
export class H2Stream {
  /** Stream identifier (odd, client-initiated). */
  readonly id: number;
  /** Request header fields, `[name0, value0, …]`, names lower-case, in wire order. */
  readonly headerFields: readonly string[];
  /** `:method`. */
  readonly method: string;
  /** `:path` (with the query string, if any). */
  readonly path: string;
  /** `:scheme`. */
  readonly scheme: string;
  /** `:authority`, or the `host` field, or "". */
  readonly authority: string;
  /** Whoever serves the request; set by `onStream`. */
  sink: StreamSink | undefined = undefined;
  /** What the server attached to the stream (the call state). */
  context: unknown = undefined;

  /** @internal */ state: StreamState;
  /** @internal */ readonly connection: Http2Connection;
  /** @internal the connection's write side */ readonly output: OutputQueue;
  /** @internal */ sendWindow: number;
  /** @internal */ recvWindow: number;
  /** @internal */ recvUnacked = 0;
  /** @internal */ receivedBytes = 0;
  /** @internal */ readonly contentLength: number;
  /** @internal */ headersSent = false;
  /** @internal */ localEnded = false;
  /** @internal */ endPending = false;
  /** @internal */ trailersPending: Buffer | undefined = undefined;
  /** @internal */ queue: Buffer[] | undefined = undefined;
  /** @internal */ queueOffset = 0;
  /** @internal */ queuedBytes = 0;
  /** @internal */ drainWaiter: (() => void) | undefined = undefined;
  /** @internal header list bytes, counted in the connection's memory budget */
  readonly headerBytes: number;
  /** @internal the server is working on the request (see {@link beginWork}) */
  working = false;
  /** @internal closed by the peer while working: still holds a concurrency slot */
  abandoned = false;

  /** @internal */
  constructor(
    connection: Http2Connection,
    id: number,
    fields: string[],
    pseudo: RequestPseudoHeaders,
  ) {
    this.connection = connection;
    this.output = connection.output;
    this.id = id;
    this.headerFields = fields;
    this.method = pseudo.method;
    this.path = pseudo.path;
    this.scheme = pseudo.scheme;
    this.authority = pseudo.authority;
    this.contentLength = pseudo.contentLength;
    this.headerBytes = pseudo.listBytes;
    this.state = "open";
    this.sendWindow = connection.peerInitialWindow;
    this.recvWindow = connection.initialWindow;
  }

  /**
   * Marks the start of work done for this request (a decision): until {@link endWork}, the
   * stream keeps its concurrency slot even if the peer resets it, so that resetting streams
   * cannot make more work run at once than SETTINGS_MAX_CONCURRENT_STREAMS (rapid reset,
   * CVE-2023-44487; grpc-go's defence).
   */
  beginWork(): void {
    this.working = true;
  }

  /** The work started by {@link beginWork} is done (answered or not). */
  endWork(): void {
    if (!this.working) return;
    this.working = false;
    if (this.abandoned) {
      this.abandoned = false;
      this.connection.releaseAbandoned();
    }
  }

  /**
   * Reports an exception thrown while serving this stream outside the connection's own
   * input handling (e.g. in an async continuation): the connection is closed with GOAWAY
   * INTERNAL_ERROR, the failure logged and counted; the process goes on.
   */
  fail(err: unknown): void {
    this.connection.internalError(err);
  }

  /** Whether the stream is closed (answered and done, reset, or its connection gone). */
  isClosed(): boolean {
    return this.state === "closed";
  }

  /** @internal whether the request is still arriving (state open). */
  isOpen(): boolean {
    return this.state === "open";
  }

  /** Whether the whole request (END_STREAM) has arrived. */
  get requestComplete(): boolean {
    return this.state !== "open";
  }

  /** Whether the socket is encrypted (TLS). */
  get encrypted(): boolean {
    return this.connection.encrypted;
  }

  /** The connection's socket (a `TLSSocket` when {@link encrypted}), for the peer's certificate. */
  get peerSocket(): object {
    return this.connection.peerSocket;
  }

  /** The value of the first request header field called `name` (lower-case), if any. */
  header(name: string): string | undefined {
    const fields = this.headerFields;
    for (let i = 0; i < fields.length; i += 2)
      if (fields[i] === name) return fields[i + 1];
    return undefined;
  }

  /**
   * Reports that `bytes` of received body were processed, so the peer may send more: the
   * stream window is reopened with one WINDOW_UPDATE per half window consumed.
   */
  consumed(bytes: number): void {
    if (this.state !== "open") return;
    this.recvUnacked += bytes;
    const initial = this.connection.initialWindow;
    if (this.recvUnacked < initial >>> 1) return;
    this.recvWindow += this.recvUnacked;
    this.output.writeWindowUpdate(this.id, this.recvUnacked);
    this.recvUnacked = 0;
  }

  /**
   * Sends the response header block (already HPACK-encoded, e.g. by `encodeHeaderBlock`);
   * once. Ignored when the stream is closed.
   */
  respond(block: Buffer, endStream: boolean): void {
    if (this.state === "closed" || this.headersSent) return;
    this.headersSent = true;
    this.output.writeHeaderBlock(this.id, block, endStream);
    if (endStream) this.connection.localEnd(this);
    else if (this.queue !== undefined || this.endPending)
      this.output.pump(this);
  }

  /** Sends response header fields (names lower-case), encoded with HPACK's static table. */
  respondWith(
    fields: readonly (readonly [string, string])[],
    endStream: boolean,
  ): void {
    this.respond(encodeHeaderBlock(fields), endStream);
  }

  /**
   * Queues response body bytes as DATA frames, within the peer's flow-control windows and
   * frame size; what does not fit waits for WINDOW_UPDATE. `data` must not change afterwards.
   */
  write(data: Buffer): void {
    if (this.state === "closed" || this.localEnded || this.endPending) return;
    if (data.length === 0) return;
    if (
      this.headersSent &&
      (this.queue === undefined || this.queue.length === 0) &&
      this.output.tryWriteData(this, data)
    )
      return;
    (this.queue ??= []).push(data);
    this.queuedBytes += data.length;
    this.output.pump(this);
  }

  /**
   * Ends the response: with `trailers` (an encoded header block) as a last HEADERS frame,
   * else with an empty DATA frame carrying END_STREAM; after any queued data.
   */
  end(trailers?: Buffer): void {
    if (this.state === "closed" || this.localEnded || this.endPending) return;
    this.endPending = true;
    this.trailersPending = trailers;
    this.output.pump(this);
  }

  /** Resets the stream (RST_STREAM with `errorCode`); the sink is not told. */
  reset(errorCode: number = ErrorCode.cancel): void {
    if (this.state === "closed") return;
    this.connection.resetStream(this, errorCode, false);
  }

  /**
   * Resolves once queued body bytes have been handed to the socket and the socket is not
   * congested, or the stream closed: the pace a streaming writer should keep.
   */
  writable(): Promise<void> {
    if (
      this.state === "closed" ||
      (this.queuedBytes === 0 && !this.output.congested)
    )
      return Promise.resolve();
    return new Promise((resolve) => {
      const previous = this.drainWaiter;
      this.drainWaiter = () => {
        previous?.();
        resolve();
      };
    });
  }

  /** @internal */
  releaseWaiter(): void {
    const waiter = this.drainWaiter;
    if (waiter === undefined) return;
    this.drainWaiter = undefined;
    waiter();
  }
}
