import { Code, ConnectError, createContextValues } from "@connectrpc/connect";
import type {
  UniversalServerRequest,
  UniversalServerResponse,
} from "@connectrpc/connect/protocol";
import type { ConnectDispatcher } from "../connect-handler.js";
import { peerIdentityOf } from "../peer-identity-cache.js";
import { peerIdentityKey } from "../../service/peer-identity.js";
import type { H2Stream, StreamSink } from "../../http2/h2-stream.js";
import { ErrorCode } from "../../http2/frames.js";
import { encodeHeaderBlock } from "../../http2/hpack.js";
// Response header fields HTTP/2 forbids are dropped if a handler sets them.
import { connectionSpecific } from "../../http2/request-headers.js";
import { isDeadlineBeyondTimerRange } from "./envelope.js";

// Everything the gRPC fast path does not serve (health, Explain, gRPC-web, Connect, compressed
// calls, unknown paths) goes to the Connect router through its universal-handler API, as
// `universalRequestFromNodeRequest` / `universalResponseToNodeResponse` do for node:http2.

const notFound = encodeHeaderBlock([[":status", "404"]]);

/**
 * Serves one request stream with the Connect router: 404 for a path it does not know, else a
 * `UniversalServerRequest` (body: the DATA frames, read with flow control; signal: aborted
 * when the client resets the stream or the connection goes) and the handler's response
 * written back as HEADERS, DATA and trailers.
 */
export function serveWithConnect(
  stream: H2Stream,
  dispatcher: ConnectDispatcher,
): void {
  const query = stream.path.indexOf("?");
  const pathname = query < 0 ? stream.path : stream.path.slice(0, query);
  const handler = dispatcher.handlerFor(pathname);
  if (handler === undefined) {
    // Answered once the request has ended (its body is discarded), so that the client's
    // frames never meet a closed stream (RFC 9113 §8.1 would allow answering at once).
    if (stream.requestComplete) respondNotFound(stream);
    else stream.sink = discardThenNotFound;
    return;
  }
  // The connection validated names and values (RFC 9113 §8.2.1, request-headers.ts); were
  // one to slip through, `Headers` and `URL` throw: a bad request, not a crash.
  const header = new Headers();
  let url: string;
  try {
    const fields = stream.headerFields;
    for (let i = 0; i < fields.length; i += 2) {
      const name = fields[i] ?? ":";
      const value = fields[i + 1] ?? "";
      if (
        name.charCodeAt(0) !== 0x3a /* : */ &&
        !isDeadlineBeyondTimerRange(name, value)
      )
        header.append(name, value);
    }
    const scheme = stream.encrypted ? "https" : "http";
    const authority = stream.authority === "" ? "localhost" : stream.authority;
    url = new URL(stream.path, `${scheme}://${authority}`).toString();
  } catch {
    stream.respondWith([[":status", "400"]], true);
    return;
  }
  const body = new RequestBody(stream);
  stream.sink = body;
  const request: UniversalServerRequest = {
    httpVersion: "2.0",
    method: stream.method,
    url,
    header,
    body,
    signal: body.abort.signal,
  };
  if (stream.encrypted) {
    const identity = peerIdentityOf(stream.peerSocket);
    if (identity !== undefined)
      request.contextValues = createContextValues().set(
        peerIdentityKey,
        identity,
      );
  }
  stream.beginWork();
  dispatcher
    .serve(handler, request)
    .then((response) => writeResponse(stream, response))
    .catch((reason: unknown) => {
      dispatcher.reportFailure(reason, handler);
    })
    .catch((err: unknown) => {
      stream.fail(err);
    })
    .finally(() => {
      stream.endWork();
    });
}

/** HEADERS 404, then an empty DATA with END_STREAM: node:http2's framing of `res.end()`. */
function respondNotFound(stream: H2Stream): void {
  stream.respond(notFound, false);
  stream.end();
}

/** Sink of a request to an unknown path: its body is dropped, the 404 sent at its end. */
const discardThenNotFound: StreamSink = {
  onData(stream, chunk) {
    stream.consumed(chunk.length);
  },
  onEnd(stream) {
    respondNotFound(stream);
  },
  onAbort() {
    // Nobody to answer.
  },
};

/** Writes a universal response: headers after the first body chunk, as connect-node does. */
async function writeResponse(
  stream: H2Stream,
  response: UniversalServerResponse,
): Promise<void> {
  const it = response.body?.[Symbol.asyncIterator]();
  try {
    let chunk = it === undefined ? undefined : await it.next();
    const trailer = encodeTrailer(response.trailer);
    if (stream.isClosed()) throw aborted();
    if ((chunk === undefined || chunk.done === true) && trailer === undefined) {
      stream.respond(encodeHead(response), false);
      stream.end();
      return;
    }
    stream.respond(encodeHead(response), false);
    if (it !== undefined && chunk !== undefined) {
      for (; chunk.done !== true; chunk = await it.next()) {
        const value = chunk.value;
        stream.write(
          Buffer.from(value.buffer, value.byteOffset, value.byteLength),
        );
        await stream.writable();
        if (stream.isClosed()) throw aborted();
      }
    }
    // Trailers set while the body was produced (gRPC status) are read after it.
    stream.end(encodeTrailer(response.trailer));
  } catch (err) {
    if (!stream.isClosed()) stream.reset(ErrorCode.internalError);
    throw err;
  } finally {
    await it?.return?.().catch(() => undefined);
  }
}

function aborted(): ConnectError {
  return new ConnectError("stream closed by the client", Code.Aborted);
}

function encodeHead(response: UniversalServerResponse): Buffer {
  const fields: [string, string][] = [[":status", String(response.status)]];
  response.header?.forEach((value, name) => {
    if (!connectionSpecific.has(name)) fields.push([name, value]);
  });
  return encodeHeaderBlock(fields);
}

function encodeTrailer(trailer: Headers | undefined): Buffer | undefined {
  if (trailer === undefined) return undefined;
  const fields: [string, string][] = [];
  trailer.forEach((value, name) => {
    if (!connectionSpecific.has(name)) fields.push([name, value]);
  });
  return fields.length === 0 ? undefined : encodeHeaderBlock(fields);
}

/**
 * The request body as an async iterable of DATA payloads; each chunk handed out is reported
 * consumed, which reopens the stream's flow-control window. Also the stream's sink.
 */
class RequestBody implements AsyncIterable<Uint8Array>, StreamSink {
  readonly abort = new AbortController();
  private readonly stream: H2Stream;
  private readonly chunks: Buffer[] = [];
  private ended = false;
  private error: ConnectError | undefined = undefined;
  private waiting:
    | {
        resolve: (result: IteratorResult<Uint8Array>) => void;
        reject: (err: unknown) => void;
      }
    | undefined = undefined;

  constructor(stream: H2Stream) {
    this.stream = stream;
  }

  onData(_stream: H2Stream, chunk: Buffer): void {
    const waiting = this.waiting;
    if (waiting !== undefined) {
      this.waiting = undefined;
      this.stream.consumed(chunk.length);
      waiting.resolve({ done: false, value: chunk });
      return;
    }
    this.chunks.push(chunk);
  }

  onEnd(): void {
    this.ended = true;
    const waiting = this.waiting;
    if (waiting === undefined) return;
    this.waiting = undefined;
    waiting.resolve({ done: true, value: undefined });
  }

  onAbort(_stream: H2Stream, errorCode: number): void {
    const error = connectErrorFromResetCode(errorCode);
    this.error = error;
    this.abort.abort(error);
    const waiting = this.waiting;
    if (waiting === undefined) return;
    this.waiting = undefined;
    waiting.reject(error);
  }

  [Symbol.asyncIterator](): AsyncIterator<Uint8Array> {
    return {
      next: () => this.next(),
      return: () => {
        this.ended = true;
        this.chunks.length = 0;
        return Promise.resolve({ done: true, value: undefined });
      },
    };
  }

  private next(): Promise<IteratorResult<Uint8Array>> {
    const chunk = this.chunks.shift();
    if (chunk !== undefined) {
      this.stream.consumed(chunk.length);
      return Promise.resolve({ done: false, value: chunk });
    }
    if (this.error !== undefined) return Promise.reject(this.error);
    if (this.ended) return Promise.resolve({ done: true, value: undefined });
    return new Promise((resolve, reject) => {
      this.waiting = { resolve, reject };
    });
  }
}

/** The error a reset stream's signal is aborted with (connect-node's mapping). */
function connectErrorFromResetCode(errorCode: number): ConnectError {
  const message = `http/2 stream closed with error code 0x${errorCode.toString(16)}`;
  switch (errorCode) {
    case ErrorCode.refusedStream:
      return new ConnectError(message, Code.Unavailable);
    case ErrorCode.cancel:
      return new ConnectError(message, Code.Canceled);
    case ErrorCode.enhanceYourCalm:
      return new ConnectError(message, Code.ResourceExhausted);
    case ErrorCode.inadequateSecurity:
    case ErrorCode.http11Required:
      return new ConnectError(message, Code.PermissionDenied);
    case ErrorCode.noError:
    case ErrorCode.streamClosed:
      return new ConnectError(message, Code.Aborted);
    default:
      return new ConnectError(message, Code.Internal);
  }
}
