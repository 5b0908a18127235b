import type { Code } from "@connectrpc/connect";
import type { H2Stream, StreamSink } from "../../http2/h2-stream.js";
import { encodeHeaderBlock } from "../../http2/hpack.js";
import {
  grpcContentTypes,
  shouldRateLimitPath,
  UnaryCall,
  type UnaryCallOptions,
} from "./unary-call.js";

// Unary gRPC ShouldRateLimit served inline on the built-in HTTP/2 engine: the shared unary
// call state machine (unary-call.ts) answering on an `H2Stream`, with precomputed header
// blocks; the call is also the stream's sink, so a call allocates this one object.

/** Options of {@link serveShouldRateLimit}. */
export type GrpcUnaryOptions = UnaryCallOptions;

/** `:status 200` + content-type, per accepted content type (same index as grpcContentTypes). */
const okHeaders = grpcContentTypes.map((contentType) =>
  encodeHeaderBlock([
    [":status", "200"],
    ["content-type", contentType],
  ]),
);
const okTrailers = encodeHeaderBlock([["grpc-status", "0"]]);

const emptyBody = Buffer.alloc(0);

/**
 * Index into the accepted content types when `stream` is a call the fast path serves:
 * `POST` ShouldRateLimit, `application/grpc` or `application/grpc+proto`, no or identity
 * `grpc-encoding`; -1 otherwise.
 */
export function fastPathContentType(stream: H2Stream): number {
  if (stream.path !== shouldRateLimitPath || stream.method !== "POST")
    return -1;
  let contentType = -1;
  let encoding: string | undefined;
  const fields = stream.headerFields;
  for (let i = 0; i < fields.length; i += 2) {
    const name = fields[i];
    if (name === "content-type") {
      const value = fields[i + 1];
      contentType =
        value === grpcContentTypes[0]
          ? 0
          : value === grpcContentTypes[1]
            ? 1
            : -1;
    } else if (name === "grpc-encoding") {
      encoding = fields[i + 1];
    }
  }
  return encoding === undefined || encoding === "identity" ? contentType : -1;
}

/** One unary call on an {@link H2Stream}; also the stream's sink. */
class BuiltinUnaryCall extends UnaryCall implements StreamSink {
  readonly stream: H2Stream;
  /** Index into grpcContentTypes. */
  readonly contentType: number;

  constructor(
    stream: H2Stream,
    options: GrpcUnaryOptions,
    contentType: number,
  ) {
    // The stream carries the header fields (read only for trace context).
    super(options, stream);
    this.stream = stream;
    this.contentType = contentType;
  }

  onData(stream: H2Stream, chunk: Buffer): void {
    stream.consumed(chunk.length);
    this.receive(chunk);
  }

  onEnd(): void {
    this.end();
  }

  onAbort(): void {
    this.abort();
  }

  protected isGone(): boolean {
    return this.stream.isClosed();
  }

  protected respondError(code: Code, message: string): void {
    this.stream.respond(
      encodeHeaderBlock([
        [":status", "200"],
        [
          "content-type",
          grpcContentTypes[this.contentType] ?? grpcContentTypes[0],
        ],
        ["grpc-status", String(code)],
        ["grpc-message", encodeURIComponent(message)],
      ]),
      true,
    );
  }

  protected respondMessage(frame: Buffer): void {
    const stream = this.stream;
    stream.respond(
      okHeaders[this.contentType] ?? okHeaders[0] ?? emptyBody,
      false,
    );
    stream.write(frame);
    stream.end(okTrailers);
  }

  protected contain(err: unknown): void {
    this.stream.fail(err);
  }

  /**
   * The stream holds its concurrency slot until the decision is done, even if the client
   * resets it (rapid reset).
   */
  protected override beginWork(): void {
    this.stream.beginWork();
  }

  protected override endWork(): void {
    this.stream.endWork();
  }
}

/**
 * Serves `stream`, a call {@link fastPathContentType} accepted (`contentType` is its result):
 * reads the envelope, honours `grpc-timeout`, calls the handler, answers once.
 */
export function serveShouldRateLimit(
  stream: H2Stream,
  contentType: number,
  options: GrpcUnaryOptions,
): void {
  const call = new BuiltinUnaryCall(stream, options, contentType);
  stream.sink = call;
  call.startDeadline(stream.header("grpc-timeout"));
}
